// dtrain/io/image.cpp — io/image.hpp: decoding (JPEG through jpeg_region.hpp, PNG with libpng),
// torchvision's crop boxes and transform_image(), which decodes only what the resize reads and
// resamples it with Pillow's bilinear filter (resample.cpp). See the header for the contracts and
// the sources followed.
#include "dtrain/io/image.hpp"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <limits>
#include <string>

#include "dtrain/dnn/counter_rng.hpp"
#include "jpeg_region.hpp"

namespace dtrain {
namespace {

constexpr std::int64_t kMaxPixels = std::int64_t{1} << 28;

void check_size(int w, int h) {
  if (w < 1 || h < 1 || static_cast<std::int64_t>(w) * h > kMaxPixels)
    throw ImageError("image size " + std::to_string(w) + "x" + std::to_string(h) +
                     " outside [1, 2^28 pixels]");
}

bool is_jpeg(const std::uint8_t* d, std::size_t n) {
  return n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF;
}
bool is_png(const std::uint8_t* d, std::size_t n) { return n >= 8 && png_sig_cmp(d, 0, 8) == 0; }

// ---- PNG (libpng's classic API: its transforms match Pillow's unpackers) ----
struct PngSource {
  const std::uint8_t* data;
  std::size_t left;
  char message[200] = "";
};

extern "C" void png_read_mem(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->left) png_error(png, "truncated PNG data");
  std::memcpy(out, src->data, n);
  src->data += n;
  src->left -= n;
}
extern "C" void png_on_error(png_structp png, png_const_charp msg) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof src->message, "%s", msg);
  png_longjmp(png, 1);
}
extern "C" void png_on_warning(png_structp, png_const_charp) {}

/// Decodes into out as 8-bit gray (1) or RGB (3) as stored, alpha stripped; returns false with
/// src.message set on error. No C++ object with a destructor is created between setjmp and the
/// calls that may longjmp, except `rows`, whose storage is owned by the caller's frame.
bool png_decode_raw(PngSource& src, Image8& out, std::vector<png_bytep>& rows) {
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
  if (!png) {
    std::snprintf(src.message, sizeof src.message, "out of memory");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    return false;
  }
  png_set_read_fn(png, &src, png_read_mem);
  png_set_user_limits(png, 1 << 20, 1 << 20);
  png_read_info(png, info);
  const int color = png_get_color_type(png, info);
  png_set_expand(png);    // palette → RGB, gray < 8 bits → 8, tRNS → alpha
  png_set_strip_16(png);  // the high byte, as Pillow's ";16B" unpackers
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const auto w = static_cast<int>(png_get_image_width(png, info));
  const auto h = static_cast<int>(png_get_image_height(png, info));
  if (w < 1 || h < 1 || static_cast<std::int64_t>(w) * h > kMaxPixels)
    png_error(png, "image too large");
  const int ch = png_get_channels(png, info);
  if (ch != 1 && ch != 3) png_error(png, "unsupported PNG channel layout");
  (void)color;
  out.width = w;
  out.height = h;
  out.channels = ch;
  out.pixels.resize(static_cast<std::size_t>(w) * h * ch);
  rows.resize(static_cast<std::size_t>(h));
  for (int y = 0; y < h; ++y)
    rows[static_cast<std::size_t>(y)] = out.pixels.data() + static_cast<std::size_t>(y) * w * ch;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

/// A PNG as `channels` (1 or 3): libpng's decode, then Pillow's luma or gray replicated.
void decode_png(const std::uint8_t* data, std::size_t size, int channels, Image8& out) {
  PngSource src{data, size};
  std::vector<png_bytep> rows;
  Image8 raw;
  if (!png_decode_raw(src, raw, rows))
    throw ImageError(std::string("corrupt or truncated PNG: ") + src.message);
  const std::size_t px = static_cast<std::size_t>(raw.width) * raw.height;
  if (raw.channels == channels) {
    std::swap(out, raw);
    return;
  }
  out.width = raw.width;
  out.height = raw.height;
  out.channels = channels;
  out.pixels.resize(px * channels);
  if (channels == 1) {
    rgb_to_gray(raw.pixels.data(), px, out.pixels.data());
  } else {
    for (std::size_t i = 0; i < px; ++i) std::fill_n(out.pixels.data() + 3 * i, 3, raw.pixels[i]);
  }
}

double uniform01(std::uint64_t key, std::uint64_t n) {
  return static_cast<double>(counter_hash(key, n) >> 11) * (1.0 / 9007199254740992.0);
}

int round_half_even(double v) { return static_cast<int>(std::nearbyint(v)); }

}  // namespace

