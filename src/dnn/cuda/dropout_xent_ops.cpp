// src/dnn/cuda/dropout_xent_ops.cpp — inverted dropout (Srivastava et al. 2014) with the stateless
// counter-based generator of dtrain/dnn/counter_rng.hpp (so GPU masks equal the CPU backend's and a
// resumed run draws the same masks), and softmax cross-entropy with a warp-per-sample kernel.
// Both ops wrap kernels.cu; the dropout mask lives on the device inside the op.
#include <string>

#include "cuda_backend.hpp"
#include "kernels.hpp"

namespace dtrain::cuda {
namespace {

class CudaDropoutOp final : public DropoutOp {
 public:
  CudaDropoutOp(CudaBackend& be, const Shape& shape, float p)
      : be_(be), n_(shape.count()), p_(p), t_(be.act_dtype()) {
    DT_REQUIRE(p >= 0.0f && p < 1.0f, "dropout: rate must be in [0, 1), got " + std::to_string(p));
    DT_REQUIRE(n_ > 0, "dropout: empty shape " + shape.str());
    mask_ = DeviceMemory::create(n_ * sizeof(float));
  }

  void forward(const void* x, void* y, bool training, std::uint64_t seed) override {
    forward_keyed(x, y, training, DropoutKey{seed});
  }

  void forward_keyed(const void* x, void* y, bool training, const DropoutKey& key) override {
    trained_ = training;
    if (training) {
      launch_dropout_forward(be_.stream(), x, y, mask_.as<float>(), p_, key.value, key.device,
                             key.salt, n_, elem(t_));
    } else {
      be_.copy_device(y, x, n_ * dtype_size(t_));
    }
  }

  void backward(const void* dy, void* dx) override {
    if (trained_) {
      launch_dropout_backward(be_.stream(), dy, mask_.as<float>(), dx, n_, elem(t_));
    } else {  // after an inference forward dropout is the identity
      be_.copy_device(dx, dy, n_ * dtype_size(t_));
    }
  }

 private:
  CudaBackend& be_;
  std::size_t n_;
  float p_;
  DType t_;  ///< of x, y, dx, dy
  bool trained_ = false;
  DeviceMemory mask_;  ///< 0 or 1/(1−p) per element, from the last training forward
};

class CudaSoftmaxXentOp final : public SoftmaxXentOp {
 public:
  CudaSoftmaxXentOp(CudaBackend& be, int batch, int classes, float smoothing)
      : be_(be), batch_(batch), classes_(classes), smoothing_(smoothing), t_(be.act_dtype()) {
    check_softmax_xent(batch, classes, smoothing);
  }

  void forward_backward(const void* logits, const std::int32_t* labels, int n, float grad_scale,
                        void* dlogits, float* stats) override {
    DT_ASSERT(n >= 0 && n <= batch_, "softmax cross-entropy: n = " + std::to_string(n) +
                                         " exceeds the batch " + std::to_string(batch_));
    launch_softmax_xent(be_.stream(), logits, labels, n, classes_, grad_scale, smoothing_, dlogits,
                        stats, elem(t_));
  }

 private:
  CudaBackend& be_;
  int batch_;
  int classes_;
  float smoothing_;  ///< label smoothing ε
  DType t_;          ///< of logits and dlogits
};

}  // namespace

std::unique_ptr<DropoutOp> make_cuda_dropout(CudaBackend& be, const Shape& shape, float p) {
  return std::make_unique<CudaDropoutOp>(be, shape, p);
}

std::unique_ptr<SoftmaxXentOp> make_cuda_softmax_xent(CudaBackend& be, int batch, int classes,
                                                      float label_smoothing) {
  return std::make_unique<CudaSoftmaxXentOp>(be, batch, classes, label_smoothing);
}

}  // namespace dtrain::cuda
