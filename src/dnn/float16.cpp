// dtrain/dnn/float16.cpp — the array codec of the 16-bit wire formats (dnn/float16.hpp).
#include "dtrain/dnn/float16.hpp"

#include <algorithm>

#include "dtrain/core/error.hpp"
#include "dtrain/core/simd.hpp"
#include "dtrain/dnn/bf16.hpp"

namespace dtrain {
namespace {

DT_SIMD_CLONES void encode_bf16(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}
DT_SIMD_CLONES void decode_bf16(const std::uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}
DT_SIMD_CLONES void encode_fp16(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_fp16(src[i]);
}
DT_SIMD_CLONES void decode_fp16(const std::uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = fp16_to_float(src[i]);
}
DT_SIMD_CLONES void add_bf16(const std::uint16_t* src, float* acc, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += bf16_to_float(src[i]);
}
DT_SIMD_CLONES void add_fp16(const std::uint16_t* src, float* acc, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += fp16_to_float(src[i]);
}

}  // namespace

std::size_t wire_bytes(WireDtype w) { return w == WireDtype::fp32 ? 4 : 2; }

void encode_wire(WireDtype w, const float* src, std::uint16_t* dst, std::size_t n) {
  DT_ASSERT(w != WireDtype::fp32, "encode_wire: fp32 travels as it is");
  if (w == WireDtype::bf16) encode_bf16(src, dst, n);
  else encode_fp16(src, dst, n);
}

void decode_wire(WireDtype w, const std::uint16_t* src, float* dst, std::size_t n) {
  DT_ASSERT(w != WireDtype::fp32, "decode_wire: fp32 travels as it is");
  if (w == WireDtype::bf16) decode_bf16(src, dst, n);
  else decode_fp16(src, dst, n);
}

void add_wire(WireDtype w, const std::uint16_t* src, float* acc, std::size_t n) {
  DT_ASSERT(w != WireDtype::fp32, "add_wire: fp32 travels as it is");
  if (w == WireDtype::bf16) add_bf16(src, acc, n);
  else add_fp16(src, acc, n);
}

void reduce_wire_rows(WireDtype w, const std::uint16_t* src, std::size_t stride, std::size_t rows,
                      std::uint16_t* dst, std::size_t n) {
  DT_ASSERT(rows > 0, "reduce_wire_rows: no rows");
  constexpr std::size_t kChunk = 2048;  // 8 KiB of fp32 sums: in L1 while the rows go by
  float acc[kChunk];
  for (std::size_t lo = 0; lo < n; lo += kChunk) {
    const std::size_t m = std::min(kChunk, n - lo);
    decode_wire(w, src + lo, acc, m);
    for (std::size_t r = 1; r < rows; ++r) add_wire(w, src + r * stride + lo, acc, m);
    encode_wire(w, acc, dst + lo, m);
  }
}

bool wire_all_finite(WireDtype w, const std::uint16_t* v, std::size_t n) {
  DT_ASSERT(w != WireDtype::fp32, "wire_all_finite: fp32 travels as it is");
  const std::uint16_t exponent = w == WireDtype::bf16 ? 0x7F80u : 0x7C00u;  // all ones: Inf, NaN
  return std::none_of(v, v + n, [exponent](std::uint16_t h) { return (h & exponent) == exponent; });
}

}  // namespace dtrain
