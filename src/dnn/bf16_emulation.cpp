// src/dnn/bf16_emulation.cpp — bf16 activations over fp32 ops (see bf16_emulation.hpp).
#include "bf16_emulation.hpp"

#include <array>
#include <utility>

namespace dtrain {

class Bf16Emulation::Scratch {
 public:
  explicit Scratch(Backend& be) : be_(be) {}
  /// Slot i as at least n floats (a slot grows, never shrinks; other slots do not move).
  float* get(std::size_t i, std::size_t n) {
    DeviceBuffer<float>& b = slots_.at(i);
    if (b.size() < n) {
      b.reset();
      b = DeviceBuffer<float>(be_, n);
    }
    return b.data();
  }

 private:
  Backend& be_;
  std::array<DeviceBuffer<float>, 6> slots_;
};

namespace {

// Scratch slots of one call: activations (up to four), the rounded weights and a bf16 staging.
enum Slot : std::size_t { kA = 0, kB, kC, kD, kWeights, kStage };

/// What every wrapped op does: bf16 ↔ fp32 through the shared scratch.
class Emulated {
 protected:
  Emulated(Backend& be, std::shared_ptr<Bf16Emulation::Scratch> s) : be_(be), s_(std::move(s)) {}
  /// The n bf16 values at x as fp32 in slot i.
  const float* in(Slot i, const void* x, std::size_t n) {
    float* f = s_->get(i, n);
    be_.cast(x, DType::bf16, f, DType::f32, n);
    return f;
  }
  /// Slot i as n fp32 outputs (nullptr when `wanted` is false, e.g. an absent dx).
  float* out(Slot i, std::size_t n, bool wanted = true) { return wanted ? s_->get(i, n) : nullptr; }
  /// y = slot i rounded to bf16 (n values); nothing when y is nullptr.
  void store(Slot i, void* y, std::size_t n) {
    if (y != nullptr) be_.cast(s_->get(i, n), DType::f32, y, DType::bf16, n);
  }
  /// The n fp32 weights at w rounded to bf16 values, as fp32.
  const float* weights(const float* w, std::size_t n) {
    float* stage = s_->get(kStage, (n + 1) / 2);  // n bf16 values
    float* r = s_->get(kWeights, n);
    be_.cast(w, DType::f32, stage, DType::bf16, n);
    be_.cast(stage, DType::bf16, r, DType::f32, n);
    return r;
  }
  Backend& be_;
  std::shared_ptr<Bf16Emulation::Scratch> s_;
};

/// An fp32 op of type Op behind the Op interface: nx_ elements per activation input, ny_ per
/// output (equal for the shape-preserving ops), nw_ weights.
template <typename Op>
class EmulatedOp : public Op, protected Emulated {
 public:
  EmulatedOp(Backend& be, std::shared_ptr<Bf16Emulation::Scratch> s, std::unique_ptr<Op> op,
             std::size_t nx, std::size_t ny, std::size_t nw = 0)
      : Emulated(be, std::move(s)), op_(std::move(op)), nx_(nx), ny_(ny), nw_(nw) {}

