// tests/unit/test_jpeg_region.cpp — ImageDecoder::decode_region() (src/io/jpeg_region.hpp): the
// pixels of a region decode equal those of the whole-image decode, bit for bit, for every chroma
// subsampling libjpeg writes (4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1, gray), baseline and progressive,
// odd sizes, DCT scaling 1/1–1/8, gray and RGB output, rectangles on every edge, slivers and the
// whole image; only a region is decoded; a truncated file fails even when the region lies above
// the missing part. The JPEGs are noisy colour gradients (tests/common/jpeg_writer.hpp).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/jpeg_writer.hpp"
#include "dtrain/io/image.hpp"

namespace dtrain {
namespace {

struct Sampling {
  const char* name;
  int h, v;  ///< luma sampling factors (chroma 1×1); h = 0: grayscale
};
constexpr Sampling kSamplings[] = {{"4:4:4", 1, 1}, {"4:2:2", 2, 1}, {"4:2:0", 2, 2},
                                   {"4:4:0", 1, 2}, {"4:1:1", 4, 1}, {"gray", 0, 0}};

/// A width × height JPEG (quality 90) of a colour gradient with noise, which makes neighbouring
/// chroma samples differ, as the upsampling edge cases need.
std::vector<std::uint8_t> make_jpeg(int width, int height, const Sampling& s, bool progressive,
                                    unsigned seed) {
  const int comps = s.h == 0 ? 1 : 3;
  std::vector<std::uint8_t> px(static_cast<std::size_t>(width) * height * comps);
  std::mt19937 rng(seed);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < comps; ++c)
        px[(static_cast<std::size_t>(y) * width + x) * comps + c] = static_cast<std::uint8_t>(
            (x * (3 + c) + y * (5 - c) + static_cast<int>(rng() % 64)) % 256);
  return testing::write_jpeg(px, width, height, comps,
                             testing::JpegOptions{90, s.h, s.v, progressive});
}

/// Rectangles of a w × h image: random, on each edge, slivers, single pixels, the whole image.
std::vector<CropBox> rectangles(int w, int h, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<CropBox> r{{0, 0, w, h}, {0, 0, 1, 1}, {w - 1, h - 1, 1, 1}, {w / 2, 0, 1, h}};
  for (int i = 0; i < 60; ++i) {
    const int bw = 1 + static_cast<int>(rng() % static_cast<unsigned>(w));
    const int bh = 1 + static_cast<int>(rng() % static_cast<unsigned>(h));
    int x = static_cast<int>(rng() % static_cast<unsigned>(w - bw + 1));
    int y = static_cast<int>(rng() % static_cast<unsigned>(h - bh + 1));
    if (i % 5 == 1) x = 0;
    if (i % 5 == 2) x = w - bw;
    if (i % 5 == 3) y = 0;
    if (i % 5 == 4) y = h - bh;
    r.push_back(CropBox{x, y, i % 7 == 0 ? std::min(bw, 3) : bw, bh});
  }
  return r;
}

/// Number of rectangles whose pixels differ from the whole decode's (0 expected); checks that
/// each decoded region contains its rectangle.
int region_mismatches(ImageDecoder& dec, const std::vector<std::uint8_t>& jpg, int channels,
                      int denom, const std::string& what) {
  Image8 whole, part;
  dec.decode(jpg.data(), jpg.size(), channels, whole, denom);
  int bad = 0;
  for (const CropBox& want : rectangles(whole.width, whole.height, 7u + denom)) {
    const CropBox got = dec.decode_region(jpg.data(), jpg.size(), channels, denom, want, part);
    EXPECT_TRUE(got.x <= want.x && got.y <= want.y && got.x + got.w >= want.x + want.w &&
                got.y + got.h >= want.y + want.h)
        << what;
    EXPECT_EQ(part.width, got.w);
    EXPECT_EQ(part.height, got.h);
    for (int y = want.y; y < want.y + want.h; ++y) {
      const std::size_t n = static_cast<std::size_t>(want.w) * channels;
      const auto* a =
          whole.pixels.data() + (static_cast<std::size_t>(y) * whole.width + want.x) * channels;
      const auto* b =
          part.pixels.data() +
          (static_cast<std::size_t>(y - got.y) * part.width + (want.x - got.x)) * channels;
      if (!std::equal(a, a + n, b)) {
        ADD_FAILURE() << what << ": rectangle " << want.x << "," << want.y << " " << want.w << "x"
                      << want.h << " differs at row " << y;
        ++bad;
        break;
      }
    }
  }
  return bad;
}

TEST(JpegRegion, PixelsEqualTheWholeDecodeForEverySubsamplingScaleAndEdge) {
  ImageDecoder dec;
  for (const Sampling& s : kSamplings)
    for (bool progressive : {false, true})
      for (auto [w, h] : {std::pair{83, 61}, std::pair{130, 97}}) {
        const auto jpg = make_jpeg(w, h, s, progressive, static_cast<unsigned>(w + s.h));
        for (int denom : {1, 2, 4, 8})
          for (int channels : {1, 3}) {
            const std::string what = std::string(s.name) + (progressive ? " progressive " : " ") +
                                     std::to_string(w) + "x" + std::to_string(h) + " 1/" +
                                     std::to_string(denom) + " C=" + std::to_string(channels);
            ASSERT_EQ(region_mismatches(dec, jpg, channels, denom, what), 0) << what;
          }
      }
}

TEST(JpegRegion, DecodesOnlyTheRegion) {
  ImageDecoder dec;
  const auto jpg = make_jpeg(400, 300, kSamplings[2], false, 3);
  Image8 part;
  // 40×30 in the middle: iMCU columns (16 px for 4:2:0) plus two of margin each side; its rows.
  const CropBox got =
      dec.decode_region(jpg.data(), jpg.size(), 3, 1, CropBox{200, 150, 40, 30}, part);
  EXPECT_EQ(got.y, 150);
  EXPECT_EQ(got.h, 30);
  EXPECT_EQ(got.x, 192);  // 200 − 2, down to a multiple of 16
  EXPECT_GE(got.w, 44);
  EXPECT_LE(got.w, 44 + 16);
  EXPECT_EQ(part.pixels.size(), static_cast<std::size_t>(got.w) * got.h * 3);
}

TEST(JpegRegion, ATruncatedFileFailsEvenWhereTheRegionIsComplete) {
  ImageDecoder dec;
  Image8 img;
  for (bool progressive : {false, true}) {
    const auto jpg = make_jpeg(200, 160, kSamplings[2], progressive, 5);
    // Trailing bytes after the end marker are ignored, as libjpeg and Pillow do.
    auto padded = jpg;
    padded.insert(padded.end(), {0x00, 0x12, 0x34});
    EXPECT_NO_THROW(
        dec.decode_region(padded.data(), padded.size(), 3, 1, CropBox{0, 0, 8, 8}, img));
    const std::vector<std::uint8_t> cut(jpg.begin(), jpg.begin() + jpg.size() * 2 / 3);
    try {
      dec.decode_region(cut.data(), cut.size(), 3, 1, CropBox{0, 0, 8, 8}, img);
      ADD_FAILURE() << "a truncated JPEG decoded (progressive " << progressive << ")";
    } catch (const ImageError& e) {
      EXPECT_NE(std::string(e.what()).find("Premature end of JPEG file"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(dec.decode(cut.data(), cut.size(), 3, img), ImageError);
    // The decoder is usable after the error.
    EXPECT_NO_THROW(dec.decode(jpg.data(), jpg.size(), 1, img));
    EXPECT_EQ(img.width, 200);
  }
}

// A CMYK (or YCCK) JPEG is a valid file dtrain does not decode: a bad image whose reason says so,
// not "corrupt or truncated" (images_to_h5.py stores such images as RGB).
TEST(JpegRegion, ACmykFileIsUnsupportedNotCorrupt) {
  const std::vector<std::uint8_t> jpg = testing::write_jpeg(
      std::vector<std::uint8_t>(32 * 24 * 4, 100), 32, 24, 4);  // flat C, M, Y, K
  ImageDecoder dec;
  Image8 img;
  try {
    dec.decode(jpg.data(), jpg.size(), 3, img);
    ADD_FAILURE() << "a CMYK JPEG decoded";
  } catch (const ImageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a CMYK JPEG"), std::string::npos) << what;
    EXPECT_EQ(what.find("corrupt"), std::string::npos) << what;
  }
  const auto rgb = make_jpeg(40, 30, kSamplings[0], false, 3);
  EXPECT_NO_THROW(dec.decode(rgb.data(), rgb.size(), 3, img));  // the decoder is usable after it
}

}  // namespace
}  // namespace dtrain
