// tests/common/act_tensor.hpp — an activation tensor of either element type on a backend, for the
// GPU tests that feed ops bf16 or fp32 data and read the results back as floats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtrain/dnn/backend.hpp"

namespace dtrain::testing {

/// A tensor of `n` elements of type t (f32 or bf16) on backend `be`, filled from floats (rounded
/// to nearest even for bf16 by Backend::cast).
struct ActTensor {
  Backend* be;
  DType t;
  std::size_t n;
  DeviceBuffer<float> f32;         ///< fp32 values (the tensor itself when t is f32)
  DeviceBuffer<std::uint16_t> lp;  ///< the bf16 tensor (t bf16)
  ActTensor(Backend& b, DType type, const std::vector<float>& v)
      : be(&b), t(type), n(v.size()), f32(b, v.size()) {
    b.copy_to_device(f32.data(), v.data(), v.size() * sizeof(float));
    if (t == DType::bf16) {
      lp = DeviceBuffer<std::uint16_t>(b, n);
      b.cast(f32.data(), DType::f32, lp.data(), DType::bf16, n);
    }
  }
  /// The device pointer an op takes.
  [[nodiscard]] void* data() const {
    return t == DType::bf16 ? static_cast<void*>(lp.data()) : static_cast<void*>(f32.data());
  }
  /// The values as floats (bf16 widened exactly), after the backend's queued work.
  [[nodiscard]] std::vector<float> host() {
    if (t == DType::bf16) be->cast(lp.data(), DType::bf16, f32.data(), DType::f32, n);
    be->synchronize();
    std::vector<float> v(n);
    be->copy_to_host(v.data(), f32.data(), n * sizeof(float));
    return v;
  }
};

}  // namespace dtrain::testing
