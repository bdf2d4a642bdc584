// dtrain/dnn/bf16.hpp — bfloat16 conversions on the host (the CPU backend's DType::bf16 storage,
// and the tests' references).
//
// A bf16 value is the upper 16 bits of an IEEE binary32: sign, 8-bit exponent, 7-bit mantissa
// (Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep Learning Training"). fp32 → bf16 rounds to
// nearest, ties to even, and keeps NaN a (quiet) NaN — the rounding of CUDA's __float2bfloat16_rn
// and of torch.Tensor.to(torch.bfloat16); bf16 → fp32 is exact.
#pragma once

#include <cstdint>
#include <cstring>

namespace dtrain {

/// The bf16 nearest to f (ties to even); NaN stays NaN (quiet, sign kept); ±Inf stays ±Inf;
/// finite values beyond bf16's largest round to ±Inf.
[[nodiscard]] inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

/// The fp32 value of bf16 bits h (exact).
[[nodiscard]] inline float bf16_to_float(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// f rounded to the nearest bf16 value, as an fp32 (bf16_to_float(float_to_bf16(f))).
[[nodiscard]] inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

}  // namespace dtrain
