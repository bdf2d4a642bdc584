// dtrain/dnn/float16.hpp — the 16-bit float formats on the host: IEEE binary16 (fp16) scalar
// conversions beside dnn/bf16.hpp's bfloat16 ones, and the array codec of `--wire-dtype bf16|fp16`
// (Horovod's Compression.fp16, PyTorch DDP's bf16_compress_hook): a gradient rounded once to 16
// bits for the trip between ranks and widened back to fp32, exactly, by the receiver. The sync
// allreduce (collectives/wire.hpp) and the ps pushes (ps/client.hpp, ps/server.hpp) share it.
//
// fp16: 1 sign, 5 exponent, 10 mantissa bits; largest finite 65504, subnormals spaced 2^-24.
// fp32 → fp16 rounds to nearest, ties to even; beyond ±65504 it gives ±Inf; NaN stays NaN. The
// construction is github.com/Maratyszcza/FP16's (MIT): branch-free, so the array loops vectorize.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dtrain/core/options.hpp"  // WireDtype: the number format of gradients between ranks

namespace dtrain {

namespace detail {
inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace detail

/// IEEE binary16 bits nearest to f (ties to even; NaN stays NaN, beyond ±65504 → ±Inf).
[[nodiscard]] inline std::uint16_t float_to_fp16(float f) {
  using detail::bits_of, detail::float_of;
  // Maratyszcza/FP16 fp16_ieee_from_fp32_value: scaling by 2^112 then 2^-110 rounds the
  // mantissa to 10 bits (to nearest even, in the FPU) and saturates to Inf; the bias term puts
  // the rounding at fp16's exponent, subnormals included.
  // The NaN choice is an integer mask, not a branch, so that GCC vectorizes the array loops
  // (it does not if-convert a select between floating-point results).
  const float scale_to_inf = 0x1.0p+112f, scale_to_zero = 0x1.0p-110f;
  const std::uint32_t w = bits_of(f), shl1_w = w + w, sign = w & 0x80000000u;
  float base = (float_of(w & 0x7FFFFFFFu) * scale_to_inf) * scale_to_zero;
  std::uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = float_of((bias >> 1) + 0x07800000u) + base;
  const std::uint32_t b = bits_of(base);
  const std::uint32_t nonsign = ((b >> 13) & 0x00007C00u) + (b & 0x00000FFFu);
  const std::uint32_t nan = 0u - static_cast<std::uint32_t>(shl1_w > 0xFF000000u);
  return static_cast<std::uint16_t>((sign >> 16) | (0x7E00u & nan) | (nonsign & ~nan));
}

/// The fp32 value of binary16 bits h (exact).
[[nodiscard]] inline float fp16_to_float(std::uint16_t h) {
  using detail::bits_of, detail::float_of;
  // Maratyszcza/FP16 fp16_ieee_to_fp32_value: normals by an exponent shift and one multiply,
  // subnormals by the magic-number subtraction.
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16, sign = w & 0x80000000u,
                      two_w = w + w;
  const float normalized = float_of((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = float_of((two_w >> 17) | (126u << 23)) - 0.5f;
  const std::uint32_t sub = 0u - static_cast<std::uint32_t>(two_w < (1u << 27));  // mask
  return float_of(sign | (bits_of(denormalized) & sub) | (bits_of(normalized) & ~sub));
}

/// Bytes per value on the wire: 4 (fp32) or 2.
[[nodiscard]] std::size_t wire_bytes(WireDtype w);

// The array codec: `w` is bf16 or fp16 (fp32 travels as it is: DT_ASSERT), arrays of n values
// that do not overlap; each is one element-wise loop, compiled for AVX2 and baseline x86-64
// (core/simd.hpp), fp16 with x86's F16C conversion instructions where the CPU has them — the same
// bits as the scalar functions above on every path (tests/unit/test_wire_format.cpp).
// Thread-safe (no state).

/// dst[i] = the 16-bit encoding of src[i] in `w`.
void encode_wire(WireDtype w, const float* src, std::uint16_t* dst, std::size_t n);
/// dst[i] = the fp32 value of src[i] (exact).
void decode_wire(WireDtype w, const std::uint16_t* src, float* dst, std::size_t n);
/// acc[i] += the fp32 value of src[i] (one fp32 addition per element).
void add_wire(WireDtype w, const std::uint16_t* src, float* acc, std::size_t n);
/// dst[i] = the encoding of Σ_{r < rows} (the fp32 value of src[r·stride + i]): the rows added in
/// fp32 in row order (row 0 widened exactly, then one fp32 addition per further row), the sum
/// rounded once. Works through the rows in chunks that stay in the L1 cache. dst may be row 0
/// itself (src); it must not overlap the other rows. The reduction of collectives/wire.hpp's
/// reduce-scatter and of collectives/hierarchical.hpp's 16-bit segment sums.
void reduce_wire_rows(WireDtype w, const std::uint16_t* src, std::size_t stride, std::size_t rows,
                      std::uint16_t* dst, std::size_t n);
/// Whether all n encodings v are finite: a finite fp32 value that fp16 cannot hold
/// (|x| ≥ 65520) encodes to ±Inf, which this reports.
[[nodiscard]] bool wire_all_finite(WireDtype w, const std::uint16_t* v, std::size_t n);

}  // namespace dtrain
