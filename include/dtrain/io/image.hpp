// dtrain/io/image.hpp — encoded images (JPEG, PNG) to network input: decode, the standard
// ImageNet transforms and Pillow's bilinear resampling, all on the CPU, one image per call.
//
// Decoding: JPEG with libjpeg-turbo's libjpeg API (accurate integer IDCT and fancy upsampling,
// libjpeg's defaults, which is what Pillow decodes with), optionally scaled by 1/2, 1/4 or 1/8 in
// the DCT domain when the crop is much larger than the output, and only the rectangle the crop
// needs (partial decompression: jpeg_skip_scanlines, jpeg_crop_scanline); PNG with libpng (8-bit,
// palette and 16-bit expanded, alpha dropped). Colour conversion follows Pillow's Image.convert:
// gray → RGB replicates, RGB → L is (19595 R + 38470 G + 7471 B + 2^15) >> 16.
//
// Transforms follow torchvision 0.x on PIL images:
//   RandomResizedCrop(S, scale=(0.08, 1), ratio=(3/4, 4/3)) — random_resized_crop_box(), the
//   scale and ratio ranges settable (CropRange);
//   Resize(R) + CenterCrop(S) — center_crop_box();
//   F.resized_crop = img.crop(box).resize((S, S), BILINEAR) — resample_crop(), which reproduces
//   Pillow's ImagingResample (Resample.c: triangle filter widened by the scale when shrinking,
//   22-bit fixed-point coefficients, horizontal pass then vertical, each rounded to uint8).
// Every random draw is counter_hash of (key, draw number): a pure function of the key, which the
// batch reader derives from (seed, epoch, sample index), so a resumed run crops identically.
//
// Errors: a corrupt, truncated or unsupported image throws ImageError (what() names the decoder's
// reason, not the file: the caller knows the file and sample index). Thread-safe: no shared state;
// each thread should own its ImageDecoder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtrain {

/// A bad image: corrupt, truncated, not JPEG/PNG, or too large (more than 2^28 pixels).
class ImageError : public std::runtime_error {
 public:
  explicit ImageError(const std::string& msg) : std::runtime_error(msg) {}
};

/// Pixels, interleaved H×W×C uint8 (C = 1 gray or 3 RGB), rows packed (stride W·C bytes).
struct Image8 {
  int width = 0, height = 0, channels = 0;
  std::vector<std::uint8_t> pixels;
};

/// What an encoded image's header says. format: "jpeg" or "png".
struct ImageHeader {
  std::string format;
  int width = 0, height = 0;
  int channels = 0;  ///< 1 (gray) or 3 (colour) as stored (PNG alpha not counted)
};

/// A crop rectangle in pixels of the full-size image: columns [x, x + w), rows [y, y + h).
struct CropBox {
  int x = 0, y = 0, w = 0, h = 0;
  bool operator==(const CropBox&) const = default;
};

class JpegDecoder;  // src/io/jpeg_region.hpp

/// Decodes encoded images; owns a libjpeg decompressor (not shareable between threads).
class ImageDecoder {
 public:
  ImageDecoder();  ///< throws ImageError when libjpeg cannot allocate its state
  ~ImageDecoder();
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;

  /// Reads the header of `size` bytes at `data` (JPEG by its FF D8 marker, PNG by its signature).
  /// Throws ImageError for anything else or an unreadable header.
  ImageHeader header(const std::uint8_t* data, std::size_t size);

  /// Decodes the whole image into `out` with `channels` (1 or 3) channels. `scale_denom` ∈ {1, 2,
  /// 4, 8} shrinks a JPEG in the DCT domain to ceil(W / d) × ceil(H / d) (PNG ignores it: d = 1).
  /// Returns the denominator used. Throws ImageError for a corrupt or truncated image (libjpeg
  /// warnings about premature end of data count as errors) or one of more than 2^28 pixels.
  int decode(const std::uint8_t* data, std::size_t size, int channels, Image8& out,
             int scale_denom = 1);

  /// Decodes at least the rectangle `want` (clipped to the image, which it must overlap) of the
  /// image shrunk by scale_denom as decode() does, into out (out.width × out.height pixels), and
  /// returns the rectangle decoded, in the pixels of the (shrunk) image. A JPEG decodes a little
  /// more than `want` (iMCU columns, two columns of margin each side), skipping the IDCT of the
  /// rows above and the columns beside it and everything below it; its pixels are bit-identical
  /// to the same pixels of decode(). A PNG decodes whole (scale_denom must be 1). Errors as
  /// decode(); a single-scan JPEG without its end marker counts as truncated even when `want` ends
  /// before the missing part.
  CropBox decode_region(const std::uint8_t* data, std::size_t size, int channels, int scale_denom,
                        const CropBox& want, Image8& out);

 private:
  std::unique_ptr<JpegDecoder> jpeg_;
};

/// Pillow's RGB → L (Convert.c, L24): ITU-R 601-2 luma (19595 R + 38470 G + 7471 B + 2^15) >> 16
/// of `pixels` interleaved RGB pixels into gray (which may alias rgb: it is written behind).
void rgb_to_gray(const std::uint8_t* rgb, std::size_t pixels, std::uint8_t* gray);

/// RandomResizedCrop's `scale` and `ratio` arguments: the crop's area is a fraction drawn
/// uniformly from [scale_min, scale_max] of the image's, its aspect ratio w / h log-uniformly from
/// [ratio_min, ratio_max]. Defaults are torchvision's (0.08, 1) and (3/4, 4/3). Valid ranges:
/// 0 < scale_min ≤ scale_max ≤ 1, 0 < ratio_min ≤ ratio_max (checked by the option parser).
struct CropRange {
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  bool operator==(const CropRange&) const = default;
};

