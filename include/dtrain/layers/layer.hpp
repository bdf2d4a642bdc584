// dtrain/layers/layer.hpp — the layer interface and the job-file layer syntax.
//
// A job file lists layers one per `layer =` line, in order; together they form a directed acyclic
// graph. Each line is `TYPE key=value ...`, e.g.
//   layer = conv filters=64 kernel=3 pad=1 bias=false name=c1
//   layer = batchnorm
//   layer = relu name=r1
//   layer = conv filters=64 kernel=1x7 pad=0x3 input=r1
//   layer = add input=r1,c2
// Keys every layer accepts:
//   name=NAME     names the layer's output (letters, digits, '_', '-', '.'; unique; `data` is the
//                 network input and reserved),
//   input=A[,B..] takes the outputs of earlier named layers (or `data`); default: the previous
//                 line's layer (the first line: `data`),
//   stage=K       with --pipeline-stages: pipeline stage K (0, 1, ...) starts at this layer
//                 (model/pipeline_plan.hpp); without it the cut is balanced automatically.
// Types: conv, maxpool, avgpool, globalavgpool, relu, sigmoid, batchnorm, dropout, flatten, dense
// (one input each) and add, concat (two or more inputs) and zeropad. Window sizes (kernel, stride,
// pad) are `K` (square) or `HxW`. The softmax cross-entropy loss follows the last line, whose
// output must be N×classes×1×1; every other layer's output must be used by a later layer.
// A layer is built for one batch size N; the model keeps one set of layers per batch size it meets.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/dnn/backend.hpp"
#include "dtrain/tensor/shape.hpp"

