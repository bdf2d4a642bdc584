// tests/unit/test_image.cpp — io/image.hpp's crop boxes in closed form (torchvision's
// RandomResizedCrop and Resize + CenterCrop), Pillow's resampler on images whose result is known,
// bad-image errors, and the decode pool (src/io/encoded.hpp). Pixel equality with Pillow on real
// JPEG/PNG files: tests/cli/test_encoded_images.sh.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

#include "dtrain/dnn/counter_rng.hpp"
#include "common/jpeg_writer.hpp"
#include "dtrain/io/image.hpp"
#include "io/encoded.hpp"
#include "io/resample_isa.hpp"

namespace dtrain {
namespace {

double u01(std::uint64_t key, std::uint64_t n) {
  return static_cast<double>(counter_hash(key, n) >> 11) / 9007199254740992.0;
}

/// The boxes whose first try fits an image of W×H, in closed form (torchvision's formula applied
/// to the first two draws), checked against random_resized_crop_box(); returns how many fit.
int check_first_draws(int W, int H, const CropRange& r) {
  int checked = 0;
  for (std::uint64_t key = 1; key <= 200; ++key) {
    const double area = W * H * (r.scale_min + (r.scale_max - r.scale_min) * u01(key, 0));
    const double lr0 = std::log(r.ratio_min), lr1 = std::log(r.ratio_max);
    const double ratio = std::exp(lr0 + (lr1 - lr0) * u01(key, 1));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(area * ratio)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(area / ratio)));
    if (w > W || h > H) continue;
    const CropBox b = random_resized_crop_box(W, H, key, r);
    EXPECT_EQ(b.w, w) << key;
    EXPECT_EQ(b.h, h) << key;
    EXPECT_EQ(b.y, static_cast<int>(counter_hash(key, 20) % static_cast<std::uint64_t>(H - h + 1)));
    EXPECT_EQ(b.x, static_cast<int>(counter_hash(key, 21) % static_cast<std::uint64_t>(W - w + 1)));
    ++checked;
  }
  return checked;
}

TEST(ImageTransform, RandomResizedCropFirstDrawInClosedForm) {
  EXPECT_GT(check_first_draws(500, 375, CropRange{}), 150);
  // Default arguments are torchvision's scale (0.08, 1) and ratio (3/4, 4/3).
  EXPECT_EQ(random_resized_crop_box(500, 375, 42),
            random_resized_crop_box(500, 375, 42, CropRange{0.08, 1.0, 0.75, 4.0 / 3.0}));
}

TEST(ImageTransform, RandomResizedCropTakesTheScaleAndRatioRanges) {
  // --rrc-scale 0.35,1: the same formula over the narrower range; on 28×28 images as trained on.
  EXPECT_GT(check_first_draws(28, 28, CropRange{0.35, 1.0, 0.75, 4.0 / 3.0}), 100);
  EXPECT_GT(check_first_draws(500, 375, CropRange{0.5, 0.6, 0.5, 2.0}), 150);
  // Every crop's area stays in the range (up to the rounding of w and h), and a fixed scale and
  // ratio give one size: 25 % of 400×400 at ratio 1 is 200×200 wherever it lies.
  const CropRange narrow{0.35, 1.0, 0.75, 4.0 / 3.0};
  for (std::uint64_t key = 0; key < 2000; ++key) {
    const CropBox b = random_resized_crop_box(320, 240, mix_seed(3, key), narrow);
    const double frac = static_cast<double>(b.w) * b.h / (320.0 * 240.0);
    ASSERT_GT(frac, 0.34) << key;
    ASSERT_LE(b.x + b.w, 320);
    ASSERT_LE(b.y + b.h, 240);
    const CropBox f = random_resized_crop_box(400, 400, key, CropRange{0.25, 0.25, 1, 1});
    ASSERT_EQ(f.w, 200);
    ASSERT_EQ(f.h, 200);
  }
}