/// torchvision RandomResizedCrop.get_params(img, scale, ratio) for an image of width × height,
/// with the uniform draws taken from counter_hash(key, 0..) instead of torch's generator: up to 10
/// tries of area fraction U(scale_min, scale_max) and log-aspect U(log ratio_min, log ratio_max),
/// w = round(sqrt(A·r)), h = round(sqrt(A/r)) (round half to even, as Python), accepted when
/// 0 < w ≤ width and 0 < h ≤ height, then y ∈ [0, height − h], x ∈ [0, width − w] uniform;
/// otherwise the central crop clamped to the ratio range. Pure function; width, height ≥ 1.
CropBox random_resized_crop_box(int width, int height, std::uint64_t key,
                                const CropRange& range = {});

/// torchvision Resize(resize) + CenterCrop(crop) as a box in the full image: the resized image is
/// resize × floor(resize · long / short) (shorter side = resize), the crop starts at
/// round((resized − crop) / 2) in each axis (round half to even). Returns the box in *resized*
/// pixels plus the resized size in rw, rh (used by resample_window()). crop ≤ resize required.
/// Throws ImageError when the resized longer side would pass 2^31 − 1 pixels (an extreme aspect
/// ratio: a bad image to the reader, skipped or failing as --on-bad-image says).
CropBox center_crop_box(int width, int height, int resize, int crop, int& rw, int& rh);

/// An image to resample: `width` × `height` pixels of `channels` (1 or 3) interleaved uint8, of
/// which `data` holds a rectangle whose first pixel is column x0, row y0 (rows `stride` bytes
/// apart). The rectangle must contain every pixel the resampler reads (resample_source()); it may
/// extend beyond the image (negative x0, y0: the image is a crop of a larger buffer).
struct SourceImage {
  const std::uint8_t* data = nullptr;
  std::size_t stride = 0;
  int channels = 0;
  int width = 0, height = 0;
  int x0 = 0, y0 = 0;
};

/// Pillow's Image.resize((out_w, out_h), BILINEAR, box=(x0, y0, x1, y1)) arguments (box in source
/// pixels as floats, 0 ≤ x0 < x1 ≤ width, likewise y) and the output window computed of it.
struct ResizeSpec {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  int out_w = 0, out_h = 0;
  CropBox window;  ///< output columns [x, x + w) and rows [y, y + h) within out_w × out_h
};

/// How resample_window() writes its window: packed interleaved rows (h × w × C) or planar C × h ×
/// w, then optionally mirrored left–right.
struct OutLayout {
  bool planar = false;
  bool mirror = false;  ///< planar only
};

/// The source pixels (of a width × height image) that resample_window() with `r` reads: the
/// union of the bilinear filter's support over the window's rows and columns — for a shrinking
/// resize with box=, a few pixels beyond the box. Pure function.
CropBox resample_source(int width, int height, const ResizeSpec& r);

/// Pillow's resize with `r` of `src`, computing only r.window, written to dst as `layout` says
/// (w·h·C bytes). Bit-exact with Pillow 9 (Resample.c: triangle filter widened by the scale when
/// shrinking, 22-bit fixed-point coefficients, horizontal pass then vertical, each rounded to
/// uint8) for 8-bit L and RGB images. Thread-safe (per-thread scratch).
void resample_window(const SourceImage& src, const ResizeSpec& r, std::uint8_t* dst,
                     OutLayout layout = {});

/// img.crop(box).resize((out_w, out_h), BILINEAR) in Pillow — what torchvision's resized_crop does
/// to a PIL image — into dst (out_h × out_w × channels, packed). box must lie inside the image.
void resample_crop(const Image8& img, const CropBox& box, int out_w, int out_h, std::uint8_t* dst);

/// What transform_image() does to one image.
struct ImageTransform {
  int out = 0;               ///< S: output is S × S
  bool random_crop = false;  ///< true: RandomResizedCrop(S); false: Resize(resize) + CenterCrop(S)
  CropRange range;           ///< RandomResizedCrop's scale and ratio ranges
  int resize = 0;            ///< shorter side before the centre crop (≥ S)
  bool flip = false;         ///< mirror left–right (the caller draws it)
  /// Decode a JPEG at 1/d (DCT scaling) when the crop, shrunk by d, is still ≥ dct_ratio × S in
  /// both axes; 0 disables DCT scaling (exact Pillow equality).
  double dct_ratio = 1.0;
  /// With random_crop: this box (full-resolution pixels, inside the image) instead of a drawn one
  /// when box.w > 0 — torchvision's F.resized_crop(img, box, S) (tests and tools).
  CropBox box;
};

/// A relative estimate of transform_image()'s work for the same arguments, in decoded pixels
/// (the rows entropy-decoded down to the crop region's bottom plus the region; 0 for a header
/// that does not parse): EncodedSource hands a batch's images to its threads longest first.
double transform_cost(ImageDecoder& dec, const std::uint8_t* data, std::size_t size,
                      const ImageTransform& t, std::uint64_t key);

/// Decodes `data`, crops and resizes it as `t` says (random draws from `key`) and writes the
/// result as planar C×S×S uint8 to dst (C = channels), mirrored when t.flip. Decodes only the
/// JPEG region the resampler reads (ImageDecoder::decode_region()); `scratch` holds it and is
/// reused between calls. Returns the crop box drawn (full-resolution pixels, or resized pixels for
/// the centre crop). Throws ImageError for a bad image.
CropBox transform_image(ImageDecoder& dec, const std::uint8_t* data, std::size_t size, int channels,
                        const ImageTransform& t, std::uint64_t key, Image8& scratch,
                        std::uint8_t* dst);

}  // namespace dtrain
