// dtrain/io/jpeg_region.cpp — src/io/jpeg_region.hpp: whole-image and region JPEG decoding with
// libjpeg-turbo's libjpeg API (jpeg_skip_scanlines, jpeg_crop_scanline, libjpeg.txt "Partial
// image decompression"). libjpeg reports errors by calling error_exit, which must not return: it
// longjmps back to the setjmp of the call in progress (no C++ object with a destructor lives in
// the frames it crosses), whose caller throws ImageError.
#include "jpeg_region.hpp"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <csetjmp>
#include <cstring>

namespace dtrain {
namespace {

/// Columns decoded beyond each side of a cut (see the header: fancy upsampling's edge column).
constexpr int kCutMargin = 2;
constexpr std::int64_t kMaxPixels = std::int64_t{1} << 28;

struct ErrorManager {
  jpeg_error_mgr mgr;  // first member: libjpeg's cinfo->err points here
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool unsupported = false;  ///< the file is sound, its kind is not decoded (CMYK)
};

extern "C" void jpeg_on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

/// Warnings leave a usable image, except running out of data ("Premature end of JPEG file"),
/// which is an error, as Pillow's "image file is truncated". Trace messages are dropped.
extern "C" void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_on_error(cinfo);
}

/// Whether the EOI marker (FF D9) follows the scan data at `from`: entropy-coded data never holds
/// FF D9 (an FF there is followed by 00 or a restart marker), so a file without one is truncated.
bool has_eoi_after(const std::uint8_t* from, const std::uint8_t* end) {
  for (const std::uint8_t* p = end; p - from >= 2; --p)
    if (p[-2] == 0xFF && p[-1] == 0xD9) return true;
  return false;
}

/// A request of decode_raw(): the scaled image's rows [y0, y1) and at least columns [x0, x1).
struct Request {
  int scale_denom = 1;
  int channels = 3;                    ///< gray output only from a gray JPEG (else RGB)
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;  ///< clipped to the scaled image by decode_raw()
};

/// Reads the rows of `got` into out (got.w × got.h × components, packed) after
/// jpeg_start_decompress(): jpeg_skip_scanlines() to got.y, then up to 16 rows per call.
void read_rows(jpeg_decompress_struct& c, const CropBox& got, Image8& out) {
  const std::size_t row = static_cast<std::size_t>(got.w) * c.output_components;
  if (got.y > 0) jpeg_skip_scanlines(&c, static_cast<JDIMENSION>(got.y));
  JSAMPROW rows[16];
  while (static_cast<int>(c.output_scanline) < got.y + got.h) {
    const int at = static_cast<int>(c.output_scanline) - got.y;
    const int n = std::min(16, got.h - at);
    for (int i = 0; i < n; ++i)
      rows[i] = out.pixels.data() + static_cast<std::size_t>(at + i) * row;
    jpeg_read_scanlines(&c, rows, static_cast<JDIMENSION>(n));
  }
}

/// The libjpeg calls of one decode, between setjmp and the abort that readies `c` for the next
/// image. Returns false (err.message set) on error. Locals are trivially destructible: libjpeg's
/// error_exit longjmps back over this frame.
bool decode_raw(jpeg_decompress_struct& c, ErrorManager& err, const std::uint8_t* data,
                std::size_t size, Request rq, Image8& out, CropBox& got) {
  err.unsupported = false;
  if (setjmp(err.jump)) {
    jpeg_abort_decompress(&c);
    return false;
  }
  jpeg_mem_src(&c, data, static_cast<unsigned long>(size));
  jpeg_read_header(&c, TRUE);
  err.unsupported = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
  if (err.unsupported)
    std::snprintf(err.message, sizeof err.message,
                  "a CMYK JPEG: dtrain decodes RGB and grayscale JPEGs (images_to_h5.py stores "
                  "CMYK images as RGB)");
  else if (static_cast<std::int64_t>(c.image_width) * c.image_height > kMaxPixels)
    std::snprintf(err.message, sizeof err.message, "image larger than 2^28 pixels");
  else if (!jpeg_has_multiple_scans(&c) && !has_eoi_after(c.src->next_input_byte, data + size))
    std::snprintf(err.message, sizeof err.message, "Premature end of JPEG file");
  else err.message[0] = '\0';
  if (err.message[0] != '\0') {
    jpeg_abort_decompress(&c);
    return false;
  }
  c.out_color_space =
      rq.channels == 1 && c.jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_RGB;
  c.scale_num = 1;
  c.scale_denom = static_cast<unsigned>(rq.scale_denom);
  jpeg_start_decompress(&c);  // a multi-scan (progressive) JPEG is read whole here
  const int w = static_cast<int>(c.output_width), h = static_cast<int>(c.output_height);
  rq.x0 = std::clamp(rq.x0 - kCutMargin, 0, w - 1);
  rq.x1 = std::clamp(rq.x1 + kCutMargin, rq.x0 + 1, w);
  rq.y0 = std::clamp(rq.y0, 0, h - 1);
  rq.y1 = std::clamp(rq.y1, rq.y0 + 1, h);
  auto xoff = static_cast<JDIMENSION>(rq.x0), width = static_cast<JDIMENSION>(rq.x1 - rq.x0);
  if (rq.x0 > 0 || rq.x1 < w) jpeg_crop_scanline(&c, &xoff, &width);
  got = CropBox{static_cast<int>(xoff), rq.y0, static_cast<int>(width), rq.y1 - rq.y0};
  out.width = got.w;
  out.height = got.h;
  out.channels = c.output_components;
  out.pixels.resize(static_cast<std::size_t>(got.w) * got.h * out.channels);
  read_rows(c, got, out);
  jpeg_abort_decompress(&c);  // the rows below are never decoded
  return true;
}

/// jpeg_read_header alone (width, height, colour space); false with err.message on error.
bool header_raw(jpeg_decompress_struct& c, ErrorManager& err, const std::uint8_t* data,
                std::size_t size, int& w, int& h, bool& gray) {
  if (setjmp(err.jump)) {
    jpeg_abort_decompress(&c);
    return false;
  }
  jpeg_mem_src(&c, data, static_cast<unsigned long>(size));
  jpeg_read_header(&c, TRUE);
  w = static_cast<int>(c.image_width);
  h = static_cast<int>(c.image_height);
  gray = c.jpeg_color_space == JCS_GRAYSCALE;
  jpeg_abort_decompress(&c);
  return true;
}

bool create_raw(jpeg_decompress_struct& c, ErrorManager& err) {
  if (setjmp(err.jump)) return false;
  jpeg_create_decompress(&c);
  return true;
}

}  // namespace

