// src/layers/layer_args.hpp — private helpers of the layer implementations: typed, range-checked
// access to a LayerSpec's key=value arguments, error messages that quote the job-file line, and
// the per-family layer factories that make_layer dispatches to.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/layers/layer.hpp"

namespace dtrain::layers {

/// Reads the arguments of one layer line. Each get_* marks its key as known; finish() then
/// rejects any key that no getter asked for. Every error is an InputError of the form
/// "layer '<line>': <what>".
class LayerArgs {
 public:
  explicit LayerArgs(const LayerSpec& spec) : spec_(spec) {}

  /// Window size "K" (square) or "HxW", each in [lo, hi]; `def` when absent.
  Hw get_hw(const std::string& key, Hw def, int lo, int hi);
  /// Boolean argument "true" | "false"; `def` when absent.
  bool get_bool(const std::string& key, bool def);
  /// Integer argument in [lo, hi]; `def` when absent.
  int get_int(const std::string& key, int def, int lo, int hi);
  /// Required integer argument in [lo, hi].
  int require_int(const std::string& key, int lo, int hi);
  /// Float argument in [lo, hi] (or [lo, hi) when hi_open); `def` when absent.
  float get_float(const std::string& key, float def, float lo, float hi, bool hi_open);
  /// Throws for any argument key not read by a getter, listing the keys this type accepts.
  void finish() const;

  /// Throws InputError "layer '<line>': <what>".
  [[noreturn]] void fail(const std::string& what) const;

  /// Runs f() (typically an output-shape computation or op creation); an InputError thrown
  /// inside is rethrown with the layer line prepended.
  template <typename F>
  decltype(auto) in_context(F&& f) const {
    try {
      return f();
    } catch (const InputError& e) {
      fail(without_error_prefix(e.what()));  // fail() adds the rank prefix once
    }
  }

 private:
  const std::string* find(const std::string& key);
  const LayerSpec& spec_;
  std::vector<std::string> known_;
};

/// "1e-05", "0.1": shortest-ish float text for describe().
std::string format_float(float v);

/// Checks that `params`/`grads`/`state` hold `np`/`np`/`ns` non-null pointers (Layer::bind).
void check_bind(const std::string& layer, const std::vector<float*>& params,
                const std::vector<float*>& grads, const std::vector<float*>& state, std::size_t np,
                std::size_t ns);

/// Runs make() on the backend, or returns nullptr for a layout-only layer (backend == nullptr).
template <typename F>
auto make_op(Backend* be, F&& make) -> decltype(make(*be)) {
  return be != nullptr ? make(*be) : nullptr;
}

/// The backend of a layer that calls it directly (copies, sums); throws for a layout-only layer.
inline Backend& backend_of(Backend* be, const std::string& layer) {
  DT_ASSERT(be != nullptr, layer + ": a layout-only layer (no backend) cannot run");
  return *be;
}

/// Copies `channels` channels between two activation tensors of the N, H, W of `plane`: channels
/// [src_first, src_first + channels) of src (src_c channels) to [dst_first, dst_first + channels)
/// of dst (dst_c channels), in the backend's layout and act_dtype() — one copy_2d: a block of
/// channels·H·W elements per sample (NCHW) or a run of `channels` elements per pixel (NHWC).
/// Concat and zeropad.
inline void copy_channels(Backend& be, const Shape& plane, void* dst, int dst_c, int dst_first,
                          const void* src, int src_c, int src_first, int channels) {
  const auto z = [](int v) { return static_cast<std::size_t>(v); };
  const std::size_t e = be.act_size();
  // Per sample (NCHW) a channel is H·W elements; per pixel (NHWC) one.
  const bool nhwc = be.layout() == Layout::nhwc;
  const std::size_t unit = nhwc ? e : z(plane.h) * z(plane.w) * e;  // bytes per channel per row
  const std::size_t rows = nhwc ? z(plane.n) * z(plane.h) * z(plane.w) : z(plane.n);
  be.copy_2d(static_cast<char*>(dst) + z(dst_first) * unit, z(dst_c) * unit,
             static_cast<const char*>(src) + z(src_first) * unit, z(src_c) * unit,
             z(channels) * unit, rows);
}

/// Bytes of an activation tensor of shape s on backend be.
inline std::size_t act_bytes(const Backend& be, const Shape& s) {
  return s.count() * be.act_size();
}

/// Common state of every single-input layer: its type, shapes and the pointers bind() received.
class LayerBase : public Layer {
 public:
  LayerBase(std::string type, const Shape& in, const Shape& out)
      : type_(std::move(type)), in_(in), out_(out) {}
  [[nodiscard]] std::string type() const override { return type_; }
  [[nodiscard]] std::vector<Shape> input_shapes() const override { return {in_}; }
  [[nodiscard]] Shape output_shape() const override { return out_; }
  void bind(const std::vector<float*>& params, const std::vector<float*>& grads,
            const std::vector<float*>& state) override {
    check_bind(describe(), params, grads, state, param_defs().size(), state_defs().size());
    p_ = params;
    g_ = grads;
    s_ = state;
  }
  void forward(LayerInputs x, void* y, const StepContext& ctx) override {
    forward_one(x[0], y, ctx);
  }
  void backward(LayerInputs x, const void* y, const void* dy, LayerInputGrads dx) override {
    backward_one(x[0], y, dy, dx[0]);
  }