void rgb_to_gray(const std::uint8_t* rgb, std::size_t pixels, std::uint8_t* gray) {
  for (std::size_t i = 0; i < pixels; ++i, rgb += 3)
    gray[i] = static_cast<std::uint8_t>(
        (rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16);
}

ImageDecoder::ImageDecoder() : jpeg_(std::make_unique<JpegDecoder>()) {}

ImageDecoder::~ImageDecoder() = default;

ImageHeader ImageDecoder::header(const std::uint8_t* data, std::size_t size) {
  if (is_jpeg(data, size)) return jpeg_->header(data, size);
  if (is_png(data, size)) {
    if (size < 24 || std::memcmp(data + 12, "IHDR", 4) != 0)
      throw ImageError("corrupt PNG header (no IHDR)");
    auto be32 = [&](std::size_t at) {
      return static_cast<std::int64_t>(data[at]) << 24 | data[at + 1] << 16 | data[at + 2] << 8 |
             data[at + 3];
    };
    const std::int64_t w = be32(16), ht = be32(20);
    if (w < 1 || ht < 1 || w > (1 << 20) || ht > (1 << 20))
      throw ImageError("corrupt PNG header (size)");
    check_size(static_cast<int>(w), static_cast<int>(ht));
    ImageHeader h;
    h.format = "png";
    h.width = static_cast<int>(w);
    h.height = static_cast<int>(ht);
    const int color = size > 25 ? data[25] : 0;
    h.channels = (color == 0 || color == 4) ? 1 : 3;
    return h;
  }
  throw ImageError(size == 0 ? "empty image (0 bytes)"
                             : "not a JPEG or PNG image (unknown signature)");
}

int ImageDecoder::decode(const std::uint8_t* data, std::size_t size, int channels, Image8& out,
                         int scale_denom) {
  const int d = is_jpeg(data, size) && (scale_denom == 2 || scale_denom == 4 || scale_denom == 8)
                    ? scale_denom
                    : 1;
  decode_region(data, size, channels, d, CropBox{0, 0, 1 << 30, 1 << 30}, out);
  return d;
}

CropBox ImageDecoder::decode_region(const std::uint8_t* data, std::size_t size, int channels,
                                    int scale_denom, const CropBox& want, Image8& out) {
  if (channels != 1 && channels != 3) throw ImageError("channels must be 1 or 3");
  if (is_jpeg(data, size)) return jpeg_->decode(data, size, channels, scale_denom, want, out);
  header(data, size);  // the signature and size checks
  if (scale_denom != 1) throw ImageError("a PNG cannot be decoded scaled (scale_denom 1 only)");
  decode_png(data, size, channels, out);
  return CropBox{0, 0, out.width, out.height};
}

CropBox random_resized_crop_box(int width, int height, std::uint64_t key, const CropRange& range) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(range.ratio_min), log_hi = std::log(range.ratio_max);
  const double s_lo = range.scale_min, s_hi = range.scale_max;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (s_lo + (s_hi - s_lo) * uniform01(key, 2 * attempt));
    const double ratio = std::exp(log_lo + (log_hi - log_lo) * uniform01(key, 2 * attempt + 1));
    const int w = round_half_even(std::sqrt(target * ratio));
    const int h = round_half_even(std::sqrt(target / ratio));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      CropBox b{0, 0, w, h};
      b.y = static_cast<int>(counter_hash(key, 20) % static_cast<std::uint64_t>(height - h + 1));
      b.x = static_cast<int>(counter_hash(key, 21) % static_cast<std::uint64_t>(width - w + 1));
      return b;
    }
  }
  // Fallback: the central crop, its aspect ratio clamped to [ratio_min, ratio_max].
  const double in_ratio = static_cast<double>(width) / height;
  CropBox b{0, 0, width, height};
  if (in_ratio < range.ratio_min) {
    b.h = round_half_even(width / range.ratio_min);
  } else if (in_ratio > range.ratio_max) {
    b.w = round_half_even(height * range.ratio_max);
  }
  b.h = std::clamp(b.h, 1, height);
  b.w = std::clamp(b.w, 1, width);
  b.y = (height - b.h) / 2;
  b.x = (width - b.w) / 2;
  return b;
}

CropBox center_crop_box(int width, int height, int resize, int crop, int& rw, int& rh) {
  // The longer side scaled as the shorter one is, in double: it may pass INT_MAX (a 1 × 2^20
  // image at --eval-resize 4096), which no resampler index can hold.
  const double longer =
      static_cast<double>(resize) * std::max(width, height) / std::max(1, std::min(width, height));
  if (longer > std::numeric_limits<int>::max())
    throw ImageError("resized to " + std::to_string(resize) + " on its shorter side, the " +
                     std::to_string(width) + "x" + std::to_string(height) +
                     " image would be more than 2^31 - 1 pixels long");
  (width <= height ? rw : rh) = resize;
  (width <= height ? rh : rw) = static_cast<int>(longer);
  CropBox b{0, 0, crop, crop};
  b.y = round_half_even((rh - crop) / 2.0);
  b.x = round_half_even((rw - crop) / 2.0);
  return b;
}