struct JpegDecoder::State {
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
};

JpegDecoder::JpegDecoder() : s_(std::make_unique<State>()) {
  s_->cinfo.err = jpeg_std_error(&s_->err.mgr);
  s_->err.mgr.error_exit = jpeg_on_error;
  s_->err.mgr.emit_message = jpeg_on_message;
  if (!create_raw(s_->cinfo, s_->err))
    throw ImageError(std::string("cannot create a JPEG decompressor: ") + s_->err.message);
}

JpegDecoder::~JpegDecoder() { jpeg_destroy_decompress(&s_->cinfo); }

ImageHeader JpegDecoder::header(const std::uint8_t* data, std::size_t size) {
  int w = 0, h = 0;
  bool gray = false;
  if (!header_raw(s_->cinfo, s_->err, data, size, w, h, gray))
    throw ImageError(std::string("corrupt JPEG header: ") + s_->err.message);
  if (w < 1 || h < 1) throw ImageError("corrupt or truncated JPEG header (no frame size)");
  if (static_cast<std::int64_t>(w) * h > kMaxPixels)
    throw ImageError("image size " + std::to_string(w) + "x" + std::to_string(h) +
                     " outside [1, 2^28 pixels]");
  ImageHeader hd;
  hd.format = "jpeg";
  hd.width = w;
  hd.height = h;
  hd.channels = gray ? 1 : 3;
  return hd;
}

CropBox JpegDecoder::decode(const std::uint8_t* data, std::size_t size, int channels,
                            int scale_denom, const CropBox& want, Image8& out) {
  if (channels != 1 && channels != 3) throw ImageError("channels must be 1 or 3");
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8)
    throw ImageError("JPEG scale denominator must be 1, 2, 4 or 8");
  auto end = [](int at, int n) {
    return static_cast<int>(std::min<std::int64_t>(std::int64_t{at} + n, 1 << 30));
  };
  const Request rq{scale_denom, channels, want.x, want.y, end(want.x, want.w), end(want.y, want.h)};
  CropBox got;
  if (!decode_raw(s_->cinfo, s_->err, data, size, rq, out, got))
    throw ImageError(
        std::string(s_->err.unsupported ? "unsupported JPEG: " : "corrupt or truncated JPEG: ") +
        s_->err.message);
  // Gray output straight from a gray JPEG; from a colour one through RGB and Pillow's luma.
  if (channels == 1 && out.channels == 3) {
    const std::size_t px = static_cast<std::size_t>(out.width) * out.height;
    rgb_to_gray(out.pixels.data(), px, out.pixels.data());
    out.pixels.resize(px);
    out.channels = 1;
  }
  return got;
}

}  // namespace dtrain
