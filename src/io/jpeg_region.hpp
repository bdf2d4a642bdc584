// src/io/jpeg_region.hpp — private to src/io: JPEG decoding with libjpeg-turbo's libjpeg API
// (libjpeg62-turbo), the whole image or only a rectangle of it, for io/image.hpp's ImageDecoder.
//
// Region decoding (libjpeg-turbo's partial decompression, libjpeg.txt): rows above the rectangle
// go through jpeg_skip_scanlines() (entropy-decoded only, no IDCT, upsampling or colour
// conversion), columns outside it are cut by jpeg_crop_scanline() (which widens the rectangle to
// iMCU boundaries), and reading stops after its last row. The pixels returned are bit-identical
// to the same pixels of a whole-image decode: libjpeg-turbo's fancy (triangle) chroma upsampling
// treats the cut columns as image edges, which changes the outermost column on each side of a
// cut, so two more columns than asked are decoded on each side (tests/unit/test_image.cpp checks
// every subsampling against the whole decode).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "dtrain/io/image.hpp"

namespace dtrain {

/// One libjpeg decompressor, reused image after image. Not shareable between threads.
class JpegDecoder {
 public:
  JpegDecoder();  ///< throws ImageError when libjpeg cannot allocate its state
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  /// The frame header: format "jpeg", width, height, channels (1 for a grayscale JPEG, else 3).
  /// Throws ImageError for a corrupt header or more than 2^28 pixels.
  ImageHeader header(const std::uint8_t* data, std::size_t size);

  /// Decodes the JPEG, shrunk to ceil(W / d) × ceil(H / d) in the DCT domain (d = scale_denom ∈
  /// {1, 2, 4, 8}), as `channels` (1: gray from a gray JPEG, else Pillow's luma of the RGB
  /// decode; 3: RGB, a gray JPEG replicated) into out, packed H×W×C, but only a rectangle of that
  /// image containing `want` (in its pixels; clipped to the image; must overlap it). Returns the
  /// rectangle decoded, which is out.width × out.height. Accurate integer IDCT and fancy
  /// upsampling (libjpeg's defaults, as Pillow decodes). Throws ImageError for a
  /// corrupt or truncated JPEG (a single-scan JPEG with no EOI marker after its scan data counts as
  /// truncated, even where the rectangle ends before the missing part), not for libjpeg's other
  /// warnings (extraneous bytes, a corrupt Huffman code), which leave a usable image as in Pillow;
  /// and for a CMYK or YCCK JPEG ("unsupported JPEG: a CMYK JPEG ...").
  CropBox decode(const std::uint8_t* data, std::size_t size, int channels, int scale_denom,
                 const CropBox& want, Image8& out);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace dtrain
