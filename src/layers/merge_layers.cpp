// src/layers/merge_layers.cpp — the layers with several inputs: add (element-wise sum of inputs
// of one shape: the residual shortcuts of He et al. 2016) and concat (along channels, inputs of
// equal N, H, W in input= order: the Inception modules of Szegedy et al. 2016). Both only move or
// sum memory, so backward reads neither x nor y: dx_i = dy (add) or dy's channel slice i (concat).
#include <numeric>

#include "layer_args.hpp"

namespace dtrain::layers {
namespace {

class MergeLayer : public Layer {
 public:
  MergeLayer(std::string type, std::vector<Shape> in, const Shape& out, Backend* be)
      : type_(std::move(type)), in_(std::move(in)), out_(out), be_(be) {}
  [[nodiscard]] std::string type() const override { return type_; }
  [[nodiscard]] std::vector<Shape> input_shapes() const override { return in_; }
  [[nodiscard]] Shape output_shape() const override { return out_; }
  [[nodiscard]] BackwardNeeds needs() const override { return {false, false, false}; }

 protected:
  Backend& be() const { return backend_of(be_, type_); }
  void check_arity(LayerInputs x) const {
    DT_ASSERT(x.size() == in_.size(), type_ + ": expected " + std::to_string(in_.size()) +
                                          " inputs, got " + std::to_string(x.size()));
  }
  std::string type_;
  std::vector<Shape> in_;
  Shape out_;
  Backend* be_;
};

class AddLayer final : public MergeLayer {
 public:
  AddLayer(const std::vector<Shape>& in, Backend* be) : MergeLayer("add", in, in[0], be) {}

  /// Two inputs and a backend: y = max(x0 + x1, 0) through Backend::add_relu (one pass on CUDA).
  bool absorb_relu() override {
    if (be_ == nullptr || in_.size() != 2) return false;
    relu_ = be_->make_activation(ActKind::relu, out_);
    return true;
  }
  /// With a fused relu backward reads y (the relu's output) for its mask.
  [[nodiscard]] BackwardNeeds needs() const override { return {false, relu_ != nullptr, false}; }

  void forward(LayerInputs x, void* y, const StepContext& /*ctx*/) override {
    check_arity(x);
    if (relu_) return be().add_relu(y, x[0], x[1], out_.count(), be().act_dtype(), *relu_);
    be().copy_device(y, x[0], act_bytes(be(), out_));
    for (std::size_t i = 1; i < x.size(); ++i) be().add(y, x[i], out_.count(), be().act_dtype());
  }
  void backward(LayerInputs x, const void* y, const void* dy, LayerInputGrads dx) override {
    check_arity(x);
    if (relu_)
      return be().relu_backward_fanout(y, dy, dx[0], dx[1], out_.count(), be().act_dtype(), *relu_);
    for (void* d : dx)
      if (d != nullptr) be().copy_device(d, dy, act_bytes(be(), out_));
  }

 private:
  std::unique_ptr<ActivationOp> relu_;  ///< absorb_relu(): the relu this layer applies
};

class ConcatLayer final : public MergeLayer {
 public:
  ConcatLayer(const std::vector<Shape>& in, const Shape& out, Backend* be)
      : MergeLayer("concat", in, out, be) {}

  void forward(LayerInputs x, void* y, const StepContext& /*ctx*/) override {
    check_arity(x);
    int first = 0;  // input i's first channel in y
    for (std::size_t i = 0; i < x.size(); ++i) {
      copy_channels(be(), out_, y, out_.c, first, x[i], in_[i].c, 0, in_[i].c);
      first += in_[i].c;
    }
  }
  void backward(LayerInputs x, const void* /*y*/, const void* dy, LayerInputGrads dx) override {
    check_arity(x);
    int first = 0;
    for (std::size_t i = 0; i < dx.size(); ++i) {
      if (dx[i] != nullptr)
        copy_channels(be(), out_, dx[i], in_[i].c, 0, dy, out_.c, first, in_[i].c);
      first += in_[i].c;
    }
  }
};

}  // namespace

std::unique_ptr<Layer> make_add_layer(LayerArgs& args, const std::vector<Shape>& in, Backend* be) {
  args.finish();
  for (std::size_t i = 1; i < in.size(); ++i)
    if (!(in[i] == in[0]))
      args.fail("add needs inputs of one shape, but input 1 is " + in[0].with_n(1).str() +
                " and input " + std::to_string(i + 1) + " is " + in[i].with_n(1).str() +
                " (per sample)");
  return std::make_unique<AddLayer>(in, be);
}

std::unique_ptr<Layer> make_concat_layer(LayerArgs& args, const std::vector<Shape>& in,
                                         Backend* be) {
  args.finish();
  Shape out = in[0];
  for (std::size_t i = 1; i < in.size(); ++i) {
    if (in[i].n != in[0].n || in[i].h != in[0].h || in[i].w != in[0].w)
      args.fail("concat joins along channels and needs inputs of one height and width, but "
                "input 1 is " +
                in[0].with_n(1).str() + " and input " + std::to_string(i + 1) + " is " +
                in[i].with_n(1).str() + " (per sample)");
    out.c += in[i].c;
  }
  return std::make_unique<ConcatLayer>(in, out, be);
}

}  // namespace dtrain::layers
