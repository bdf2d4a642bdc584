// src/dnn/cuda/pool_act_bn_ops.cpp — pooling, activation and batch normalization on cuDNN's legacy
// API (cudnn_ops.h, cuDNN 9): cudnnPoolingForward/Backward (max: CUDNN_POOLING_MAX_DETERMINISTIC;
// avg: CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, PyTorch's count_include_pad=False),
// relu on our kernels (kernels.cu: one pass each way, where cuDNN's generic tensor kernels took 2-3×
// as long on an H100), sigmoid on cudnnActivationForward/Backward, and spatial batch normalization
// (Ioffe & Szegedy 2015): training on our per-channel kernels (channel_kernels.cu) when there are few
// channels (see CudaBatchNormOp), else on cudnnBatchNormalizationForwardTraining / Backward;
// inference on cudnnBatchNormalizationForwardInference (cuDNN calls CUDNN_BATCHNORM_SPATIAL; in the
// NHWC layout training on CUDNN_BATCHNORM_SPATIAL_PERSISTENT through cudnnBatchNormalizationForward-
// TrainingEx / BackwardEx, with the backend's workspace and a reserve space per op, as PyTorch for
// channels_last). Descriptors in the backend's layout.
// Momentum is PyTorch's; running_var holds the unbiased batch variance, as BatchNormDesc documents.
// Activations are of the backend's act_dtype() (bf16: CUDNN_DATA_BFLOAT16 descriptors, fp32
// scale, bias and statistics — the derived batchnorm parameter descriptor is fp32 for bf16 data).
#include <algorithm>
#include <string>

#include "channel_kernels.hpp"
#include "dtrain/core/log.hpp"
#include "cuda_backend.hpp"
#include "kernels.hpp"

namespace dtrain::cuda {
namespace {


class CudaPoolOp final : public PoolOp {
 public:
  CudaPoolOp(CudaBackend& be, const PoolDesc& d) : be_(be) {
    const Shape out = d.output();  // InputError for impossible windows
    x_desc_ = TensorDesc::of(d.input, be.layout(), be.act_dtype());
    y_desc_ = TensorDesc::of(out, be.layout(), be.act_dtype());
    pool_desc_ =
        PoolingDesc::create(d.kind == PoolKind::max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                                    : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
                            d.kernel.h, d.kernel.w, d.pad.h, d.pad.w, d.stride.h, d.stride.w);
    int n = 0, c = 0, h = 0, w = 0;
    DT_CHECK_CUDNN(cudnnGetPooling2dForwardOutputDim(pool_desc_, x_desc_, &n, &c, &h, &w));
    DT_ASSERT(n == out.n && c == out.c && h == out.h && w == out.w,
              "cuDNN pooling output " + (Shape{n, c, h, w}).str() + " differs from " + out.str());
  }

  void forward(const void* x, void* y,
               bool /*training: cuDNN recomputes from x and y*/) override {
    const float one = 1.0f, zero = 0.0f;
    DT_CHECK_CUDNN(
        cudnnPoolingForward(be_.cudnn(), pool_desc_, &one, x_desc_, x, &zero, y_desc_, y));
  }

  void backward(const void* x, const void* y, const void* dy, void* dx) override {
    const float one = 1.0f, zero = 0.0f;
    DT_CHECK_CUDNN(cudnnPoolingBackward(be_.cudnn(), pool_desc_, &one, y_desc_, y, y_desc_, dy,
                                        x_desc_, x, &zero, x_desc_, dx));
  }

 private:
  CudaBackend& be_;
  TensorDesc x_desc_, y_desc_;
  PoolingDesc pool_desc_;
};

class CudaActivationOp final : public ActivationOp {
 public:
  CudaActivationOp(CudaBackend& be, ActKind kind, const Shape& shape)
      : be_(be), relu_(kind == ActKind::relu), count_(shape.count()), t_(elem(be.act_dtype())) {
    DT_REQUIRE(shape.count() > 0, "activation: empty shape " + shape.str());
    desc_ = TensorDesc::of(shape, be.layout(), be.act_dtype());
    act_ = ActivationDesc::create(kind == ActKind::relu ? CUDNN_ACTIVATION_RELU
                                                        : CUDNN_ACTIVATION_SIGMOID);
  }

  void forward(const void* x, void* y) override {
    if (relu_) return launch_relu_forward(be_.stream(), x, y, count_, t_);
    const float one = 1.0f, zero = 0.0f;
    DT_CHECK_CUDNN(cudnnActivationForward(be_.cudnn(), act_, &one, desc_, x, &zero, desc_, y));
  }

