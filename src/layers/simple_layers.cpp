// src/layers/simple_layers.cpp — the parameter-free layers: maxpool/avgpool, relu/sigmoid,
// dropout (inverted, Srivastava et al. 2014) and flatten (N×C×H×W → N×(C·H·W)×1×1, a copy).
#include <climits>

#include "layer_args.hpp"

namespace dtrain::layers {
namespace {

constexpr int kNoMax = INT_MAX;

class PoolLayer final : public LayerBase {
 public:
  PoolLayer(const PoolDesc& d, const Shape& out, std::unique_ptr<PoolOp> op)
      : LayerBase(d.kind == PoolKind::max ? "maxpool" : "avgpool", d.input, out),
        d_(d),
        op_(std::move(op)) {}

  void forward(const float* x, float* y, const StepContext& ctx) override {
    op_->forward(x, y, ctx.training);
  }
  void backward(const float* x, const float* y, const float* dy, float* dx) override {
    if (dx != nullptr) op_->backward(x, y, dy, dx);
  }
  [[nodiscard]] std::string describe() const override {
    return type_ + "(kernel=" + std::to_string(d_.kernel) + ",stride=" + std::to_string(d_.stride) +
           ",pad=" + std::to_string(d_.pad) + ")";
  }

 private:
  PoolDesc d_;
  std::unique_ptr<PoolOp> op_;
};

class ActivationLayer final : public LayerBase {
 public:
  ActivationLayer(ActKind kind, const Shape& in, std::unique_ptr<ActivationOp> op)
      : LayerBase(kind == ActKind::relu ? "relu" : "sigmoid", in, in), op_(std::move(op)) {}

  void forward(const float* x, float* y, const StepContext& /*ctx*/) override {
    op_->forward(x, y);
  }
  void backward(const float* x, const float* y, const float* dy, float* dx) override {
    if (dx != nullptr) op_->backward(x, y, dy, dx);
  }
  [[nodiscard]] std::string describe() const override { return type_; }

 private:
  std::unique_ptr<ActivationOp> op_;
};

class DropoutLayer final : public LayerBase {
 public:
  DropoutLayer(const Shape& in, float rate, std::unique_ptr<DropoutOp> op)
      : LayerBase("dropout", in, in), rate_(rate), op_(std::move(op)) {}

  void forward(const float* x, float* y, const StepContext& ctx) override {
    op_->forward(x, y, ctx.training, ctx.seed);
  }
  void backward(const float* /*x*/, const float* /*y*/, const float* dy, float* dx) override {
    if (dx != nullptr) op_->backward(dy, dx);
  }
  [[nodiscard]] std::string describe() const override {
    return "dropout(rate=" + format_float(rate_) + ")";
  }

 private:
  float rate_;
  std::unique_ptr<DropoutOp> op_;
};

class FlattenLayer final : public LayerBase {
 public:
  FlattenLayer(const Shape& in, Backend& be)
      : LayerBase("flatten", in, Shape{in.n, static_cast<int>(in.sample_count()), 1, 1}), be_(be) {}

  void forward(const float* x, float* y, const StepContext& /*ctx*/) override {
    be_.copy_device(y, x, in_.count() * sizeof(float));
  }
  void backward(const float* /*x*/, const float* /*y*/, const float* dy, float* dx) override {
    if (dx != nullptr) be_.copy_device(dx, dy, in_.count() * sizeof(float));
  }
  [[nodiscard]] std::string describe() const override { return "flatten"; }

 private:
  Backend& be_;
};

void require_positive(const LayerArgs& args, const Shape& in) {
  if (in.n < 1 || in.c < 1 || in.h < 1 || in.w < 1) {
    args.fail("input shape " + in.str() + " is not a positive N×C×H×W shape");
  }
}

}  // namespace

std::unique_ptr<Layer> make_pool_layer(LayerArgs& args, PoolKind kind, const Shape& in,
                                       Backend& be) {
  PoolDesc d;
  d.input = in;
  d.kind = kind;
  d.kernel = args.get_int("kernel", 2, 1, kNoMax);
  d.stride = args.get_int("stride", d.kernel, 1, kNoMax);
  d.pad = args.get_int("pad", 0, 0, kNoMax);
  args.finish();
  const Shape out = args.in_context([&] { return d.output(); });
  auto op = args.in_context([&] { return be.make_pool(d); });
  return std::make_unique<PoolLayer>(d, out, std::move(op));
}

std::unique_ptr<Layer> make_activation_layer(LayerArgs& args, ActKind kind, const Shape& in,
                                             Backend& be) {
  args.finish();
  require_positive(args, in);
  auto op = args.in_context([&] { return be.make_activation(kind, in); });
  return std::make_unique<ActivationLayer>(kind, in, std::move(op));
}

std::unique_ptr<Layer> make_dropout_layer(LayerArgs& args, const Shape& in, Backend& be) {
  const float rate = args.get_float("rate", 0.5f, 0.0f, 1.0f, true);
  args.finish();
  require_positive(args, in);
  auto op = args.in_context([&] { return be.make_dropout(in, rate); });
  return std::make_unique<DropoutLayer>(in, rate, std::move(op));
}

std::unique_ptr<Layer> make_flatten_layer(LayerArgs& args, const Shape& in, Backend& be) {
  args.finish();
  require_positive(args, in);
  if (in.sample_count() > static_cast<std::size_t>(kNoMax)) {
    args.fail("input " + in.str() + " is too large to flatten");
  }
  return std::make_unique<FlattenLayer>(in, be);
}

}  // namespace dtrain::layers
