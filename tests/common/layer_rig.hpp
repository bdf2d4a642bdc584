// tests/common/layer_rig.hpp — test helpers for layers and backend ops: a LayerRig that owns a
// layer's input/output/parameter buffers on any Backend (host vectors in, host vectors out), and
// a central-finite-difference gradient check of L = Σ y ⊙ r.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/dnn/backend.hpp"
#include "dtrain/layers/layer.hpp"

namespace dtrain::test {

/// n values uniform in [lo, hi) from std::mt19937_64(seed).
std::vector<float> uniform_values(std::size_t n, std::uint64_t seed, float lo, float hi);

/// n distinct values (a shuffled ramp lo, lo+step, ...), for max pooling without ties.
std::vector<float> distinct_values(std::size_t n, std::uint64_t seed, float lo, float step);

/// Copies a host vector to a new DeviceBuffer / a device range back to a host vector.
DeviceBuffer<float> to_device(Backend& be, const std::vector<float>& host);
std::vector<float> to_host(Backend& be, const float* p, std::size_t n);

/// One layer built by make_layer with every buffer it needs. Parameters start random
/// (U(-1,1); Init::ones tensors U(0.5,1.5)); state starts at its Init (0 or 1); inputs are U(-1,1).
/// Layers with several inputs (add, concat) take one shape per input.
class LayerRig {
 public:
  LayerRig(Backend& be, const std::string& line, const Shape& input, int num_classes = 10,
           std::uint64_t seed = 1);
  LayerRig(Backend& be, const std::string& line, const std::vector<Shape>& inputs,
           int num_classes = 10, std::uint64_t seed = 1);

  [[nodiscard]] Layer& layer() const { return *layer_; }
  [[nodiscard]] std::size_t num_params() const { return params_.size(); }
  [[nodiscard]] std::size_t num_inputs() const { return xs_.size(); }

  /// Input 0 (or input k).
  void set_input(const std::vector<float>& x) { set_input(0, x); }
  void set_input(std::size_t k, const std::vector<float>& x);
  [[nodiscard]] std::vector<float> input(std::size_t k = 0) const;
  void set_param(std::size_t i, const std::vector<float>& v);
  [[nodiscard]] std::vector<float> param(std::size_t i) const;
  [[nodiscard]] std::vector<float> grad(std::size_t i) const;
  void set_state(std::size_t i, const std::vector<float>& v);
  [[nodiscard]] std::vector<float> state(std::size_t i) const;
  /// Sets element `k` of parameter `i` (i == input_id(j): of input j; npos is input 0).
  void set_element(std::size_t i, std::size_t k, float v);
  [[nodiscard]] float element(std::size_t i, std::size_t k) const;

  /// Runs forward and returns y.
  std::vector<float> forward(bool training = true, std::uint64_t seed = 0);
  /// Runs backward with dy (after forward) and returns dx of input 0; input_grad(k) returns
  /// input k's; grad(i) holds the parameter grads.
  std::vector<float> backward(const std::vector<float>& dy);
  [[nodiscard]] std::vector<float> input_grad(std::size_t k) const;

  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  static constexpr std::size_t input_id(std::size_t k) { return npos - k; }

 private:
  float* target(std::size_t i) const;
  Backend& be_;
  std::unique_ptr<Layer> layer_;
  std::vector<DeviceBuffer<float>> xs_, dxs_;
  DeviceBuffer<float> y_, dy_;
  std::vector<DeviceBuffer<float>> params_, grads_, state_;
};

struct GradCheckOptions {
  double eps = 1e-3;   ///< central difference step
  double atol = 2e-3;  ///< |analytic − numeric| ≤ atol + rtol·max(|analytic|, |numeric|)
  double rtol = 2e-2;
  std::size_t max_coords = 120;  ///< coordinates checked per tensor (all when fewer)
  bool training = true;
  std::uint64_t seed = 7;  ///< StepContext seed (dropout mask)
};

/// Compares dx and every parameter gradient of L = Σ y ⊙ r (r fixed, U(-1,1)) with central
/// finite differences; reports each mismatch with ADD_FAILURE naming the tensor and coordinate.
/// Returns the number of coordinates checked.
std::size_t check_layer_gradients(LayerRig& rig, const GradCheckOptions& opt = {});

/// True when |a − n| ≤ atol + rtol·max(|a|, |n|).
bool close_enough(double analytic, double numeric, double atol, double rtol);

}  // namespace dtrain::test
