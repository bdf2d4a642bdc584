// dtrain/tensor/shape.hpp — the N×C×H×W shape every activation and parameter tensor uses.
//
// All tensors in dtrain are dense fp32 (labels: int32), row-major in N, C, H, W order (oneDNN
// "nchw", cuDNN CUDNN_TENSOR_NCHW). A dense layer's input is N×F×1×1; its weight is O×I×1×1.
#pragma once

#include <cstddef>
#include <string>

namespace dtrain {

struct Shape {
  int n = 1;  ///< batch (or output channels for a weight tensor)
  int c = 1;  ///< channels (or input channels for a weight tensor)
  int h = 1;  ///< height
  int w = 1;  ///< width

  /// Number of elements n*c*h*w.
  [[nodiscard]] std::size_t count() const { return static_cast<std::size_t>(n) * c * h * w; }
  /// Elements of one sample: c*h*w.
  [[nodiscard]] std::size_t sample_count() const { return static_cast<std::size_t>(c) * h * w; }
  /// The same shape with batch n replaced.
  [[nodiscard]] Shape with_n(int new_n) const { return Shape{new_n, c, h, w}; }
  /// "NxCxHxW", e.g. "64x1x28x28".
  [[nodiscard]] std::string str() const {
    return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" +
           std::to_string(w);
  }
  friend bool operator==(const Shape&, const Shape&) = default;
};

}  // namespace dtrain
