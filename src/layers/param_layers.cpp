// src/layers/param_layers.cpp — the layers with trainable parameters: conv, dense, batchnorm.
//
// Each builds its backend op once for its input shape. Weights use He-normal initialisation
// (He et al. 2015) with fan_in = C·k·k (conv) or I (dense); batchnorm (Ioffe & Szegedy 2015)
// has γ = 1, β = 0 and running statistics mean 0, variance 1, as in PyTorch.
#include <climits>

#include "layer_args.hpp"

namespace dtrain::layers {
namespace {

constexpr int kNoMax = INT_MAX;

/// A layer y = op(x, weight) + bias (conv, dense): params are {weight, bias} ({weight} for a conv
/// with bias=false), and ConvOp and DenseOp take their arguments the same way.
template <typename Op>
class WeightedLayer : public LayerBase {
 public:
  WeightedLayer(std::string type, const Shape& in, const Shape& out, std::unique_ptr<Op> op)
      : LayerBase(std::move(type), in, out), op_(std::move(op)) {}
  [[nodiscard]] BackwardNeeds needs() const override { return {true, false, false}; }

 protected:
  // Without a bias, p_/g_ hold the weight only and the op ignores the bias pointers.
  void forward_one(const void* x, void* y, const StepContext& /*ctx*/) override {
    require_bound(op_.get());
    op_->forward(x, p_[0], p_.size() > 1 ? p_[1] : nullptr, y);
  }
  void backward_one(const void* x, const void* /*y*/, const void* dy, void* dx) override {
    require_bound(op_.get());
    op_->backward(x, p_[0], dy, dx, g_[0], g_.size() > 1 ? g_[1] : nullptr);
  }
  std::unique_ptr<Op> op_;
};

class ConvLayer final : public WeightedLayer<ConvOp> {
 public:
  ConvLayer(const ConvDesc& d, const Shape& out, std::unique_ptr<ConvOp> op)
      : WeightedLayer("conv", d.input, out, std::move(op)), d_(d) {}

  [[nodiscard]] std::vector<ParamDef> param_defs() const override {
    const int kh = d_.kernel.h, kw = d_.kernel.w, c = d_.input.c, f = d_.out_channels;
    std::vector<ParamDef> defs{{"weight", Shape{f, c, kh, kw}, Init::he_normal, c * kh * kw}};
    if (d_.bias) defs.push_back({"bias", Shape{f, 1, 1, 1}, Init::zeros, 1});
    return defs;
  }
  [[nodiscard]] bool can_accumulate_dx() const override {
    return op_ != nullptr && op_->can_accumulate_dx();
  }
  void set_accumulate_dx(bool on) override {
    if (op_ != nullptr) op_->set_accumulate_dx(on);
  }
  /// conv → relu as one op (ConvOp::enable_relu); backward then also reads y, as the relu did.
  bool absorb_relu() override {
    if (op_ == nullptr || !op_->enable_relu()) return false;
    relu_ = true;
    return true;
  }
  [[nodiscard]] BackwardNeeds needs() const override { return {true, relu_, false}; }
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> arguments() const override {
    std::vector<std::pair<std::string, std::string>> a{{"filters", std::to_string(d_.out_channels)},
                                                       {"kernel", d_.kernel.str()},
                                                       {"stride", d_.stride.str()},
                                                       {"pad", d_.pad.str()}};
    if (!d_.bias) a.emplace_back("bias", "false");
    return a;
  }

 protected:
  void backward_one(const void* x, const void* y, const void* dy, void* dx) override {
    if (!relu_) return WeightedLayer::backward_one(x, y, dy, dx);
    require_bound(op_.get());
    // dy is the model's gradient buffer of the fused output, read by nothing after this backward
    // (Layer::absorb_relu): the op overwrites it with the pre-activation's gradient.
    op_->backward_relu(x, y, p_[0], const_cast<void*>(dy), dx, g_[0],
                       p_.size() > 1 ? g_[1] : nullptr);
  }

