// tests/unit/test_augment.cpp — training augmentation of io/dataset.hpp (random crop with padding,
// horizontal flip): the draws are a pure function of (seed, epoch, sample index) and spread evenly;
// crops and flips of a known image by hand; the BatchReader applies exactly augment_image() of the
// sample's draw to the normalized sample, padding with the normalized value of raw 0.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <numeric>

#include "common/dataset_files.hpp"
#include "dtrain/io/dataset.hpp"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

TEST(Augment, DrawsArePureFunctionsOfSeedEpochAndSample) {
  const Augmentation a{4, true, 7, 3};
  std::map<int, int> dy_hist, dx_hist;
  int flips = 0, differ_epoch = 0, differ_seed = 0;
  const int n = 9000;
  for (int s = 0; s < n; ++s) {
    const AugmentDraw d = augment_draw(a, s), again = augment_draw(a, s);
    EXPECT_EQ(d.dy, again.dy);
    EXPECT_EQ(d.dx, again.dx);
    EXPECT_EQ(d.flip, again.flip);
    ASSERT_GE(d.dy, 0);
    ASSERT_LE(d.dy, 8);
    ASSERT_GE(d.dx, 0);
    ASSERT_LE(d.dx, 8);
    ++dy_hist[d.dy];
    ++dx_hist[d.dx];
    flips += d.flip;
    const AugmentDraw e = augment_draw(Augmentation{4, true, 7, 4}, s);  // next epoch
    differ_epoch += e.dy != d.dy || e.dx != d.dx || e.flip != d.flip;
    const AugmentDraw f = augment_draw(Augmentation{4, true, 8, 3}, s);  // other seed
    differ_seed += f.dy != d.dy || f.dx != d.dx || f.flip != d.flip;
  }
  // Offsets uniform on [0, 8] (1000 expected each), flips ≈ 1/2; another epoch or seed gives
  // another draw for all but ~1/162 of the samples (same dy, dx and flip by chance).
  for (int v = 0; v <= 8; ++v) {
    EXPECT_NEAR(dy_hist[v], n / 9, 120) << "dy " << v;
    EXPECT_NEAR(dx_hist[v], n / 9, 120) << "dx " << v;
  }
  EXPECT_NEAR(flips, n / 2, 200);
  EXPECT_GT(differ_epoch, n * 97 / 100);
  EXPECT_GT(differ_seed, n * 97 / 100);
  // Off switches: no crop keeps the offsets at 0, no flip never flips.
  for (int s = 0; s < 100; ++s) {
    const AugmentDraw c = augment_draw(Augmentation{0, true, 7, 3}, s);
    EXPECT_EQ(c.dy, 0);
    EXPECT_EQ(c.dx, 0);
    EXPECT_FALSE(augment_draw(Augmentation{4, false, 7, 3}, s).flip);
  }
}

TEST(Augment, CropAndFlipOfAKnownImage) {
  // Two channels of 3×4: channel 0 holds 1..12, channel 1 holds 101..112; pad values −1 and −2.
  std::vector<float> src(24);
  for (int i = 0; i < 12; ++i) src[i] = 1.0f + i, src[12 + i] = 101.0f + i;
  const float pad[2] = {-1.0f, -2.0f};
  std::vector<float> dst(24);
  // Centre (dy = dx = pad), no flip: the identity.
  augment_image(src.data(), dst.data(), 2, 3, 4, 2, AugmentDraw{2, 2, false}, pad);
  EXPECT_EQ(dst, src);
  // Shifted: top-left of the crop at (0, 3) in the padded image (pad 2): rows −2..0, columns 1..4.
  augment_image(src.data(), dst.data(), 2, 3, 4, 2, AugmentDraw{0, 3, false}, pad);
  const std::vector<float> shifted = {-1,  -1,  -1,  -1,  //
                                      -1,  -1,  -1,  -1,  //
                                      2,   3,   4,   -1,  //
                                      -2,  -2,  -2,  -2,  //
                                      -2,  -2,  -2,  -2,  //
                                      102, 103, 104, -2};
  EXPECT_EQ(dst, shifted);
  // Flip only: every row reversed.
  augment_image(src.data(), dst.data(), 2, 3, 4, 0, AugmentDraw{0, 0, true}, pad);
  const std::vector<float> mirrored = {4,   3,   2,   1,   8,   7,   6,   5,   12,  11,  10,  9,
                                       104, 103, 102, 101, 108, 107, 106, 105, 112, 111, 110, 109};
  EXPECT_EQ(dst, mirrored);
  // Crop then flip: crop at (3, 1) (rows 1..3 → 1, 2, pad; columns −1..2), then mirror.
  augment_image(src.data(), dst.data(), 2, 3, 4, 2, AugmentDraw{3, 1, true}, pad);
  const std::vector<float> both = {7,   6,   5,   -1, 11,  10,  9,   -1, -1, -1, -1, -1,
                                   107, 106, 105, -2, 111, 110, 109, -2, -2, -2, -2, -2};
  EXPECT_EQ(dst, both);
}

