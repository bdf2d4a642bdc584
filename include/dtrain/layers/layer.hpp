// dtrain/layers/layer.hpp — the layer interface and the job-file layer syntax.
//
// A job file lists layers one per `layer =` line, e.g.
//   layer = conv filters=32 kernel=3 stride=1 pad=1
//   layer = batchnorm
//   layer = relu
//   layer = maxpool kernel=2 stride=2
//   layer = flatten
//   layer = dense units=128
//   layer = dropout rate=0.3
//   layer = dense            (units defaults to the dataset's number of classes)
// Types: conv, maxpool, avgpool, relu, sigmoid, batchnorm, dropout, flatten, dense. The softmax
// cross-entropy loss always follows the last layer, whose output must be N×classes×1×1.
// A layer is built for one batch size N; the model keeps one layer stack per batch size it meets.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/dnn/backend.hpp"
#include "dtrain/tensor/shape.hpp"

namespace dtrain {

/// One parsed `layer =` line: type plus key=value arguments.
struct LayerSpec {
  std::string type;
  std::map<std::string, std::string> args;
  std::string text;  ///< the original line, for error messages
};

/// Parses "conv filters=32 kernel=3". Throws InputError naming the text on bad syntax.
LayerSpec parse_layer_spec(const std::string& text);

/// How a parameter tensor is initialised (deterministically from the run seed).
enum class Init {
  zeros,
  ones,
  he_normal,      ///< N(0, sqrt(2/fan_in)) (He et al. 2015), for conv/dense weights
};

/// A parameter or state tensor a layer needs; the model allocates it inside its flat buffers.
struct ParamDef {
  std::string name;  ///< e.g. "weight", "bias", "gamma", "running_mean"
  Shape shape;
  Init init = Init::zeros;
  int fan_in = 1;
};

/// Per-step context passed to forward().
struct StepContext {
  bool training = true;
  std::uint64_t seed = 0;  ///< dropout key for this step (the model mixes in the layer index)
};

class Layer {
 public:
  virtual ~Layer() = default;
  /// Layer type as written in the job file ("conv", "dense", ...).
  [[nodiscard]] virtual std::string type() const = 0;
  [[nodiscard]] virtual Shape input_shape() const = 0;
  [[nodiscard]] virtual Shape output_shape() const = 0;
  /// Trainable tensors, in a fixed order.
  [[nodiscard]] virtual std::vector<ParamDef> param_defs() const { return {}; }
  /// Non-trainable state saved in checkpoints (batchnorm running statistics).
  [[nodiscard]] virtual std::vector<ParamDef> state_defs() const { return {}; }
  /// Binds device pointers (into the model's flat buffers) for each param_defs()/state_defs() entry.
  virtual void bind(const std::vector<float*>& params, const std::vector<float*>& grads,
                    const std::vector<float*>& state) {
    (void)params;
    (void)grads;
    (void)state;
  }
  /// y = layer(x); x: input_shape(), y: output_shape() (device pointers, distinct buffers).
  virtual void forward(const float* x, float* y, const StepContext& ctx) = 0;
  /// dx (may be nullptr for the first layer) and parameter gradients (overwritten) from dy.
  virtual void backward(const float* x, const float* y, const float* dy, float* dx) = 0;
  /// Short description with arguments, e.g. "conv(filters=32,kernel=3,stride=1,pad=1)".
  [[nodiscard]] virtual std::string describe() const = 0;
};

/// Builds the layer for `spec` on input shape `input` (N×C×H×W), with ops from `backend`.
/// `num_classes` is the default `units` of a dense layer without one. Throws InputError for an
/// unknown type, an unknown or bad argument, or a shape that does not fit (names spec.text).
std::unique_ptr<Layer> make_layer(const LayerSpec& spec, const Shape& input, int num_classes,
                                  Backend& backend);

}  // namespace dtrain
