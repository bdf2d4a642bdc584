// src/layers/simple_layers.cpp — the parameter-free single-input layers: maxpool/avgpool and
// globalavgpool (an avg pool whose window is the whole H×W plane, as
// torch.nn.AdaptiveAvgPool2d(1)), relu/sigmoid, dropout (inverted, Srivastava et al. 2014), flatten
// (N×C×H×W → N×(C·H·W)×1×1 in NCHW order: the same memory in the NCHW layout, so the model runs it
// in place and nothing is copied; an NHWC input is converted) and zeropad (N×Cin×H×W → N×C×H×W with
// the input at channel offset (C − Cin)/2 and zeros elsewhere: the parameter-free "option A"
// shortcut of He et al. 2016 §4.2).
#include <climits>

#include "layer_args.hpp"

namespace dtrain::layers {
namespace {

constexpr int kNoMax = INT_MAX;

class PoolLayer final : public LayerBase {
 public:
  PoolLayer(const PoolDesc& d, const Shape& out, std::unique_ptr<PoolOp> op, bool global)
      : LayerBase(global                    ? "globalavgpool"
                  : d.kind == PoolKind::max ? "maxpool"
                                            : "avgpool",
                  d.input, out),
        d_(d), global_(global), op_(std::move(op)) {}

  // cuDNN's pooling backward reads x and y (oneDNN's only its workspace).
  [[nodiscard]] BackwardNeeds needs() const override { return {true, true, false}; }
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> arguments() const override {
    if (global_) return {};
    return {{"kernel", d_.kernel.str()}, {"stride", d_.stride.str()}, {"pad", d_.pad.str()}};
  }

 protected:
  void forward_one(const void* x, void* y, const StepContext& ctx) override {
    require_bound(op_.get());
    op_->forward(x, y, ctx.training);
  }
  void backward_one(const void* x, const void* y, const void* dy, void* dx) override {
    if (dx != nullptr) op_->backward(x, y, dy, dx);
  }

 private:
  PoolDesc d_;
  bool global_;
  std::unique_ptr<PoolOp> op_;
};

class ActivationLayer final : public LayerBase {
 public:
  ActivationLayer(ActKind kind, const Shape& in, std::unique_ptr<ActivationOp> op)
      : LayerBase(kind == ActKind::relu ? "relu" : "sigmoid", in, in), op_(std::move(op)) {}

  // Both derivatives are functions of y (ActivationOp::backward), so x may be overwritten.
  [[nodiscard]] BackwardNeeds needs() const override { return {false, true, true}; }

 protected:
  void forward_one(const void* x, void* y, const StepContext& /*ctx*/) override {
    require_bound(op_.get());
    op_->forward(x, y);
  }
  void backward_one(const void* /*x*/, const void* y, const void* dy, void* dx) override {
    if (dx != nullptr) op_->backward(y, y, dy, dx);
  }

 private:
  std::unique_ptr<ActivationOp> op_;
};

class DropoutLayer final : public LayerBase {
 public:
  DropoutLayer(const Shape& in, float rate, std::unique_ptr<DropoutOp> op)
      : LayerBase("dropout", in, in), rate_(rate), op_(std::move(op)) {}

  // The op keeps its mask: backward reads neither x nor y.
  [[nodiscard]] BackwardNeeds needs() const override { return {false, false, true}; }
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> arguments() const override {
    return {{"rate", format_float(rate_)}};
  }

 protected:
  void forward_one(const void* x, void* y, const StepContext& ctx) override {
    require_bound(op_.get());
    op_->forward_keyed(x, y, ctx.training, DropoutKey{ctx.seed, ctx.device_seed, ctx.salt});
  }
  void backward_one(const void* /*x*/, const void* /*y*/, const void* dy, void* dx) override {
    if (dx != nullptr) op_->backward(dy, dx);
  }

 private:
  float rate_;
  std::unique_ptr<DropoutOp> op_;
};

/// Layers that only move memory (flatten, zeropad) keep the backend for copies.
class CopyLayer : public LayerBase {
 public:
  CopyLayer(std::string type, const Shape& in, const Shape& out, Backend* be)
      : LayerBase(std::move(type), in, out), be_(be) {}

 protected:
  Backend& be() const { return backend_of(be_, describe()); }
  Backend* be_;
};

class FlattenLayer final : public CopyLayer {
 public:
  FlattenLayer(const Shape& in, Backend* be)
      : CopyLayer("flatten", in, Shape{in.n, static_cast<int>(in.sample_count()), 1, 1}, be),
        convert_(be != nullptr && be->differs_from_nchw(in)) {}
  // NCHW (or nothing to convert): the same memory, run in place. NHWC: y is the NCHW order.
  [[nodiscard]] BackwardNeeds needs() const override { return {false, false, !convert_}; }

