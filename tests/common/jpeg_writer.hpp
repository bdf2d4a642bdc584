// tests/common/jpeg_writer.hpp — JPEG files for the image tests, written in memory with
// libjpeg-turbo's libjpeg API: gray, RGB or CMYK, any luma sampling factors (chroma 1×1), baseline
// or progressive. Shared by tests/unit/test_jpeg_region.cpp and test_uint8_batches.cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::testing {

/// How write_jpeg() encodes. h_samp × v_samp: the luma sampling factors of a colour JPEG (1×1
/// 4:4:4, 2×1 4:2:2, 2×2 4:2:0, 1×2 4:4:0, 4×1 4:1:1); ignored for gray.
struct JpegOptions {
  int quality = 90;
  int h_samp = 2, v_samp = 2;
  bool progressive = false;
};

/// Encodes `pixels` (height × width × channels uint8, packed; channels 1 gray, 3 RGB or 4 CMYK) as
/// a JPEG file. libjpeg's error handler exits the process on an encoder error (none for valid
/// input).
std::vector<std::uint8_t> write_jpeg(const std::vector<std::uint8_t>& pixels, int width, int height,
                                     int channels, const JpegOptions& opt = {});

}  // namespace dtrain::testing