 private:
  ConvDesc d_;
  bool relu_ = false;  ///< absorb_relu() succeeded
};

class DenseLayer final : public WeightedLayer<DenseOp> {
 public:
  DenseLayer(const Shape& in, int units, std::unique_ptr<DenseOp> op, Backend* be)
      : WeightedLayer("dense", in, Shape{in.n, units, 1, 1}, std::move(op)),
        inputs_(static_cast<int>(in.sample_count())), units_(units) {
    // Its weights see the NCHW flattening of x: an NHWC input (VGG's dense after a pool) is
    // converted into x_nchw_ in forward, and dx comes back through dx_nchw_.
    if (be != nullptr && be->differs_from_nchw(in)) {
      be_ = be;
      x_nchw_ = DeviceBuffer<std::byte>(*be, act_bytes(*be, in));
      dx_nchw_ = DeviceBuffer<std::byte>(*be, act_bytes(*be, in));
    }
  }

  [[nodiscard]] std::vector<ParamDef> param_defs() const override {
    return {{"weight", Shape{units_, inputs_, 1, 1}, Init::he_normal, inputs_},
            {"bias", Shape{units_, 1, 1, 1}, Init::zeros, 1}};
  }
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> arguments() const override {
    return {{"units", std::to_string(units_)}};
  }

 protected:
  void forward_one(const void* x, void* y, const StepContext& ctx) override {
    if (be_ != nullptr) {
      be_->convert_layout(x, x_nchw_.data(), in_, Layout::nchw, be_->act_dtype());
      x = x_nchw_.data();
    }
    WeightedLayer::forward_one(x, y, ctx);
  }
  void backward_one(const void* x, const void* y, const void* dy, void* dx) override {
    if (be_ == nullptr) return WeightedLayer::backward_one(x, y, dy, dx);
    WeightedLayer::backward_one(x_nchw_.data(), y, dy, dx ? dx_nchw_.data() : nullptr);
    if (dx != nullptr)
      be_->convert_layout(dx_nchw_.data(), dx, in_, Layout::nhwc, be_->act_dtype());
  }

 private:
  int inputs_;
  int units_;
  Backend* be_ = nullptr;  ///< set when the input is converted (NHWC)
  DeviceBuffer<std::byte> x_nchw_, dx_nchw_;
};

class BatchNormLayer final : public LayerBase {
 public:
  BatchNormLayer(const BatchNormDesc& d, std::unique_ptr<BatchNormOp> op)
      : LayerBase("batchnorm", d.input, d.input), d_(d), op_(std::move(op)) {}

  [[nodiscard]] std::vector<ParamDef> param_defs() const override {
    const Shape c{d_.input.c, 1, 1, 1};
    return {{"gamma", c, Init::ones, 1}, {"beta", c, Init::zeros, 1}};
  }
  [[nodiscard]] std::vector<ParamDef> state_defs() const override {
    const Shape c{d_.input.c, 1, 1, 1};
    return {{"running_mean", c, Init::zeros, 1}, {"running_var", c, Init::ones, 1}};
  }
  /// With a fused epilogue backward also reads y (the relu's output), as the relu did.
  [[nodiscard]] BackwardNeeds needs() const override {
    return {true, epilogue_ != Epilogue::none, false};
  }
  bool absorb_relu() override { return absorb(Epilogue::relu); }
  bool absorb_add_relu() override { return absorb(Epilogue::add_relu); }
  [[nodiscard]] std::vector<Shape> input_shapes() const override {
    if (epilogue_ == Epilogue::add_relu) return {in_, in_};  // x and the add's other input z
    return {in_};
  }
  void forward(LayerInputs x, void* y, const StepContext& ctx) override {
    if (epilogue_ != Epilogue::add_relu) return forward_one(x[0], y, ctx);
    require_bound(op_.get());
    DT_ASSERT(x.size() == 2, "batchnorm + add + relu: expected 2 inputs");
    op_->forward_add_relu(x[0], x[1], p_[0], p_[1], s_[0], s_[1], y, ctx.training);
  }
  void backward(LayerInputs x, const void* y, const void* dy, LayerInputGrads dx) override {
    if (epilogue_ != Epilogue::add_relu) return backward_one(x[0], y, dy, dx[0]);
    require_bound(op_.get());
    DT_ASSERT(x.size() == 2 && dx.size() == 2, "batchnorm + add + relu: expected 2 inputs");
    op_->backward_add_relu(x[0], y, p_[0], p_[1], dy, dx[0], dx[1], g_[0], g_[1]);
  }
  void forward_one(const void* x, void* y, const StepContext& ctx) override {
    require_bound(op_.get());
    op_->forward(x, p_[0], p_[1], s_[0], s_[1], y, ctx.training);
  }
  void backward_one(const void* x, const void* y, const void* dy, void* dx) override {
    require_bound(op_.get());
    if (epilogue_ == Epilogue::relu) op_->backward_relu(x, y, p_[0], p_[1], dy, dx, g_[0], g_[1]);
    else op_->backward(x, p_[0], dy, dx, g_[0], g_[1]);
  }
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> arguments() const override {
    return {{"eps", format_float(d_.epsilon)}, {"momentum", format_float(d_.momentum)}};
  }

