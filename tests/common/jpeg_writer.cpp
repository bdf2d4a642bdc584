// tests/common/jpeg_writer.cpp — tests/common/jpeg_writer.hpp with libjpeg's compression API
// (jpeg_mem_dest, jpeg_set_quality, comp_info sampling factors, jpeg_simple_progression).
#include "common/jpeg_writer.hpp"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE
#include <jpeglib.h>
// clang-format on

#include <cstdlib>

namespace dtrain::testing {

std::vector<std::uint8_t> write_jpeg(const std::vector<std::uint8_t>& pixels, int width, int height,
                                     int channels, const JpegOptions& opt) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  c.input_components = channels;
  c.in_color_space = channels == 1 ? JCS_GRAYSCALE : (channels == 4 ? JCS_CMYK : JCS_RGB);
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, opt.quality, TRUE);
  if (channels == 3) {
    c.comp_info[0].h_samp_factor = opt.h_samp;
    c.comp_info[0].v_samp_factor = opt.v_samp;
  }
  if (opt.progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    auto* row = const_cast<JSAMPROW>(pixels.data() +
                                     static_cast<std::size_t>(c.next_scanline) * width * channels);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<std::uint8_t> out(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

}  // namespace dtrain::testing