  void backward(const void* /*x*/, const void* y, const void* dy, void* dx) override {
    // y stands in for x: the forward may have run in place, and relu'(x) = [y > 0],
    // sigmoid'(x) = y·(1 − y) are functions of y alone.
    if (relu_) return launch_relu_backward(be_.stream(), y, dy, dx, count_, t_);
    const float one = 1.0f, zero = 0.0f;
    DT_CHECK_CUDNN(cudnnActivationBackward(be_.cudnn(), act_, &one, desc_, y, desc_, dy, desc_, y,
                                           &zero, desc_, dx));
  }

 private:
  CudaBackend& be_;
  bool relu_;
  std::size_t count_;
  Elem t_;
  TensorDesc desc_;
  ActivationDesc act_;
};

class CudaBatchNormOp final : public BatchNormOp {
 public:
  CudaBatchNormOp(CudaBackend& be, const BatchNormDesc& d) : be_(be), d_(d) {
    const Shape& s = d.input;
    DT_REQUIRE(s.n >= 1 && s.c >= 1 && s.h >= 1 && s.w >= 1,
               "batchnorm: input shape must be positive, got " + s.str());
    DT_REQUIRE(d.epsilon >= CUDNN_BN_MIN_EPSILON && d.epsilon > 0.0f,
               "batchnorm: epsilon must be > 0, got " + std::to_string(d.epsilon));
    DT_REQUIRE(d.momentum >= 0.0f && d.momentum <= 1.0f,
               "batchnorm: momentum must be in [0, 1], got " + std::to_string(d.momentum));
    const bool nhwc = be.layout() == Layout::nhwc;
    t_ = be.act_dtype();
    x_desc_ = TensorDesc::of(s, be.layout(), t_);
    // NHWC trains on cuDNN's persistent kernels (as PyTorch does for channels_last).
    train_mode_ = nhwc ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
    cudnnTensorDescriptor_t raw = nullptr;
    DT_CHECK_CUDNN(cudnnCreateTensorDescriptor(&raw));
    param_desc_ = TensorDesc(raw);
    DT_CHECK_CUDNN(cudnnDeriveBNTensorDescriptor(param_desc_, x_desc_, CUDNN_BATCHNORM_SPATIAL));
    const auto c = static_cast<std::size_t>(s.c);
    saved_mean_ = DeviceMemory::create(c * sizeof(float));
    saved_inv_var_ = DeviceMemory::create(c * sizeof(float));
    // Zero so that a backward without a training forward reads defined (if meaningless) values.
    DT_CHECK_CUDA(cudaMemsetAsync(saved_mean_.get(), 0, c * sizeof(float), be.stream()));
    DT_CHECK_CUDA(cudaMemsetAsync(saved_inv_var_.get(), 0, c * sizeof(float), be.stream()));
    shape_ = ChannelShape{s.n, s.c, s.h, s.w};
    // Which kernels train (measured on an H100, tests/benchmarks/gpu_bench.sh): cuDNN's legacy
    // NCHW batchnorm spreads its work over channels, so with few channels most SMs idle — on the
    // Fashion-MNIST CNN (C = 32, 64) it took 911 of 2412 µs of kernel time per step, ours split
    // each channel over several blocks and the step went from 138k to 197k samples/s. With many
    // channels cuDNN's one-pass kernels won: ResNet-50 ran at 1600 samples/s on cuDNN's batchnorm
    // in every layer, 1443 on ours in every layer. So ours below two channels per SM, and always
    // for one value per channel (N·H·W = 1), where cuDNN's unbiased variance divides by zero.
    // NHWC: cuDNN's NHWC kernels read whole rows of channels, so few channels do not idle them;
    // ours only for N·H·W = 1 (where both layouts are the same memory).
    own_ = (!nhwc && 2 * s.c <= be.multiprocessors()) || s.n * s.h * s.w == 1;
    if (own_) scratch_ = DeviceMemory::create(channel_scratch_floats(shape_) * sizeof(float));
    // NHWC trains through the *Ex entry points, with a workspace and a reserve space, as PyTorch
    // does for channels_last: cuDNN's fast NHWC kernels are reached only there.
    ex_ = nhwc && !own_;
    if (ex_) {
      std::size_t fwd = 0, bwd = 0;
      DT_CHECK_CUDNN(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
          be.cudnn(), train_mode_, CUDNN_BATCHNORM_OPS_BN, x_desc_, x_desc_, x_desc_, param_desc_,
          nullptr, &fwd));
      DT_CHECK_CUDNN(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
          be.cudnn(), train_mode_, CUDNN_BATCHNORM_OPS_BN, x_desc_, x_desc_, x_desc_, nullptr,
          x_desc_, param_desc_, nullptr, &bwd));
      DT_CHECK_CUDNN(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
          be.cudnn(), train_mode_, CUDNN_BATCHNORM_OPS_BN, nullptr, x_desc_, &reserve_bytes_));
      be.reserve_workspace(std::max(fwd, bwd));
      if (reserve_bytes_ > 0) reserve_ = DeviceMemory::create(reserve_bytes_);
    }
  }

  void forward(const void* x, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* y, bool training) override {
    const float one = 1.0f, zero = 0.0f;
    if (training && own_) {
      launch_bn_forward_training(be_.stream(), shape_, x, y, elem(t_), gamma, beta, running_mean,
                                 running_var, d_.epsilon, d_.momentum, saved_mean_.as<float>(),
                                 saved_inv_var_.as<float>(), scratch_.as<float>());
    } else if (training && ex_) {
      auto run = [&] {
        return cudnnBatchNormalizationForwardTrainingEx(
            be_.cudnn(), train_mode_, ops(), &one, &zero, x_desc_, x, nullptr, nullptr, x_desc_, y,
            param_desc_, gamma, beta, static_cast<double>(d_.momentum), running_mean, running_var,
            static_cast<double>(d_.epsilon), saved_mean_.get(), saved_inv_var_.get(), relu_desc(),
            be_.workspace(), be_.workspace_bytes(), reserve_.get(), reserve_bytes_);
      };
      if (relu_ && !unfused_relu_ && run() != CUDNN_STATUS_SUCCESS) {
        // cuDNN sized the fused call but refuses to run it: batchnorm, then our relu, from now on
        // (backward_relu masks dy first).
        unfused_relu_ = true;
        log_info("cuDNN refused its fused batchnorm + relu for " + d_.input.str() +
                 "; running the two apart");
      } else if (relu_ && !unfused_relu_) {
        return;
      }
      DT_CHECK_CUDNN(run());
      if (unfused_relu_) launch_relu_forward(be_.stream(), y, y, d_.input.count(), elem(t_));
    } else if (training) {
      // saved_inv_var_ is 1/sqrt(var + ε) in every path (cuDNN's resultSaveInvVariance).
      DT_CHECK_CUDNN(cudnnBatchNormalizationForwardTraining(
          be_.cudnn(), train_mode_, &one, &zero, x_desc_, x, x_desc_, y, param_desc_,
          gamma, beta, static_cast<double>(d_.momentum), running_mean, running_var,
          static_cast<double>(d_.epsilon), saved_mean_.get(), saved_inv_var_.get()));
    } else {
      DT_CHECK_CUDNN(cudnnBatchNormalizationForwardInference(
          be_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_desc_, x, x_desc_, y, param_desc_,
          gamma, beta, running_mean, running_var, static_cast<double>(d_.epsilon)));
      if (relu_) launch_relu_forward(be_.stream(), y, y, d_.input.count(), elem(t_));
    }
  }

  /// The relu fuses where cuDNN's NHWC *Ex kernels accept CUDNN_BATCHNORM_OPS_BN_ACTIVATION for
  /// this shape and type (asked once: workspace and reserve sizes of the fused forward and
  /// backward); elsewhere false, and the relu stays a layer of its own.
  bool enable_relu() override {
    if (!ex_) return relu_;
    if (relu_) return true;
    act_ = ActivationDesc::create(CUDNN_ACTIVATION_RELU);
    const auto fused = CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
    std::size_t fwd = 0, bwd = 0, reserve = 0;
    const bool ok =
        cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
            be_.cudnn(), train_mode_, fused, x_desc_, nullptr, x_desc_, param_desc_, act_,
            &fwd) == CUDNN_STATUS_SUCCESS &&
        cudnnGetBatchNormalizationBackwardExWorkspaceSize(
            be_.cudnn(), train_mode_, fused, x_desc_, x_desc_, x_desc_, nullptr, x_desc_,
            param_desc_, act_, &bwd) == CUDNN_STATUS_SUCCESS &&
        cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
            be_.cudnn(), train_mode_, fused, act_, x_desc_, &reserve) == CUDNN_STATUS_SUCCESS;
    if (!ok) return false;
    be_.reserve_workspace(std::max(fwd, bwd));
    if (reserve > reserve_bytes_) {
      reserve_ = DeviceMemory::create(reserve);
      reserve_bytes_ = reserve;
    }
    relu_ = true;
    return true;
  }

  void backward_relu(const void* x, const void* y, const float* gamma, const float* beta,
                     const void* dy, void* dx, float* dgamma, float* dbeta) override {
    DT_REQUIRE(relu_, "batchnorm: backward_relu without a fused relu");
    const float one = 1.0f, zero = 0.0f;
    if (unfused_relu_) {  // the forward ran the two apart: the relu's mask, then batchnorm alone
      if (!masked_dy_) masked_dy_ = DeviceMemory::create(d_.input.count() * dtype_size(t_));
      launch_relu_backward(be_.stream(), y, dy, masked_dy_.get(), d_.input.count(), elem(t_));
      return backward(x, gamma, masked_dy_.get(), dx, dgamma, dbeta);
    }
    DT_CHECK_CUDNN(cudnnBatchNormalizationBackwardEx(
        be_.cudnn(), train_mode_, ops(), &one, &zero, &one, &zero, x_desc_, x, x_desc_, y,
        x_desc_, dy, nullptr, nullptr, x_desc_, dx_or_scratch(dx), param_desc_, gamma, beta,
        dgamma, dbeta, static_cast<double>(d_.epsilon), saved_mean_.get(), saved_inv_var_.get(),
        act_, be_.workspace(), be_.workspace_bytes(), reserve_.get(), reserve_bytes_));
  }

  void backward(const void* x, const float* gamma, const void* dy, void* dx, float* dgamma,
                float* dbeta) override {
    if (own_) {
      launch_bn_backward(be_.stream(), shape_, x, dy, elem(t_), gamma, saved_mean_.as<float>(),
                         saved_inv_var_.as<float>(), dx, dgamma, dbeta, scratch_.as<float>());
      return;
    }
    dx = dx_or_scratch(dx);
    const float one = 1.0f, zero = 0.0f;
    if (ex_) {
      DT_CHECK_CUDNN(cudnnBatchNormalizationBackwardEx(
          be_.cudnn(), train_mode_, CUDNN_BATCHNORM_OPS_BN, &one, &zero, &one, &zero, x_desc_, x,
          nullptr, nullptr, x_desc_, dy, nullptr, nullptr, x_desc_, dx, param_desc_, gamma,
          nullptr, dgamma, dbeta, static_cast<double>(d_.epsilon), saved_mean_.get(),
          saved_inv_var_.get(), nullptr, be_.workspace(), be_.workspace_bytes(), reserve_.get(),
          reserve_bytes_));
      return;
    }
    DT_CHECK_CUDNN(cudnnBatchNormalizationBackward(
        be_.cudnn(), train_mode_, &one, &zero, &one, &zero, x_desc_, x, x_desc_, dy,
        x_desc_, dx, param_desc_, gamma, dgamma, dbeta, static_cast<double>(d_.epsilon),
        saved_mean_.get(), saved_inv_var_.get()));
  }

 private:
  /// cuDNN always writes dx; a first-layer batchnorm (dx == nullptr) gets a scratch buffer, made
  /// once.
  void* dx_or_scratch(void* dx) {
    if (dx != nullptr) return dx;
    if (!scratch_dx_) scratch_dx_ = DeviceMemory::create(d_.input.count() * dtype_size(t_));
    return scratch_dx_.get();
  }
  [[nodiscard]] bool fused() const { return relu_ && !unfused_relu_; }
  [[nodiscard]] cudnnBatchNormOps_t ops() const {
    return fused() ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION : CUDNN_BATCHNORM_OPS_BN;
  }
  [[nodiscard]] cudnnActivationDescriptor_t relu_desc() const {
    return fused() ? act_.get() : nullptr;
  }

  CudaBackend& be_;
  BatchNormDesc d_;
  DType t_ = DType::f32;  ///< of x, y, dx, dy
  bool relu_ = false;     ///< enable_relu(): cuDNN's BN_ACTIVATION ops (ex_ only)
  bool unfused_relu_ = false;  ///< cuDNN refused the fused call at run time: relu kernels instead
  ActivationDesc act_;    ///< their relu
  DeviceMemory masked_dy_;  ///< unfused_relu_: relu'(y)·dy for the plain backward
  TensorDesc x_desc_, param_desc_;
  cudnnBatchNormMode_t train_mode_ = CUDNN_BATCHNORM_SPATIAL;  ///< of training forward and backward
  DeviceMemory saved_mean_, saved_inv_var_;  ///< mean and 1/sqrt(var + ε) of the last training forward
  ChannelShape shape_;
  bool own_ = false;      ///< train on channel_kernels.cu (else cuDNN)
  bool ex_ = false;       ///< cuDNN's *Ex training calls (NHWC)
  DeviceMemory reserve_;  ///< their reserve space: written by the training forward, read by backward
  std::size_t reserve_bytes_ = 0;
  DeviceMemory scratch_;  ///< partial sums of the reductions (own_)
  DeviceMemory scratch_dx_;
};

}  // namespace

std::unique_ptr<PoolOp> make_cuda_pool(CudaBackend& be, const PoolDesc& d) {
  return std::make_unique<CudaPoolOp>(be, d);
}

std::unique_ptr<ActivationOp> make_cuda_activation(CudaBackend& be, ActKind kind,
                                                   const Shape& shape) {
  return std::make_unique<CudaActivationOp>(be, kind, shape);
}

std::unique_ptr<BatchNormOp> make_cuda_batchnorm(CudaBackend& be, const BatchNormDesc& d) {
  return std::make_unique<CudaBatchNormOp>(be, d);
}

}  // namespace dtrain::cuda
