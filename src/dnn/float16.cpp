// dtrain/dnn/float16.cpp — the array codec of the 16-bit wire formats (dnn/float16.hpp).
#include "dtrain/dnn/float16.hpp"

#include <algorithm>

#include "dtrain/core/error.hpp"
#include "dtrain/core/simd.hpp"
#include "dtrain/dnn/bf16.hpp"

// The F16C path: GCC on x86-64, unless the clones are off (core/simd.hpp).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(DTRAIN_NO_CLONES)
#include <immintrin.h>
#define DT_F16C 1
#else
#define DT_F16C 0
#endif

namespace dtrain {
namespace {

DT_SIMD_CLONES void encode_bf16(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}
DT_SIMD_CLONES void decode_bf16(const std::uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}
DT_SIMD_CLONES void encode_fp16_soft(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_fp16(src[i]);
}
DT_SIMD_CLONES void decode_fp16_soft(const std::uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = fp16_to_float(src[i]);
}
DT_SIMD_CLONES void add_bf16(const std::uint16_t* src, float* acc, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += bf16_to_float(src[i]);
}
DT_SIMD_CLONES void add_fp16_soft(const std::uint16_t* src, float* acc, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += fp16_to_float(src[i]);
}

#if DT_F16C
// x86's F16C conversions (VCVTPS2PH, round to nearest even; VCVTPH2PS, exact), 8 values an
// instruction, where the CPU has them: the same bits as the scalar codec for every input (the
// unit tests compare all 2^16 halves and a sweep of fp32 patterns), a NaN made the scalar
// codec's sign | 0x7E00 (the instruction would keep part of its payload). About 3x the
// vectorized software loops.
bool have_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  return yes;
}

__attribute__((target("avx2,f16c"))) void encode_fp16_f16c(const float* src, std::uint16_t* dst,
                                                           std::size_t n) {
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  const __m128i sign = _mm_set1_epi16(static_cast<short>(0x8000)), quiet = _mm_set1_epi16(0x7E00);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i nan32 =
        _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(x), magnitude), inf);
    const __m128i nan16 =
        _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
    h = _mm_blendv_epi8(h, _mm_or_si128(_mm_and_si128(h, sign), quiet), nan16);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = float_to_fp16(src[i]);
}

/// acc ? acc[i] += value : dst[i] = value, value the fp32 of src[i].
template <bool Add>
__attribute__((target("avx2,f16c"))) void widen_fp16_f16c(const std::uint16_t* src, float* dst,
                                                          std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    if constexpr (Add) _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), x));
    else _mm256_storeu_ps(dst + i, x);
  }
  for (; i < n; ++i) {
    if constexpr (Add) dst[i] += fp16_to_float(src[i]);
    else dst[i] = fp16_to_float(src[i]);
  }
}
#else
bool have_f16c() { return false; }
void encode_fp16_f16c(const float*, std::uint16_t*, std::size_t) {}
template <bool Add>
void widen_fp16_f16c(const std::uint16_t*, float*, std::size_t) {}
#endif

void encode_fp16(const float* src, std::uint16_t* dst, std::size_t n) {
  if (have_f16c()) encode_fp16_f16c(src, dst, n);
  else encode_fp16_soft(src, dst, n);
}
void decode_fp16(const std::uint16_t* src, float* dst, std::size_t n) {
  if (have_f16c()) widen_fp16_f16c<false>(src, dst, n);
  else decode_fp16_soft(src, dst, n);
}
void add_fp16(const std::uint16_t* src, float* acc, std::size_t n) {
  if (have_f16c()) widen_fp16_f16c<true>(src, acc, n);
  else add_fp16_soft(src, acc, n);
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
