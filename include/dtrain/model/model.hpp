// dtrain/model/model.hpp — a sequential network built from a job file's layer list, with every
// parameter, gradient and state tensor a view into one flat device buffer (so sharding over ps
// ranks, allreduce and checkpoints work on plain float ranges; see docs/design.md).
//
// Followed by softmax cross-entropy. One layer stack is built per batch size met (the training
// batch, a last partial batch, the evaluation batch), each sharing the same flat buffers; ops of a
// stack are created once and reused every step.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/dnn/backend.hpp"
#include "dtrain/layers/layer.hpp"

namespace dtrain {

/// Where one tensor lives in a flat buffer.
struct TensorInfo {
  std::string name;         ///< "<index>.<type>.<param>", e.g. "0.conv.weight"
  Shape shape;
  std::size_t offset = 0;   ///< in floats, from the start of the flat buffer
  std::size_t count = 0;    ///< floats
  Init init = Init::zeros;
  int fan_in = 1;
};

class Model {
 public:
  /// Builds the network. `sample` is 1×C×H×W from the dataset, `max_batch` the largest batch
  /// that will be passed. Throws InputError naming the layer line on any bad layer.
  Model(Backend& backend, const std::vector<std::string>& layer_lines, const Shape& sample,
        int num_classes, int max_batch);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  [[nodiscard]] const std::vector<TensorInfo>& param_tensors() const { return params_info_; }
  [[nodiscard]] const std::vector<TensorInfo>& state_tensors() const { return state_info_; }
  [[nodiscard]] std::size_t param_count() const { return param_count_; }
  [[nodiscard]] std::size_t state_count() const { return state_count_; }
  /// Flat device buffers (param_count() / param_count() / state_count() floats).
  [[nodiscard]] float* params() const { return params_.data(); }
  [[nodiscard]] float* grads() const { return grads_.data(); }
  [[nodiscard]] float* state() const { return state_.data(); }

  /// Writes initial parameters (He-normal weights, zero biases, γ = 1, β = 0) and state
  /// (running mean 0, running var 1), deterministically from `seed`.
  void initialize(std::uint64_t seed);

  /// One training step on n ≤ max_batch samples: x (device, n×C×H×W), labels (device int32, n).
  /// Overwrites grads() with grad_scale·∂(Σ loss)/∂θ; adds Σ loss and #correct to stats[0..1]
  /// (device floats). `step_seed` keys dropout. n == 0 zeroes grads().
  void train_step(const float* x, const std::int32_t* labels, int n, float grad_scale,
                  std::uint64_t step_seed, float* stats);

  /// Inference forward on n samples; adds Σ loss and #correct to stats[0..1] (device floats).
  void evaluate(const float* x, const std::int32_t* labels, int n, float* stats);

  /// Identifies the architecture: one line per layer with its description and tensor shapes.
  /// Two models accept each other's checkpoints iff their signatures are equal.
  [[nodiscard]] std::string signature() const;
  /// Human-readable table: layer, output shape, parameters.
  [[nodiscard]] std::string summary() const;
  [[nodiscard]] const Shape& sample_shape() const { return sample_; }
  [[nodiscard]] int num_classes() const { return num_classes_; }
  [[nodiscard]] int max_batch() const { return max_batch_; }
  [[nodiscard]] Backend& backend() const { return backend_; }

 private:
  struct Stack;
  Stack& stack_for(int n);
  void bind(Stack& s);
  void run_forward(Stack& s, const float* x, const StepContext& ctx);

  Backend& backend_;
  std::vector<LayerSpec> specs_;
  Shape sample_;
  int num_classes_;
  int max_batch_;
  std::vector<TensorInfo> params_info_, state_info_;
  std::size_t param_count_ = 0, state_count_ = 0;
  DeviceBuffer<float> params_, grads_, state_;
  std::vector<DeviceBuffer<float>> acts_;  // activations, sized for max_batch
  std::vector<DeviceBuffer<float>> dacts_;  // their gradients
  std::map<int, std::unique_ptr<Stack>> stacks_;
};

}  // namespace dtrain
