// tests/unit/test_wire_format.cpp — the 16-bit wire encodings of dnn/float16.hpp: fp16
// against the compiler's own IEEE binary16 (_Float16, round to nearest even) for every fp16 value
// and a sweep of fp32 bit patterns (ties, subnormals, overflow, NaN); bf16 against dnn/bf16.hpp;
// the array encoders against the scalar ones, bit for bit (every half; a sweep of fp32 patterns).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "dtrain/dnn/bf16.hpp"
#include "dtrain/dnn/float16.hpp"

namespace dtrain {
namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint16_t half_bits(_Float16 h) {
  std::uint16_t u;
  std::memcpy(&u, &h, sizeof u);
  return u;
}

TEST(WireFormat, Fp16DecodesEveryValueExactly) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    _Float16 ref;
    const auto bits = static_cast<std::uint16_t>(h);
    std::memcpy(&ref, &bits, sizeof ref);
    const float want = static_cast<float>(ref);
    const float got = fp16_to_float(bits);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(std::memcmp(&got, &want, sizeof got), 0) << std::hex << h;
    }
  }
}

TEST(WireFormat, Fp16EncodesAsTheCompilerRoundsToNearestEven) {
  std::size_t checked = 0;
  // Every 2^13-th pattern hits each fp16 value's neighbourhood; the ±1..3 around each one are
  // the ties and the values just beside them.
  for (std::uint64_t base = 0; base < (1ull << 32); base += 1u << 13) {
    for (std::int64_t d = -3; d <= 3; ++d) {
      const auto u = static_cast<std::uint32_t>(static_cast<std::int64_t>(base) + d);
      const float f = from_bits(u);
      const std::uint16_t got = float_to_fp16(f);
      if (std::isnan(f)) {
        ASSERT_TRUE(std::isnan(fp16_to_float(got))) << std::hex << u;
        continue;
      }
      ASSERT_EQ(got, half_bits(static_cast<_Float16>(f))) << std::hex << u << " = " << f;
      ++checked;
    }
  }
  EXPECT_GT(checked, 3'000'000u);
  EXPECT_EQ(float_to_fp16(70000.0f), 0x7C00u);  // beyond 65504: +Inf
  EXPECT_EQ(float_to_fp16(-1e-9f), 0x8000u);    // below half the smallest subnormal: -0
  EXPECT_EQ(fp16_to_float(float_to_fp16(65504.0f)), 65504.0f);
}

TEST(WireFormat, ArrayEncodersMatchTheScalarOnes) {
  std::vector<float> x(1027);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(0.1f * static_cast<float>(i)) * std::pow(10.0f, -static_cast<float>(i % 9));
  x[5] = std::numeric_limits<float>::infinity();
  std::vector<std::uint16_t> e(x.size());
  std::vector<float> back(x.size());
  encode_wire(WireDtype::bf16, x.data(), e.data(), x.size());
  decode_wire(WireDtype::bf16, e.data(), back.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(e[i], float_to_bf16(x[i])) << i;
    ASSERT_EQ(back[i], round_to_bf16(x[i])) << i;
  }
  encode_wire(WireDtype::fp16, x.data(), e.data(), x.size());
  decode_wire(WireDtype::fp16, e.data(), back.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(e[i], float_to_fp16(x[i])) << i;
    ASSERT_EQ(back[i], fp16_to_float(float_to_fp16(x[i]))) << i;
  }
  EXPECT_EQ(wire_bytes(WireDtype::fp32), 4u);
  EXPECT_EQ(wire_bytes(WireDtype::bf16), 2u);
  EXPECT_STREQ(to_string(WireDtype::fp16), "fp16");
}

// The array codec may take another path than the scalar one (F16C's instructions where the CPU
// has them): the same bits for every half, and for a sweep of fp32 patterns with every NaN sign
// and payload class, Inf, ties and subnormals; adds as decode + one fp32 addition.
TEST(WireFormat, Fp16ArrayPathsMatchTheScalarCodecBitForBit) {
  std::vector<std::uint16_t> h(65536);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<std::uint16_t>(i);
  std::vector<float> wide(h.size()), acc(h.size(), 0.75f);
  decode_wire(WireDtype::fp16, h.data(), wide.data(), h.size());
  add_wire(WireDtype::fp16, h.data(), acc.data(), h.size());
  for (std::size_t i = 0; i < h.size(); ++i) {
    const float want = fp16_to_float(h[i]), sum = 0.75f + want;
    ASSERT_EQ(std::memcmp(&wide[i], &want, sizeof want), 0) << std::hex << i;
    if (!std::isnan(sum)) ASSERT_EQ(acc[i], sum) << std::hex << i;
  }
  std::vector<float> x;
  for (std::uint64_t base = 0; base < (1ull << 32); base += (1u << 13) + 1)
    for (std::uint32_t d = 0; d < 7; ++d)
      x.push_back(from_bits(static_cast<std::uint32_t>(base + d)));
  x.push_back(from_bits(0x7FC00000u));  // the quiet NaN, both signs
  x.push_back(from_bits(0xFFC00000u));
  std::vector<std::uint16_t> e(x.size());
  encode_wire(WireDtype::fp16, x.data(), e.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(e[i], float_to_fp16(x[i])) << x[i];
}

// A finite fp32 gradient past fp16's range encodes to Inf, which wire_all_finite reports (a ps
// push refuses it); bf16 holds fp32's range, so only a value already non-finite is reported.
TEST(WireFormat, AllFiniteReportsWhatTheEncodingCannotHold) {
  const std::vector<float> ok = {0.0f, -0.0f, 1e-30f, 65504.0f, -65504.0f, 3.0e38f};
  std::vector<std::uint16_t> e(ok.size());
  encode_wire(WireDtype::bf16, ok.data(), e.data(), ok.size());
  EXPECT_TRUE(wire_all_finite(WireDtype::bf16, e.data(), e.size()));
  encode_wire(WireDtype::fp16, ok.data(), e.data(), ok.size() - 1);  // all but 3e38
  EXPECT_TRUE(wire_all_finite(WireDtype::fp16, e.data(), ok.size() - 1));
  for (const float big : {65520.0f, -1.0e5f, 3.0e38f}) {  // 65520 rounds up to 2^16: Inf
    const std::uint16_t h = float_to_fp16(big);
    EXPECT_FALSE(wire_all_finite(WireDtype::fp16, &h, 1)) << big;
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (const float bad : {inf, -inf, nan}) {
    std::uint16_t h = 0;
    encode_wire(WireDtype::bf16, &bad, &h, 1);
    EXPECT_FALSE(wire_all_finite(WireDtype::bf16, &h, 1)) << bad;
  }
}

}  // namespace
}  // namespace dtrain