TEST(ImageTransform, RandomResizedCropStaysInsideWithTheRecipesScaleAndRatio) {
  double min_frac = 1, max_frac = 0;
  std::set<int> xs;
  for (std::uint64_t key = 0; key < 5000; ++key) {
    const CropBox b = random_resized_crop_box(320, 240, mix_seed(7, key));
    ASSERT_GE(b.x, 0);
    ASSERT_GE(b.y, 0);
    ASSERT_LE(b.x + b.w, 320);
    ASSERT_LE(b.y + b.h, 240);
    const double frac = static_cast<double>(b.w) * b.h / (320.0 * 240.0);
    min_frac = std::min(min_frac, frac);
    max_frac = std::max(max_frac, frac);
    const double r = static_cast<double>(b.w) / b.h;
    EXPECT_GT(r, 0.75 * 0.9);  // rounding of small sides widens the range a little
    EXPECT_LT(r, 4.0 / 3 * 1.1);
    xs.insert(b.x);
  }
  EXPECT_NEAR(min_frac, 0.08, 0.01);
  EXPECT_GT(max_frac, 0.9);
  EXPECT_GT(xs.size(), 100u);  // offsets spread
  // Pure function of the key.
  EXPECT_EQ(random_resized_crop_box(320, 240, 99), random_resized_crop_box(320, 240, 99));
  EXPECT_NE(random_resized_crop_box(320, 240, 99), random_resized_crop_box(320, 240, 100));
}

TEST(ImageTransform, RandomResizedCropFallsBackToTheClampedCentre) {
  // No try fits a 1000×10 strip (h ≥ sqrt(800 / (4/3)) > 10): torchvision's central crop with the
  // ratio clamped to 4/3: h = 10, w = round(13.33) = 13, x = (1000 − 13) // 2.
  EXPECT_EQ(random_resized_crop_box(1000, 10, 5), (CropBox{493, 0, 13, 10}));
  EXPECT_EQ(random_resized_crop_box(10, 1000, 5), (CropBox{0, 493, 10, 13}));
  // With ratio (1, 1) the fallback is the central square: 10×10 at x = (1000 − 10) // 2.
  EXPECT_EQ(random_resized_crop_box(1000, 10, 5, CropRange{0.08, 1, 1, 1}),
            (CropBox{495, 0, 10, 10}));
}

TEST(ImageTransform, CenterCropBoxIsTorchvisionsResizeAndCenterCrop) {
  int rw = 0, rh = 0;
  // 500×375 → Resize(256): 341×256 (int(256·500/375) = 341); crop 224 at round(58.5) = 58, 16.
  EXPECT_EQ(center_crop_box(500, 375, 256, 224, rw, rh), (CropBox{58, 16, 224, 224}));
  EXPECT_EQ(rw, 341);
  EXPECT_EQ(rh, 256);
  // Portrait: 375×500 → 256×341; square stays square.
  EXPECT_EQ(center_crop_box(375, 500, 256, 224, rw, rh), (CropBox{16, 58, 224, 224}));
  EXPECT_EQ(center_crop_box(64, 64, 32, 28, rw, rh), (CropBox{2, 2, 28, 28}));
  EXPECT_EQ(rw, 32);
}

// An extreme aspect ratio: Resize(R) makes the longer side R · long / short. The resampler's
// weights cost the centre crop's window, not that side (before: 167 MB per axis for this 2 × 65,500
// JPEG at R = 256, ~10 GB for a 1 × 2^20 PNG), and a side past 2^31 − 1 is a bad image, not an
// int overflow.
TEST(ImageTransform, CentreCropOfAnExtremeAspectCostsTheWindow) {
  const int W = 2, H = 65500;
  std::vector<std::uint8_t> px(static_cast<std::size_t>(W) * H);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>(i / W % 251);
  const std::vector<std::uint8_t> jpeg = testing::write_jpeg(px, W, H, 1);
  ImageDecoder dec;
  ImageTransform t;
  t.out = 16;
  t.resize = 256;
  t.dct_ratio = 0.0;
  Image8 scratch;
  std::vector<std::uint8_t> out(16 * 16);
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const CropBox box = transform_image(dec, jpeg.data(), jpeg.size(), 1, t, 1, scratch, out.data());
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  // The resized image is 256 × 8,384,000; the crop sits at its centre.
  EXPECT_EQ(box, (CropBox{120, 4191992, 16, 16}));
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "KiB more at the peak";
  // The centre rows of the image (about row 32,750, value 32,750 mod 251 = 120): grey near 120.
  for (std::uint8_t v : out) EXPECT_NEAR(v, 120, 2);
  int rw = 0, rh = 0;
  EXPECT_THROW(center_crop_box(1, 1 << 20, 4096, 16, rw, rh), ImageError);
  EXPECT_NO_THROW(center_crop_box(1, 1 << 20, 2047, 16, rw, rh));
  EXPECT_EQ(rh, 2047 << 20);
}