 protected:
  // In place (x == y) these are no-ops.
  void forward_one(const void* x, void* y, const StepContext& /*ctx*/) override {
    if (convert_) return be().convert_layout(x, y, in_, Layout::nchw, be().act_dtype());
    be().copy_device(y, x, act_bytes(be(), in_));
  }
  void backward_one(const void* /*x*/, const void* /*y*/, const void* dy, void* dx) override {
    if (dx == nullptr) return;
    if (convert_) return be().convert_layout(dy, dx, in_, Layout::nhwc, be().act_dtype());
    be().copy_device(dx, dy, act_bytes(be(), in_));
  }

 private:
  bool convert_;  ///< NHWC input whose memory order differs from its NCHW flattening
};

class ZeroPadLayer final : public CopyLayer {
 public:
  ZeroPadLayer(const Shape& in, int channels, Backend* be)
      : CopyLayer("zeropad", in, Shape{in.n, channels, in.h, in.w}, be),
        first_((channels - in.c) / 2) {}
  [[nodiscard]] BackwardNeeds needs() const override { return {false, false, false}; }
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> arguments() const override {
    return {{"channels", std::to_string(out_.c)}};
  }

 protected:
  void forward_one(const void* x, void* y, const StepContext& /*ctx*/) override {
    be().zero(y, act_bytes(be(), out_));
    copy_channels(be(), in_, y, out_.c, first_, x, in_.c, 0, in_.c);
  }
  void backward_one(const void* /*x*/, const void* /*y*/, const void* dy, void* dx) override {
    if (dx != nullptr) copy_channels(be(), in_, dx, in_.c, 0, dy, out_.c, first_, in_.c);
  }

 private:
  int first_;  ///< the output channel of the input's first channel
};

void require_positive(const LayerArgs& args, const Shape& in) {
  if (in.n < 1 || in.c < 1 || in.h < 1 || in.w < 1) {
    args.fail("input shape " + in.str() + " is not a positive N×C×H×W shape");
  }
}

std::unique_ptr<Layer> build_pool(LayerArgs& args, const PoolDesc& d, bool global, Backend* be) {
  const Shape out = args.in_context([&] { return d.output(); });
  auto op =
      args.in_context([&] { return make_op(be, [&](Backend& b) { return b.make_pool(d); }); });
  return std::make_unique<PoolLayer>(d, out, std::move(op), global);
}

}  // namespace

std::unique_ptr<Layer> make_pool_layer(LayerArgs& args, PoolKind kind, const Shape& in,
                                       Backend* be) {
  PoolDesc d;
  d.input = in;
  d.kind = kind;
  d.kernel = args.get_hw("kernel", 2, 1, kNoMax);
  d.stride = args.get_hw("stride", d.kernel, 1, kNoMax);
  d.pad = args.get_hw("pad", 0, 0, kNoMax);
  args.finish();
  return build_pool(args, d, false, be);
}

std::unique_ptr<Layer> make_global_avgpool_layer(LayerArgs& args, const Shape& in, Backend* be) {
  args.finish();
  require_positive(args, in);
  PoolDesc d;
  d.input = in;
  d.kind = PoolKind::avg;
  d.kernel = Hw{in.h, in.w};
  d.stride = 1;
  d.pad = 0;
  return build_pool(args, d, true, be);
}

std::unique_ptr<Layer> make_activation_layer(LayerArgs& args, ActKind kind, const Shape& in,
                                             Backend* be) {
  args.finish();
  require_positive(args, in);
  auto op = args.in_context(
      [&] { return make_op(be, [&](Backend& b) { return b.make_activation(kind, in); }); });
  return std::make_unique<ActivationLayer>(kind, in, std::move(op));
}

std::unique_ptr<Layer> make_dropout_layer(LayerArgs& args, const Shape& in, Backend* be) {
  const float rate = args.get_float("rate", 0.5f, 0.0f, 1.0f, true);
  args.finish();
  require_positive(args, in);
  auto op = args.in_context(
      [&] { return make_op(be, [&](Backend& b) { return b.make_dropout(in, rate); }); });
  return std::make_unique<DropoutLayer>(in, rate, std::move(op));
}

std::unique_ptr<Layer> make_flatten_layer(LayerArgs& args, const Shape& in, Backend* be) {
  args.finish();
  require_positive(args, in);
  if (in.sample_count() > static_cast<std::size_t>(kNoMax)) {
    args.fail("input " + in.str() + " is too large to flatten");
  }
  return std::make_unique<FlattenLayer>(in, be);
}

std::unique_ptr<Layer> make_zeropad_layer(LayerArgs& args, const Shape& in, Backend* be) {
  const int channels = args.require_int("channels", 1, kNoMax);
  args.finish();
  require_positive(args, in);
  if (channels < in.c)
    args.fail("channels=" + std::to_string(channels) + " is fewer than the input's " +
              std::to_string(in.c) + " channels (zeropad only adds channels)");
  return std::make_unique<ZeroPadLayer>(in, channels, be);
}

}  // namespace dtrain::layers
