// src/dnn/cuda/pool_act_bn_ops.cpp — pooling, activation and batch normalization on cuDNN's legacy
// API (cudnn_ops.h, cuDNN 9): cudnnPoolingForward/Backward (max: CUDNN_POOLING_MAX_DETERMINISTIC;
// avg: CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, PyTorch's count_include_pad=False), except
// the backward of NHWC max pooling whose windows do not overlap (VGG's), on our kernel
// (pool_kernels.cu: cuDNN's took 4× PyTorch's time on an H200),
// relu on our kernels (kernels.cu: one pass each way, where cuDNN's generic tensor kernels took
// 2-3× as long on an H100), sigmoid on cudnnActivationForward/Backward, and spatial batch
// normalization (Ioffe & Szegedy 2015): training on our per-channel kernels (channel_kernels.cu)
// when there are few channels (see CudaBatchNormOp), else on cudnnBatchNormalizationForwardTraining
// / Backward; inference on cudnnBatchNormalizationForwardInference (cuDNN calls
// CUDNN_BATCHNORM_SPATIAL; in the NHWC layout training on CUDNN_BATCHNORM_SPATIAL_PERSISTENT
// through cudnnBatchNormalizationForward- TrainingEx / BackwardEx, with the backend's workspace and
// a reserve space per op, as PyTorch for channels_last). Descriptors in the backend's layout.
// Epilogues (BatchNormOp::enable_relu / enable_add_relu, for layer fusion): in NHWC training
// cuDNN's fused CUDNN_BATCHNORM_OPS_BN_ACTIVATION / _BN_ADD_ACTIVATION calls (as MXNet and
// NVIDIA's MLPerf ResNet-50 use them), probed once per op; inference, and any call cuDNN refuses
// at run time, runs the plain batchnorm and our relu / add + relu kernels.
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
    const Shape& in = d.input;
    geometry_ = MaxPoolGeometry{in.n,       in.c,       in.h,       in.w,       out.h,   out.w,
                                d.kernel.h, d.kernel.w, d.stride.h, d.stride.w, d.pad.h, d.pad.w};
    own_backward_ = d.kind == PoolKind::max && be.layout() == Layout::nhwc &&
                    max_pool_backward_supported(geometry_);
  }

  void forward(const void* x, void* y, bool /*training: cuDNN recomputes from x and y*/) override {
    const float one = 1.0f, zero = 0.0f;
    DT_CHECK_CUDNN(
        cudnnPoolingForward(be_.cudnn(), pool_desc_, &one, x_desc_, x, &zero, y_desc_, y));
  }

  void backward(const void* x, const void* y, const void* dy, void* dx) override {
    if (own_backward_)
      return launch_max_pool_backward_nhwc(be_.stream(), geometry_, x, y, dy, dx,
                                           elem(be_.act_dtype()));
    const float one = 1.0f, zero = 0.0f;
    DT_CHECK_CUDNN(cudnnPoolingBackward(be_.cudnn(), pool_desc_, &one, y_desc_, y, y_desc_, dy,
                                        x_desc_, x, &zero, x_desc_, dx));
  }

 private:
  CudaBackend& be_;
  TensorDesc x_desc_, y_desc_;
  PoolingDesc pool_desc_;
  MaxPoolGeometry geometry_{};
  bool own_backward_ = false;  ///< max pooling in NHWC, windows not overlapping: ours
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
    run_forward(x, nullptr, gamma, beta, running_mean, running_var, y, training);
  }
  void forward_add_relu(const void* x, const void* z, const float* gamma, const float* beta,
                        float* running_mean, float* running_var, void* y, bool training) override {
    DT_REQUIRE(epilogue_ == Epilogue::add_relu, "batchnorm: forward_add_relu without the fusion");
    run_forward(x, z, gamma, beta, running_mean, running_var, y, training);
  }

  /// The epilogues fuse where cuDNN's NHWC *Ex kernels accept CUDNN_BATCHNORM_OPS_BN_ACTIVATION
  /// (relu) or _BN_ADD_ACTIVATION (add + relu) for this shape and type (asked once: workspace and
  /// reserve sizes of the fused forward and backward); elsewhere false, and the model keeps the
  /// layers apart.
  bool enable_relu() override { return enable(Epilogue::relu); }
  bool enable_add_relu() override { return enable(Epilogue::add_relu); }

  void backward_relu(const void* x, const void* y, const float* gamma, const float* beta,
                     const void* dy, void* dx, float* dgamma, float* dbeta) override {
    DT_REQUIRE(epilogue_ == Epilogue::relu, "batchnorm: backward_relu without the fusion");
    run_backward(x, y, gamma, beta, dy, dx, nullptr, dgamma, dbeta);
  }
  void backward_add_relu(const void* x, const void* y, const float* gamma, const float* beta,
                         const void* dy, void* dx, void* dz, float* dgamma, float* dbeta) override {
    DT_REQUIRE(epilogue_ == Epilogue::add_relu, "batchnorm: backward_add_relu without the fusion");
    run_backward(x, y, gamma, beta, dy, dx, dz, dgamma, dbeta);
  }

  void backward(const void* x, const float* gamma, const void* dy, void* dx, float* dgamma,
                float* dbeta) override {
    if (own_) {
      launch_bn_backward(be_.stream(), shape_, x, dy, elem(t_), gamma, saved_mean_.as<float>(),
                         saved_inv_var_.as<float>(), dx, dgamma, dbeta, scratch_.as<float>());
      return;
    }
    dx = or_scratch(dx, scratch_dx_);
    const float one = 1.0f, zero = 0.0f;
    if (ex_) {
      DT_CHECK_CUDNN(cudnnBatchNormalizationBackwardEx(
          be_.cudnn(), train_mode_, CUDNN_BATCHNORM_OPS_BN, &one, &zero, &one, &zero, x_desc_, x,
          nullptr, nullptr, x_desc_, dy, nullptr, nullptr, x_desc_, dx, param_desc_, gamma, nullptr,
          dgamma, dbeta, static_cast<double>(d_.epsilon), saved_mean_.get(), saved_inv_var_.get(),
          nullptr, be_.workspace(), be_.workspace_bytes(), reserve_.get(), reserve_bytes_));
      return;
    }
    legacy_backward(x, gamma, dy, dx, dgamma, dbeta);
  }

 private:
  /// What runs after the normalization (enable_relu / enable_add_relu).
  enum class Epilogue { none, relu, add_relu };

  bool enable(Epilogue e) {
    if (epilogue_ != Epilogue::none) return epilogue_ == e;
    if (!ex_) return false;
    if (!act_) act_ = ActivationDesc::create(CUDNN_ACTIVATION_RELU);
    const cudnnBatchNormOps_t ops = e == Epilogue::relu ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION
                                                        : CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    const cudnnTensorDescriptor_t z = e == Epilogue::add_relu ? x_desc_.get() : nullptr;
    std::size_t fwd = 0, bwd = 0, reserve = 0;
    const bool ok =
        cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
            be_.cudnn(), train_mode_, ops, x_desc_, z, x_desc_, param_desc_, act_, &fwd) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnGetBatchNormalizationBackwardExWorkspaceSize(be_.cudnn(), train_mode_, ops, x_desc_,
                                                          x_desc_, x_desc_, z, x_desc_, param_desc_,
                                                          act_, &bwd) == CUDNN_STATUS_SUCCESS &&
        cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
            be_.cudnn(), train_mode_, ops, act_, x_desc_, &reserve) == CUDNN_STATUS_SUCCESS;
    if (!ok) return false;
    be_.reserve_workspace(std::max(fwd, bwd));
    if (reserve > reserve_bytes_) {
      reserve_ = DeviceMemory::create(reserve);
      reserve_bytes_ = reserve;
    }
    epilogue_ = e;
    fused_ops_ = ops;
    return true;
  }

  /// Batch normalization of x, then the epilogue (z: the add's other input, add_relu only): in
  /// cuDNN's fused training call where it runs, else by our kernels after the plain call.
  void run_forward(const void* x, const void* z, const float* gamma, const float* beta,
                   float* running_mean, float* running_var, void* y, bool training) {
    const float one = 1.0f, zero = 0.0f;
    const auto momentum = static_cast<double>(d_.momentum);
    const auto eps = static_cast<double>(d_.epsilon);
    if (training && ex_) {
      if (epilogue_ != Epilogue::none && fused_) {
        const cudnnStatus_t st = cudnnBatchNormalizationForwardTrainingEx(
            be_.cudnn(), train_mode_, fused_ops_, &one, &zero, x_desc_, x,
            z != nullptr ? x_desc_.get() : nullptr, z, x_desc_, y, param_desc_, gamma, beta,
            momentum, running_mean, running_var, eps, saved_mean_.get(), saved_inv_var_.get(), act_,
            be_.workspace(), be_.workspace_bytes(), reserve_.get(), reserve_bytes_);
        if (st == CUDNN_STATUS_SUCCESS) return;
        // cuDNN sized the fused call but refuses to run it: the plain call and our kernels.
        fused_ = false;
        log_info(std::string("cuDNN refused its fused batchnorm epilogue (") +
                 cudnnGetErrorString(st) + ") for " + d_.input.str() + "; running it apart");
      }
      DT_CHECK_CUDNN(cudnnBatchNormalizationForwardTrainingEx(
          be_.cudnn(), train_mode_, CUDNN_BATCHNORM_OPS_BN, &one, &zero, x_desc_, x, nullptr,
          nullptr, x_desc_, y, param_desc_, gamma, beta, momentum, running_mean, running_var, eps,
          saved_mean_.get(), saved_inv_var_.get(), nullptr, be_.workspace(), be_.workspace_bytes(),
          reserve_.get(), reserve_bytes_));
    } else if (training && own_) {
      launch_bn_forward_training(be_.stream(), shape_, x, y, elem(t_), gamma, beta, running_mean,
                                 running_var, d_.epsilon, d_.momentum, saved_mean_.as<float>(),
                                 saved_inv_var_.as<float>(), scratch_.as<float>());
    } else if (training) {
      // saved_inv_var_ is 1/sqrt(var + ε) in every path (cuDNN's resultSaveInvVariance).
      DT_CHECK_CUDNN(cudnnBatchNormalizationForwardTraining(
          be_.cudnn(), train_mode_, &one, &zero, x_desc_, x, x_desc_, y, param_desc_, gamma, beta,
          momentum, running_mean, running_var, eps, saved_mean_.get(), saved_inv_var_.get()));
    } else {
      DT_CHECK_CUDNN(cudnnBatchNormalizationForwardInference(
          be_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_desc_, x, x_desc_, y, param_desc_,
          gamma, beta, running_mean, running_var, eps));
    }
    const std::size_t n = d_.input.count();
    if (epilogue_ == Epilogue::relu) launch_relu_forward(be_.stream(), y, y, n, elem(t_));
    if (epilogue_ == Epilogue::add_relu) launch_add_relu(be_.stream(), y, y, z, n, elem(t_));
  }

  /// The epilogue's backward, then batch normalization's: one fused cuDNN call where the forward
  /// ran fused, else the relu's mask (and dz) by our kernel and cuDNN's plain backward (the
  /// non-Ex call, which reads only the saved statistics).
  void run_backward(const void* x, const void* y, const float* gamma, const float* beta,
                    const void* dy, void* dx, void* dz, float* dgamma, float* dbeta) {
    const bool add = epilogue_ == Epilogue::add_relu;
    if (add) dz = or_scratch(dz, scratch_dz_);
    if (fused_) {
      const float one = 1.0f, zero = 0.0f;
      const cudnnStatus_t st = cudnnBatchNormalizationBackwardEx(
          be_.cudnn(), train_mode_, fused_ops_, &one, &zero, &one, &zero, x_desc_, x, x_desc_, y,
          x_desc_, dy, add ? x_desc_.get() : nullptr, dz, x_desc_, or_scratch(dx, scratch_dx_),
          param_desc_, gamma, beta, dgamma, dbeta, static_cast<double>(d_.epsilon),
          saved_mean_.get(), saved_inv_var_.get(), act_, be_.workspace(), be_.workspace_bytes(),
          reserve_.get(), reserve_bytes_);
      if (st == CUDNN_STATUS_SUCCESS) return;
      fused_ = false;
      log_info(std::string("cuDNN refused its fused batchnorm epilogue's backward (") +
               cudnnGetErrorString(st) + ") for " + d_.input.str() + "; running it apart");
    }
    void* masked = or_scratch(nullptr, masked_dy_);
    launch_relu_backward_fanout(be_.stream(), y, dy, masked, add ? dz : nullptr, d_.input.count(),
                                elem(t_));
    legacy_backward(x, gamma, masked, or_scratch(dx, scratch_dx_), dgamma, dbeta);
  }

  void legacy_backward(const void* x, const float* gamma, const void* dy, void* dx, float* dgamma,
                       float* dbeta) {
    const float one = 1.0f, zero = 0.0f;
    DT_CHECK_CUDNN(cudnnBatchNormalizationBackward(
        be_.cudnn(), train_mode_, &one, &zero, &one, &zero, x_desc_, x, x_desc_, dy, x_desc_, dx,
        param_desc_, gamma, dgamma, dbeta, static_cast<double>(d_.epsilon), saved_mean_.get(),
        saved_inv_var_.get()));
  }

  /// p, or (p == nullptr) an activation-sized scratch buffer `mem`, made once: cuDNN always
  /// writes dx and dz, and a first-layer batchnorm gets no dx.
  void* or_scratch(void* p, DeviceMemory& mem) {
    if (p != nullptr) return p;
    if (!mem) mem = DeviceMemory::create(d_.input.count() * dtype_size(t_));
    return mem.get();
  }

  CudaBackend& be_;
  BatchNormDesc d_;
  DType t_ = DType::f32;  ///< of x, y, dx, dy
  Epilogue epilogue_ = Epilogue::none;
  cudnnBatchNormOps_t fused_ops_ = CUDNN_BATCHNORM_OPS_BN;  ///< of the epilogue (ex_ only)
  bool fused_ = true;   ///< false once cuDNN refused the fused call: our kernels run the epilogue
  ActivationDesc act_;  ///< the epilogue's relu
  DeviceMemory masked_dy_, scratch_dz_;  ///< the unfused epilogue's relu'(y)·dy; an unwanted dz
  TensorDesc x_desc_, param_desc_;
  cudnnBatchNormMode_t train_mode_ = CUDNN_BATCHNORM_SPATIAL;  ///< of training forward and backward
  DeviceMemory saved_mean_,
      saved_inv_var_;  ///< mean and 1/sqrt(var + ε) of the last training forward
  ChannelShape shape_;
  bool own_ = false;  ///< train on channel_kernels.cu (else cuDNN)
  bool ex_ = false;   ///< cuDNN's *Ex training calls (NHWC)
  DeviceMemory
      reserve_;  ///< their reserve space: written by the training forward, read by backward
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