TEST(ImageTransform, ResampleIdentityConstantAndHalving) {
  Image8 img{6, 4, 3, {}};
  img.pixels.resize(6 * 4 * 3);
  std::iota(img.pixels.begin(), img.pixels.end(), 0);
  std::vector<std::uint8_t> out(img.pixels.size());
  resample_crop(img, {0, 0, 6, 4}, 6, 4, out.data());
  EXPECT_EQ(out, img.pixels);  // same size: Pillow's coefficients are the identity
  // Halving 4×2 → 2×1: Pillow's triangle widened to support 2 gives taps 3/7, 3/7, 1/7 at the
  // edge (row 0: (30 + 60 + 30) / 7 = 17.1 → 17, row 1: 400 / 7 → 57; second column 230 / 7 → 33
  // and 510 / 7 → 73), then the two rows average: 37 and 53.
  Image8 g{4, 2, 1, {10, 20, 30, 40, 50, 60, 70, 80}};
  std::vector<std::uint8_t> half(2);
  resample_crop(g, {0, 0, 4, 2}, 2, 1, half.data());
  EXPECT_EQ(half[0], 37);
  EXPECT_EQ(half[1], 53);
  Image8 flat{9, 7, 1, std::vector<std::uint8_t>(63, 77)};
  std::vector<std::uint8_t> o(5 * 3);
  resample_crop(flat, {1, 2, 7, 5}, 5, 3, o.data());
  for (auto v : o) EXPECT_EQ(v, 77);
}

// The resampler's instruction-set levels (scalar, SSE2, AVX2 where the CPU has it) give the same
// bytes: random images of 1 and 3 channels, shrinking and enlarging boxes, partial windows, odd
// row counts (AVX2 takes rows in pairs), packed and planar mirrored output.
TEST(ImageTransform, ResampleLevelsAgreeBitForBit) {
  std::printf("resampler level in use: %d (0 scalar, 1 SSE2, 2 AVX2)\n",
              static_cast<int>(resample_isa()));
  int compared = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    auto draw = [&, n = std::uint64_t{0}](int lo, int hi) mutable {
      return lo + static_cast<int>(u01(seed, n++) * (hi - lo + 1) * 0.999999);
    };
    const int c = seed % 5 == 0 ? 1 : 3;
    const int w = draw(1, 640), h = draw(1, 480);
    std::vector<std::uint8_t> pixels(static_cast<std::size_t>(w) * h * c);
    for (std::size_t i = 0; i < pixels.size(); ++i)
      pixels[i] = static_cast<std::uint8_t>(counter_hash(seed * 7919, i) >> 56);
    ResizeSpec r;
    r.x0 = draw(0, w - 1) * 0.75;
    r.y0 = draw(0, h - 1) * 0.75;
    r.x1 = std::min<double>(w, r.x0 + draw(1, w) + 0.25);
    r.y1 = std::min<double>(h, r.y0 + draw(1, h) + 0.25);
    r.out_w = draw(1, seed % 3 == 0 ? 900 : 300);
    r.out_h = draw(1, seed % 4 == 0 ? 700 : 300);
    r.window.x = draw(0, r.out_w - 1);
    r.window.y = draw(0, r.out_h - 1);
    r.window.w = draw(1, r.out_w - r.window.x);
    r.window.h = draw(1, r.out_h - r.window.y);
    const SourceImage src{pixels.data(), static_cast<std::size_t>(w) * c, c, w, h, 0, 0};
    const OutLayout layout{seed % 2 == 0, seed % 4 == 0};
    const std::size_t bytes = static_cast<std::size_t>(r.window.w) * r.window.h * c;
    std::vector<std::uint8_t> want(bytes), got(bytes);
    limit_resample_isa(ResampleIsa::scalar);
    resample_window(src, r, want.data(), layout);
    for (ResampleIsa isa : {ResampleIsa::sse2, ResampleIsa::avx2}) {
      limit_resample_isa(isa);
      std::fill(got.begin(), got.end(), 0);
      resample_window(src, r, got.data(), layout);
      ASSERT_EQ(got, want) << "seed " << seed << ": level " << static_cast<int>(resample_isa())
                           << " differs from scalar (" << w << "x" << h << "x" << c << " box "
                           << r.x0 << "," << r.y0 << "," << r.x1 << "," << r.y1 << " to " << r.out_w
                           << "x" << r.out_h << ")";
      ++compared;
    }
  }
  limit_resample_isa(ResampleIsa::avx2);
  EXPECT_EQ(compared, 120);
}

