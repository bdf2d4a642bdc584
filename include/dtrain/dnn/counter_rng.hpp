// dtrain/dnn/counter_rng.hpp — a stateless, counter-based random generator (SplitMix64 finalizer,
// Steele et al. 2014) usable from host and CUDA code. Value i of stream `seed` depends only on
// (seed, i), so dropout masks are reproducible across restarts with no generator state to save
// (the approach of JAX's and Philox-style counter-based RNGs).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DT_HOST_DEVICE __host__ __device__
#else
#define DT_HOST_DEVICE
#endif

namespace dtrain {

/// 64 well-mixed bits from (seed, counter).
DT_HOST_DEVICE inline std::uint64_t counter_hash(std::uint64_t seed, std::uint64_t counter) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (counter + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Uniform float in [0, 1) from (seed, counter), 24-bit resolution.
DT_HOST_DEVICE inline float counter_uniform(std::uint64_t seed, std::uint64_t counter) {
  return static_cast<float>(counter_hash(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

/// Combines several integers into one seed (order matters).
DT_HOST_DEVICE inline std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) {
  return counter_hash(a, b);
}

}  // namespace dtrain