class AugmentReader : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dtrain_augment_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::vector<HostBatch> read_all(BatchReader& r) {
  std::vector<HostBatch> out;
  HostBatch b;
  while (r.next(b)) out.push_back(b);
  return out;
}

TEST_F(AugmentReader, ReaderAppliesTheSampleDrawToTheNormalizedSample) {
  for (const std::string dtype : {"uint8", "float32"}) {
    SCOPED_TRACE(dtype);
    testing::SyntheticSpec spec;
    spec.n = 50, spec.c = 3, spec.h = 6, spec.w = 5, spec.classes = 3, spec.dtype = dtype;
    const std::string path = file("a_" + dtype + ".h5");
    testing::write_synthetic_dataset(path, spec);
    const DatasetInfo info = open_dataset_info(path);
    ASSERT_EQ(info.mean.size(), 3u);  // normalized: the padding is (0 − mean)/std, not 0
    const std::vector<std::int64_t> idx = epoch_shard(50, 5, 2, 0, 1);
    BatchReader plain_reader(info, idx, 8);
    const auto plain = read_all(plain_reader);
    const Augmentation aug{2, true, 5, 2};
    BatchReader aug_reader(info, idx, 8, 2, 0, aug), again_reader(info, idx, 8, 3, 0, aug);
    const auto augmented = read_all(aug_reader), again = read_all(again_reader);
    BatchReader other_reader(info, idx, 8, 2, 0, Augmentation{2, true, 5, 3});  // next epoch
    const auto other = read_all(other_reader);
    ASSERT_EQ(augmented.size(), plain.size());
    const float pad[3] = {-info.mean[0] / info.stddev[0], -info.mean[1] / info.stddev[1],
                          -info.mean[2] / info.stddev[2]};
    const std::size_t sample = 3 * 6 * 5;
    int changed = 0, changed_epoch = 0;
    std::vector<float> want(sample);
    for (std::size_t k = 0; k < plain.size(); ++k) {
      EXPECT_EQ(augmented[k].y, plain[k].y);  // labels untouched
      EXPECT_EQ(augmented[k].x, again[k].x);  // same seed and epoch: the same crops and flips
      for (int p = 0; p < plain[k].n; ++p) {
        const std::int64_t s = idx[k * 8 + static_cast<std::size_t>(p)];
        augment_image(plain[k].x.data() + p * sample, want.data(), 3, 6, 5, 2, augment_draw(aug, s),
                      pad);
        const std::vector<float> got(augmented[k].x.begin() + p * sample,
                                     augmented[k].x.begin() + (p + 1) * sample);
        EXPECT_EQ(got, want) << "sample " << s;
        changed += !std::equal(got.begin(), got.end(), plain[k].x.begin() + p * sample);
        changed_epoch += !std::equal(got.begin(), got.end(), other[k].x.begin() + p * sample);
      }
    }
    // 1 in 50 draws is the identity (centre, no flip); another epoch redraws almost every sample.
    EXPECT_GT(changed, 40);
    EXPECT_GT(changed_epoch, 40);
    // Resuming mid-epoch (start_batch) gives the same augmented batches as reading through.
    BatchReader resumed(info, idx, 8, 2, 3, aug);
    const auto rest = read_all(resumed);
    ASSERT_EQ(rest.size(), augmented.size() - 3);
    for (std::size_t k = 0; k < rest.size(); ++k) EXPECT_EQ(rest[k].x, augmented[k + 3].x);
  }
}

}  // namespace
}  // namespace dtrain