TEST(ImageDecode, BadBytesThrowImageErrorWithAReason) {
  ImageDecoder dec;
  Image8 img;
  const std::uint8_t junk[] = {'h', 'e', 'l', 'l', 'o'};
  EXPECT_THROW(dec.decode(junk, sizeof junk, 3, img), ImageError);
  EXPECT_THROW(dec.decode(junk, 0, 3, img), ImageError);
  const std::uint8_t jpeg_start[] = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F'};
  try {
    dec.decode(jpeg_start, sizeof jpeg_start, 3, img);
    FAIL() << "a truncated JPEG header decoded";
  } catch (const ImageError& e) {
    EXPECT_NE(std::string(e.what()).find("JPEG"), std::string::npos) << e.what();
  }
  const std::uint8_t png_sig[] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A,
                                  0,    0,   0,   13,  'I',  'H',  'D',  'R'};
  EXPECT_THROW(dec.decode(png_sig, sizeof png_sig, 1, img), ImageError);
}

// transform_cost orders a batch's images for the decode threads (longest first): in decoded
// pixels, the rows entropy-decoded down to the region's bottom across the image's width plus the
// region itself. Closed form with fixed boxes (exact DCT scaling off: dct_ratio 0): a 400×300
// image, output 32×32.
TEST(ImageTransform, CostCountsTheRowsDownToTheRegionAndTheRegion) {
  std::vector<std::uint8_t> px(400 * 300 * 3);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>(i * 37 % 251);
  const std::vector<std::uint8_t> jpeg = testing::write_jpeg(px, 400, 300, 3);
  ImageDecoder dec;
  ImageTransform t;
  t.out = 32;
  t.random_crop = true;
  t.dct_ratio = 0.0;
  const auto cost = [&](CropBox b) {
    t.box = b;
    return transform_cost(dec, jpeg.data(), jpeg.size(), t, 1);
  };
  // The resampler reads exactly the box here (a box of 32×32 → 32×32 output, no filter margin).
  EXPECT_DOUBLE_EQ(cost(CropBox{0, 0, 32, 32}), 32.0 * 400 + 32.0 * 32);
  EXPECT_DOUBLE_EQ(cost(CropBox{100, 200, 32, 32}), 232.0 * 400 + 32.0 * 32);
  // A larger box lower down costs more; a box at the top of the image less.
  EXPECT_GT(cost(CropBox{0, 100, 300, 200}), cost(CropBox{0, 0, 300, 200}));
  EXPECT_GT(cost(CropBox{0, 0, 300, 200}), cost(CropBox{0, 0, 100, 100}));
  // Bytes that are no image: no cost (the decode reports them).
  const std::uint8_t junk[] = {1, 2, 3, 4};
  EXPECT_EQ(transform_cost(dec, junk, sizeof junk, t, 1), 0.0);
}

// Bounded wait for a condition another thread makes true (false after ~2 s).
template <typename F>
bool eventually(F ready) {
  for (int k = 0; k < 2000; ++k) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return ready();
}