namespace dtrain {

/// One parsed `layer =` line: type, graph keys and the type's key=value arguments.
struct LayerSpec {
  std::string type;
  std::map<std::string, std::string> args;  ///< the type's arguments (not name= / input=)
  std::string name;                         ///< name=, or empty
  std::vector<std::string> inputs;          ///< input=, or empty (the previous layer)
  int stage = -1;    ///< stage=K: this layer starts pipeline stage K (--pipeline-stages); -1: none
  std::string text;  ///< the original line, for error messages
};

/// The network input's name in `input=` lists.
inline constexpr const char* kInputName = "data";

/// Parses "conv filters=32 kernel=3 name=c1 input=data". Throws InputError naming the text on
/// bad syntax, a bad or reserved name, or an empty input list.
LayerSpec parse_layer_spec(const std::string& text);

/// How a parameter tensor is initialised (deterministically from the run seed).
enum class Init {
  zeros,
  ones,
  he_normal,  ///< N(0, sqrt(2/fan_in)) (He et al. 2015), for conv/dense weights
};

/// A parameter or state tensor a layer needs; the model allocates it inside its flat buffers.
struct ParamDef {
  std::string name;  ///< e.g. "weight", "bias", "gamma", "running_mean"
  Shape shape;
  Init init = Init::zeros;
  /// Inputs feeding one output unit, used by Init::he_normal: C·R·S for a conv weight (input
  /// channels × kernel height × width), I for a dense weight; 1 for every other tensor.
  int fan_in = 1;
};

/// Per-step context passed to forward().
struct StepContext {
  bool training = true;
  std::uint64_t seed = 0;  ///< dropout key for this step (the model mixes in the layer index)
  /// Where set: a device word holding the step's seed before the layer index is mixed in
  /// (Backend::set_step_seed), and `salt` that index: dropout reads its key as
  /// mix_seed(*device_seed, salt) == seed on the device (DropoutKey).
  const std::uint64_t* device_seed = nullptr;
  std::uint64_t salt = 0;
};

/// Input tensors of a layer (device pointers to activations of the backend's act_dtype(), one per
/// input, in input= order) and their gradients (entries may be nullptr: that input needs no
/// gradient, e.g. the network input).
using LayerInputs = std::span<const void* const>;
using LayerInputGrads = std::span<void* const>;

/// What a layer's backward reads besides dy; the model keeps exactly these tensors alive until
/// the layer's backward and may run a layer in place (y in x's buffer) when it allows it.
struct BackwardNeeds {
  bool input = true;      ///< reads x
  bool output = false;    ///< reads y
  bool in_place = false;  ///< forward may write y over x (same shape, x read only elementwise)
};

class Layer {
 public:
  virtual ~Layer() = default;
  /// Layer type as written in the job file ("conv", "dense", ...).
  [[nodiscard]] virtual std::string type() const = 0;
  /// Input shapes, in input= order (one for most layers).
  [[nodiscard]] virtual std::vector<Shape> input_shapes() const = 0;
  /// The first input's shape (N×C×H×W, N the batch the layer was built for).
  [[nodiscard]] Shape input_shape() const { return input_shapes().front(); }
  /// The output's shape (N×C×H×W; a dense layer's is N×units×1×1).
  [[nodiscard]] virtual Shape output_shape() const = 0;
  /// The tensors backward() reads besides dy, and whether forward may run in place.
  [[nodiscard]] virtual BackwardNeeds needs() const { return {}; }
  /// Trainable tensors, in a fixed order.
  [[nodiscard]] virtual std::vector<ParamDef> param_defs() const { return {}; }
  /// Non-trainable state saved in checkpoints (batchnorm running statistics).
  [[nodiscard]] virtual std::vector<ParamDef> state_defs() const { return {}; }
  /// Binds device pointers (into the model's flat buffers) for each param_defs()/state_defs()
  /// entry.
  virtual void bind(const std::vector<float*>& params, const std::vector<float*>& grads,
                    const std::vector<float*>& state) {
    (void)params;
    (void)grads;
    (void)state;
  }
  /// y = layer(x...); x[i]: input_shapes()[i], y: output_shape() (device pointers to activations;
  /// y == x[0] only when needs().in_place).
  virtual void forward(LayerInputs x, void* y, const StepContext& ctx) = 0;
  /// dx[i] (overwritten; skipped where nullptr) and parameter gradients (overwritten) from dy.
  /// x and y hold what forward() saw, as far as needs() asks for them.
  virtual void backward(LayerInputs x, const void* y, const void* dy, LayerInputGrads dx) = 0;
  /// Fusion (the model asks, with Backend::fuse()): apply relu to this layer's own output, so that
  /// the relu layer right after it need not run. When it returns true, forward writes
  /// max(layer(x), 0), backward receives that output as y and its gradient as dy (which it may
  /// overwrite: the model's buffer of that gradient, read by nothing after this backward; a conv
  /// leaves the pre-activation's gradient there), and needs() reports output = true. False (the
  /// default) where the layer has no fused form on its backend (conv, add and batchnorm have one).
  virtual bool absorb_relu() { return false; }
  /// Fusion of a residual block's end: take the add after this layer and the relu after that.
  /// When it returns true the layer gains a second input z (the add's other input, of this
  /// layer's output shape; input_shapes() lists it), forward writes max(layer(x) + z, 0),
  /// backward receives that output as y and its gradient as dy and writes dx[1] = ∂L/∂z, and
  /// needs() reports output = true. False (the default) where there is no fused form.
  virtual bool absorb_add_relu() { return false; }
  /// Whether backward can add the input gradient into dx[0] instead of overwriting it (a
  /// convolution on cuDNN: β = 1), saving the scratch gradient and the add that a tensor read by
  /// several layers otherwise needs. Default false.
  [[nodiscard]] virtual bool can_accumulate_dx() const { return false; }
  /// on: later backward calls write dx[0] += ∂L/∂x. Only where can_accumulate_dx() (LibraryError
  /// otherwise).
  virtual void set_accumulate_dx(bool on) { (void)on; }
  /// The layer's arguments with every default filled in, in describe()'s order and text: conv
  /// filters, kernel, stride, pad (windows as "K" or "HxW") and bias=false when it has none;
  /// maxpool/avgpool kernel, stride, pad; batchnorm eps, momentum; dense units; dropout rate;
  /// zeropad channels; nothing for the others. What an exporter reads (train/onnx_export.hpp).
  [[nodiscard]] virtual std::vector<std::pair<std::string, std::string>> arguments() const {
    return {};
  }
  /// Short description, type() and arguments(): "conv(filters=32,kernel=3,stride=1,pad=1)",
  /// "relu". Part of Model::signature(), so its text never changes.
  [[nodiscard]] std::string describe() const;
};

/// Builds the layer for `spec` on input shapes `inputs` (N×C×H×W each, input= order), with ops
/// from `backend`; backend == nullptr builds shapes and parameter definitions only (no ops: such
/// a layer must not run). `num_classes` is the default `units` of a dense layer without one.
/// Throws InputError naming spec.text for an unknown type, an unknown or bad argument, a wrong
/// number of inputs, or shapes that do not fit.
std::unique_ptr<Layer> make_layer(const LayerSpec& spec, const std::vector<Shape>& inputs,
                                  int num_classes, Backend* backend);

}  // namespace dtrain