namespace {

/// Where transform_image() resamples from: Pillow's resize arguments on an image of width ×
/// height, whose pixel (0, 0) is pixel (x, y) of the image decoded at 1/denom.
struct ResamplePlan {
  int denom = 1;
  int width = 0, height = 0, x = 0, y = 0;
  ResizeSpec spec;
  CropBox box;  ///< the box transform_image() reports
};

/// Largest DCT denominator d ∈ {8, 4, 2} that keeps `extent` / d ≥ dct_ratio × need (JPEG only).
int pick_denom(const ImageHeader& h, double ratio, int ew, int eh, int need_w, int need_h) {
  if (ratio <= 0 || h.format != "jpeg") return 1;
  for (int d = 8; d >= 2; d /= 2)
    if (ew / d >= ratio * need_w && eh / d >= ratio * need_h) return d;
  return 1;
}

ResamplePlan plan_transform(const ImageHeader& h, const ImageTransform& t, std::uint64_t key) {
  const int s = t.out;
  ResamplePlan p;
  if (t.random_crop) {
    p.box = t.box.w > 0 ? t.box : random_resized_crop_box(h.width, h.height, key, t.range);
    if (p.box.x < 0 || p.box.y < 0 || p.box.w < 1 || p.box.h < 1 || p.box.x + p.box.w > h.width ||
        p.box.y + p.box.h > h.height)
      throw ImageError("crop box outside the image");
    p.denom = pick_denom(h, t.dct_ratio, p.box.w, p.box.h, s, s);
  } else {
    int rw = 0, rh = 0;
    p.box = center_crop_box(h.width, h.height, t.resize, s, rw, rh);
    if (p.box.x < 0 || p.box.y < 0) throw ImageError("centre crop larger than the resized image");
    p.denom = pick_denom(h, t.dct_ratio, h.width, h.height, rw, rh);
    p.width = (h.width + p.denom - 1) / p.denom;
    p.height = (h.height + p.denom - 1) / p.denom;
    p.spec = ResizeSpec{0, 0, double(p.width), double(p.height), rw, rh, p.box};
    return p;
  }
  const int d = p.denom;
  const CropBox& b = p.box;
  if (d == 1) {  // Pillow's img.crop(box).resize(): the crop is the resampler's whole image
    p.width = b.w;
    p.height = b.h;
    p.x = b.x;
    p.y = b.y;
    p.spec = ResizeSpec{0, 0, double(b.w), double(b.h), s, s, CropBox{0, 0, s, s}};
  } else {  // the same box in the 1/d image (float coordinates), resized with box= from there
    p.width = (h.width + d - 1) / d;
    p.height = (h.height + d - 1) / d;
    p.spec = ResizeSpec{double(b.x) / d,
                        double(b.y) / d,
                        std::min<double>(p.width, double(b.x + b.w) / d),
                        std::min<double>(p.height, double(b.y + b.h) / d),
                        s,
                        s,
                        CropBox{0, 0, s, s}};
  }
  return p;
}

}  // namespace

double transform_cost(ImageDecoder& dec, const std::uint8_t* data, std::size_t size,
                      const ImageTransform& t, std::uint64_t key) {
  try {
    const ImageHeader h = dec.header(data, size);
    const ResamplePlan p = plan_transform(h, t, key);
    const CropBox need = resample_source(p.width, p.height, p.spec);
    // Rows down to the region's bottom are entropy-decoded across the whole (1/d) width (those
    // above it skipped, but still Huffman-decoded: decode_region), the region itself is also
    // transformed and resampled.
    const double width = (h.width + p.denom - 1) / p.denom;
    return double(p.y + need.y + need.h) * width + double(need.w) * need.h;
  } catch (const ImageError&) {
    return 0.0;  // a bad image fails fast in transform_image
  }
}

CropBox transform_image(ImageDecoder& dec, const std::uint8_t* data, std::size_t size, int channels,
                        const ImageTransform& t, std::uint64_t key, Image8& img,
                        std::uint8_t* dst) {
  const ResamplePlan p = plan_transform(dec.header(data, size), t, key);
  // Decode only the source pixels the resampler reads (in the 1/d image's coordinates).
  CropBox need = resample_source(p.width, p.height, p.spec);
  need.x += p.x;
  need.y += p.y;
  const CropBox got = dec.decode_region(data, size, channels, p.denom, need, img);
  if (got.x > need.x || got.y > need.y || got.x + got.w < need.x + need.w ||
      got.y + got.h < need.y + need.h)
    throw ImageError("image size differs from its header");
  const SourceImage src{img.pixels.data(), static_cast<std::size_t>(img.width) * channels,
                        channels,          p.width,
                        p.height,          got.x - p.x,
                        got.y - p.y};
  resample_window(src, p.spec, dst, OutLayout{true, t.flip});
  return p.box;
}

}  // namespace dtrain