// Jobs published back to back, two in the pool at a time (as EncodedSource does): every item of
// every job runs exactly once, finish() returns only when its job's items have all run, and an
// item's exception comes out of its job's finish() with the pool working on afterwards.
TEST(JobPool, RunsEveryItemOnceAndRethrows) {
  for (int threads : {1, 2, 4}) {
    JobPool pool(threads);
    constexpr int kJobs = 40, kItems = 37;
    std::vector<std::vector<std::atomic<int>>> hits(kJobs);
    for (auto& h : hits) h = std::vector<std::atomic<int>>(kItems);
    JobPool::Job jobs[2];
    auto publish = [&](int k) {
      pool.publish(jobs[k % 2], kItems, [&hits, k](int i, int t) {
        ASSERT_GE(t, 0);
        ++hits[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)];
      });
    };
    publish(0);
    for (int k = 0; k < kJobs; ++k) {
      if (k + 1 < kJobs) publish(k + 1);
      pool.finish(jobs[k % 2]);
      for (auto& h : hits[static_cast<std::size_t>(k)]) ASSERT_EQ(h.load(), 1) << "job " << k;
    }
    JobPool::Job bad;
    pool.publish(bad, 10, [](int i, int) {
      if (i == 7) throw std::runtime_error("bad");
    });
    EXPECT_THROW(pool.finish(bad), std::runtime_error);
    int n = 0;
    pool.publish(bad, 0, [&](int, int) { ++n; });
    pool.finish(bad);
    EXPECT_EQ(n, 0);
    std::atomic<int> after{0};
    pool.publish(bad, 5, [&](int, int) { ++after; });
    pool.finish(bad);
    EXPECT_EQ(after.load(), 5) << threads << " threads";
  }
}

// The point of the pool: while one thread is still on the first job's slow item, the others run
// the next job's items (with one thread, nothing runs until finish()); thread numbers stay in
// [0, threads) and each runs one item at a time.
TEST(JobPool, IdleThreadsStartTheNextJob) {
  for (int threads : {1, 2, 4}) {
    JobPool pool(threads);
    JobPool::Job first, second;
    std::atomic<int> second_done{0}, seen_during_first{-1};
    std::vector<std::atomic<int>> running(static_cast<std::size_t>(threads));
    auto item = [&](int t) {
      EXPECT_LT(t, threads);
      EXPECT_EQ(running[static_cast<std::size_t>(t)].fetch_add(1), 0) << "thread " << t;
      return [&running, t] { --running[static_cast<std::size_t>(t)]; };
    };
    pool.publish(first, 1, [&](int, int t) {
      auto leave = item(t);
      // Bounded: with one thread the second job cannot start before this one is finished.
      if (threads > 1) eventually([&] { return second_done.load() == 8; });
      seen_during_first = second_done.load();
      leave();
    });
    pool.publish(second, 8, [&](int, int t) {
      auto leave = item(t);
      ++second_done;
      leave();
    });
    pool.finish(first);
    EXPECT_EQ(seen_during_first.load(), threads > 1 ? 8 : 0) << threads << " threads";
    pool.finish(second);
    EXPECT_EQ(second_done.load(), 8);
  }
}

// cancel(): no item starts after it, the running ones finish before it returns, the job can be
// published again; a pool destroyed with a job queued stops without running it out.
TEST(JobPool, CancelStopsAJobAndDestructionAbandonsOne) {
  for (int threads : {1, 2, 4}) {
    JobPool pool(threads);
    JobPool::Job job;
    std::atomic<int> started{0}, finished{0};
    pool.publish(job, 1000, [&](int, int) {
      ++started;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      ++finished;
    });
    if (threads > 1) ASSERT_TRUE(eventually([&] { return started.load() > 0; }));
    pool.cancel(job);
    const int at_cancel = started.load();
    EXPECT_EQ(finished.load(), at_cancel);  // the running ones ended before cancel() returned
    EXPECT_LT(at_cancel, 1000);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(started.load(), at_cancel);  // and none started since
    pool.cancel(job);                      // not queued: nothing to do
    std::atomic<int> again{0};
    pool.publish(job, 16, [&](int, int) { ++again; });
    pool.finish(job);
    EXPECT_EQ(again.load(), 16);
  }
  std::atomic<int> ran{0};
  {
    JobPool pool(3);
    JobPool::Job job;
    pool.publish(job, 100000, [&](int, int) {
      ++ran;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    });
    eventually([&] { return ran.load() > 0; });
  }  // the destructor stops the helpers after their current item
  EXPECT_LT(ran.load(), 100000);
}

}  // namespace
}  // namespace dtrain