 private:
  /// What the layer absorbed (the op applies it): nothing, the relu after it, or add + relu.
  enum class Epilogue { none, relu, add_relu };
  bool absorb(Epilogue e) {
    if (op_ == nullptr || epilogue_ != Epilogue::none) return false;
    const bool ok = e == Epilogue::relu ? op_->enable_relu() : op_->enable_add_relu();
    if (ok) epilogue_ = e;
    return ok;
  }

  BatchNormDesc d_;
  std::unique_ptr<BatchNormOp> op_;
  Epilogue epilogue_ = Epilogue::none;
};

}  // namespace

std::unique_ptr<Layer> make_conv_layer(LayerArgs& args, const Shape& in, Backend* be) {
  ConvDesc d;
  d.input = in;
  d.out_channels = args.require_int("filters", 1, kNoMax);
  d.kernel = args.get_hw("kernel", 3, 1, kNoMax);
  d.stride = args.get_hw("stride", 1, 1, kNoMax);
  d.pad = args.get_hw("pad", 0, 0, kNoMax);
  d.bias = args.get_bool("bias", true);
  args.finish();
  const Shape out = args.in_context([&] { return d.output(); });
  auto op =
      args.in_context([&] { return make_op(be, [&](Backend& b) { return b.make_conv(d); }); });
  return std::make_unique<ConvLayer>(d, out, std::move(op));
}

std::unique_ptr<Layer> make_dense_layer(LayerArgs& args, const Shape& in, int num_classes,
                                        Backend* be) {
  const int units = args.get_int("units", num_classes, 1, kNoMax);
  args.finish();
  if (units < 1) {  // only a missing units= with no classes to default to gets here
    args.fail("dense needs units=<integer> (no number of classes to default to)");
  }
  DenseDesc d;
  d.batch = in.n;
  d.outputs = units;
  const std::size_t inputs = in.sample_count();
  if (in.n < 1 || in.c < 1 || in.h < 1 || in.w < 1 || inputs > static_cast<std::size_t>(kNoMax)) {
    args.fail("dense cannot take input " + in.str() + " (expected a positive N×C×H×W shape)");
  }
  d.inputs = static_cast<int>(inputs);
  auto op =
      args.in_context([&] { return make_op(be, [&](Backend& b) { return b.make_dense(d); }); });
  return std::make_unique<DenseLayer>(in, units, std::move(op), be);
}

std::unique_ptr<Layer> make_batchnorm_layer(LayerArgs& args, const Shape& in, Backend* be) {
  BatchNormDesc d;
  d.input = in;
  d.epsilon = args.get_float("eps", 1e-5f, 1e-12f, 1.0f, false);
  d.momentum = args.get_float("momentum", 0.1f, 0.0f, 1.0f, false);
  args.finish();
  auto op =
      args.in_context([&] { return make_op(be, [&](Backend& b) { return b.make_batchnorm(d); }); });
  return std::make_unique<BatchNormLayer>(d, std::move(op));
}

}  // namespace dtrain::layers
