// src/dnn/normalize_uint8.cpp — Backend::normalize_uint8's host loop (dtrain/dnn/backend.hpp):
// the CPU backend's implementation and the reference the CUDA kernel is tested against. A table
// lookup per element, rounded to bf16 (float_to_bf16, the rounding of Backend::cast) where asked,
// written at its NCHW or NHWC position.
#include <cstdint>
#include <string>

#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/dnn/bf16.hpp"

namespace dtrain {
namespace {

inline void put(float* y, std::size_t i, float v) { y[i] = v; }
inline void put(std::uint16_t* y, std::size_t i, float v) { y[i] = float_to_bf16(v); }

/// The loop of normalize_uint8 for output elements of type T (float, or bf16 bits). Reads x in
/// order; the writes stride by C in NHWC (the host's caches absorb it).
template <typename T>
void normalize(const std::uint8_t* x, const float* lut, T* y, const Shape& s, Layout to) {
  const auto c = static_cast<std::size_t>(s.c);
  const auto hw = static_cast<std::size_t>(s.h) * static_cast<std::size_t>(s.w);
  const bool nhwc = to == Layout::nhwc;
  for (std::size_t i = 0; i < static_cast<std::size_t>(s.n); ++i)
    for (std::size_t k = 0; k < c; ++k) {
      const float* table = lut + k * 256;
      const std::uint8_t* plane = x + (i * c + k) * hw;
      for (std::size_t p = 0; p < hw; ++p)
        put(y, nhwc ? (i * hw + p) * c + k : (i * c + k) * hw + p, table[plane[p]]);
    }
}

}  // namespace

void check_normalize_uint8(const Shape& s) {
  DT_REQUIRE(s.n >= 0 && (s.n == 0 || (s.c >= 1 && s.h >= 1 && s.w >= 1)),
             "normalize_uint8: need a batch of n >= 0 samples of channels, height and width "
             ">= 1, got " +
                 s.str());
}

void Backend::normalize_uint8(const std::uint8_t* x, const float* lut, void* y, const Shape& s,
                              Layout to, DType t) {
  check_normalize_uint8(s);
  if (t == DType::bf16) normalize(x, lut, static_cast<std::uint16_t*>(y), s, to);
  else normalize(x, lut, static_cast<float*>(y), s, to);
}

}  // namespace dtrain
