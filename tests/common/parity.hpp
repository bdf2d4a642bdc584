// tests/common/parity.hpp — what the GPU parity tests compare with: uniform random data from a
// fixed seed and the norm-wise relative error of one result against its reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace dtrain::testing {

/// n floats uniform in [lo, hi) from std::mt19937(seed).
inline std::vector<float> random_vec(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                     float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

/// ‖a − b‖ / ‖b‖ (‖a − b‖ when b is zero); a test failure when the sizes differ.
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0.0, ref = 0.0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return ref > 0.0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

}  // namespace dtrain::testing