 protected:
  std::unique_ptr<Op> op_;
  std::size_t nx_, ny_, nw_;
};

/// Conv and dense: y = op(x, w) + b with bf16 x, y and bf16-rounded weights.
template <typename Op>
class EmulatedWeighted final : public EmulatedOp<Op> {
 public:
  using EmulatedOp<Op>::EmulatedOp;
  void forward(const void* x, const float* w, const float* b, void* y) override {
    this->op_->forward(this->in(kA, x, this->nx_), this->weights(w, this->nw_), b,
                       this->out(kB, this->ny_));
    this->store(kB, y, this->ny_);
  }
  void backward(const void* x, const float* w, const void* dy, void* dx, float* dw,
                float* db) override {
    this->op_->backward(this->in(kA, x, this->nx_), this->weights(w, this->nw_),
                        this->in(kB, dy, this->ny_), this->out(kC, this->nx_, dx != nullptr), dw,
                        db);
    this->store(kC, dx, this->nx_);
  }
};

class EmulatedPool final : public EmulatedOp<PoolOp> {
 public:
  using EmulatedOp::EmulatedOp;
  void forward(const void* x, void* y, bool training) override {
    op_->forward(in(kA, x, nx_), out(kB, ny_), training);
    store(kB, y, ny_);
  }
  void backward(const void* x, const void* y, const void* dy, void* dx) override {
    op_->backward(in(kA, x, nx_), in(kB, y, ny_), in(kC, dy, ny_), out(kD, nx_));
    store(kD, dx, nx_);
  }
};

class EmulatedActivation final : public EmulatedOp<ActivationOp> {
 public:
  using EmulatedOp::EmulatedOp;
  void forward(const void* x, void* y) override {
    op_->forward(in(kA, x, nx_), out(kB, nx_));
    store(kB, y, nx_);
  }
  void backward(const void* /*x*/, const void* y, const void* dy, void* dx) override {
    const float* yf = in(kB, y, nx_);  // backward reads y only (x may have been overwritten)
    op_->backward(yf, yf, in(kC, dy, nx_), out(kD, nx_));
    store(kD, dx, nx_);
  }
};

class EmulatedBatchNorm final : public EmulatedOp<BatchNormOp> {
 public:
  using EmulatedOp::EmulatedOp;
  void forward(const void* x, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* y, bool training) override {
    op_->forward(in(kA, x, nx_), gamma, beta, running_mean, running_var, out(kB, nx_), training);
    store(kB, y, nx_);
  }
  void backward(const void* x, const float* gamma, const void* dy, void* dx, float* dgamma,
                float* dbeta) override {
    op_->backward(in(kA, x, nx_), gamma, in(kB, dy, nx_), out(kC, nx_, dx != nullptr), dgamma,
                  dbeta);
    store(kC, dx, nx_);
  }
};

class EmulatedDropout final : public EmulatedOp<DropoutOp> {
 public:
  using EmulatedOp::EmulatedOp;
  void forward(const void* x, void* y, bool training, std::uint64_t seed) override {
    op_->forward(in(kA, x, nx_), out(kB, nx_), training, seed);
    store(kB, y, nx_);
  }
  void backward(const void* dy, void* dx) override {
    op_->backward(in(kA, dy, nx_), out(kB, nx_));
    store(kB, dx, nx_);
  }
};

/// The loss; nx_ is the number of classes (its rows are n × classes for n samples).
class EmulatedLoss final : public EmulatedOp<SoftmaxXentOp> {
 public:
  using EmulatedOp::EmulatedOp;
  void forward_backward(const void* logits, const std::int32_t* labels, int n, float grad_scale,
                        void* dlogits, float* stats) override {
    const std::size_t count = static_cast<std::size_t>(n) * nx_;
    op_->forward_backward(in(kA, logits, count), labels, n, grad_scale,
                          out(kB, count, dlogits != nullptr), stats);
    store(kB, dlogits, count);
  }
};

}  // namespace

Bf16Emulation::Bf16Emulation(Backend& be) : be_(be), scratch_(std::make_shared<Scratch>(be)) {}
Bf16Emulation::~Bf16Emulation() = default;

std::unique_ptr<ConvOp> Bf16Emulation::wrap(const ConvDesc& d, std::unique_ptr<ConvOp> op) {
  const Shape w{d.out_channels, d.input.c, d.kernel.h, d.kernel.w};
  return std::make_unique<EmulatedWeighted<ConvOp>>(be_, scratch_, std::move(op), d.input.count(),
                                                    d.output().count(), w.count());
}
std::unique_ptr<DenseOp> Bf16Emulation::wrap(const DenseDesc& d, std::unique_ptr<DenseOp> op) {
  const auto z = [](int v) { return static_cast<std::size_t>(v); };
  return std::make_unique<EmulatedWeighted<DenseOp>>(
      be_, scratch_, std::move(op), z(d.batch) * z(d.inputs), z(d.batch) * z(d.outputs),
      z(d.outputs) * z(d.inputs));
}
std::unique_ptr<PoolOp> Bf16Emulation::wrap(const PoolDesc& d, std::unique_ptr<PoolOp> op) {
  return std::make_unique<EmulatedPool>(be_, scratch_, std::move(op), d.input.count(),
                                        d.output().count());
}
std::unique_ptr<BatchNormOp> Bf16Emulation::wrap(const BatchNormDesc& d,
                                                 std::unique_ptr<BatchNormOp> op) {
  return std::make_unique<EmulatedBatchNorm>(be_, scratch_, std::move(op), d.input.count(),
                                             d.input.count());
}
std::unique_ptr<ActivationOp> Bf16Emulation::wrap_activation(const Shape& s,
                                                             std::unique_ptr<ActivationOp> op) {
  return std::make_unique<EmulatedActivation>(be_, scratch_, std::move(op), s.count(), s.count());
}
std::unique_ptr<DropoutOp> Bf16Emulation::wrap_dropout(const Shape& s,
                                                       std::unique_ptr<DropoutOp> op) {
  return std::make_unique<EmulatedDropout>(be_, scratch_, std::move(op), s.count(), s.count());
}
std::unique_ptr<SoftmaxXentOp> Bf16Emulation::wrap_loss(int /*batch*/, int classes,
                                                        std::unique_ptr<SoftmaxXentOp> op) {
  const auto k = static_cast<std::size_t>(classes);
  return std::make_unique<EmulatedLoss>(be_, scratch_, std::move(op), k, k);
}

}  // namespace dtrain