 protected:
  /// y = layer(x) (activations).
  virtual void forward_one(const void* x, void* y, const StepContext& ctx) = 0;
  /// dx (nullptr: not needed) and parameter gradients from dy.
  virtual void backward_one(const void* x, const void* y, const void* dy, void* dx) = 0;
  /// Throws unless bind() gave this layer its tensors (forward before bind is a model bug) and
  /// the layer was built with a backend.
  void require_bound(const void* op) const {
    DT_ASSERT(op != nullptr, describe() + ": a layout-only layer (no backend) cannot run");
    DT_ASSERT(p_.size() == param_defs().size() && s_.size() == state_defs().size(),
              describe() + ": forward/backward before bind()");
  }
  std::string type_;
  Shape in_, out_;
  std::vector<float*> p_, g_, s_;  // params, grads, state, in param_defs()/state_defs() order
};

// Factories (args already wrapped; each calls args.finish() before building ops; be == nullptr:
// layout only).
std::unique_ptr<Layer> make_conv_layer(LayerArgs& args, const Shape& in, Backend* be);
std::unique_ptr<Layer> make_dense_layer(LayerArgs& args, const Shape& in, int num_classes,
                                        Backend* be);
std::unique_ptr<Layer> make_batchnorm_layer(LayerArgs& args, const Shape& in, Backend* be);
std::unique_ptr<Layer> make_pool_layer(LayerArgs& args, PoolKind kind, const Shape& in,
                                       Backend* be);
std::unique_ptr<Layer> make_global_avgpool_layer(LayerArgs& args, const Shape& in, Backend* be);
std::unique_ptr<Layer> make_activation_layer(LayerArgs& args, ActKind kind, const Shape& in,
                                             Backend* be);
std::unique_ptr<Layer> make_dropout_layer(LayerArgs& args, const Shape& in, Backend* be);
std::unique_ptr<Layer> make_flatten_layer(LayerArgs& args, const Shape& in, Backend* be);
std::unique_ptr<Layer> make_zeropad_layer(LayerArgs& args, const Shape& in, Backend* be);
/// add / concat: two or more inputs.
std::unique_ptr<Layer> make_add_layer(LayerArgs& args, const std::vector<Shape>& in, Backend* be);
std::unique_ptr<Layer> make_concat_layer(LayerArgs& args, const std::vector<Shape>& in,
                                         Backend* be);

}  // namespace dtrain::layers
