// src/dnn/cuda/conv_op.cpp — 2-D convolution on cuDNN (legacy API of cudnn_cnn.h, cuDNN 9):
// cudnnConvolutionForward + cudnnAddTensor (bias, unless bias=false), cudnnConvolutionBackwardData /
// BackwardFilter / BackwardBias; kernel, stride and padding per axis (1×7, 7×1 for Inception). Algorithms are chosen once per shape in the constructor with the
// cudnnGet*Algorithm_v7 heuristics (no benchmarking cost): the first ranked algorithm that is
// deterministic (bit-reproducible runs), uses no tensor-op (TF32) math (parity with the fp32 CPU
// backend) and fits kConvWorkspaceLimit; failing that, any fitting one. One workspace buffer per
// op, sized to the largest of the three.
#include <algorithm>
#include <string>
#include <vector>

#include "cuda_backend.hpp"

namespace dtrain::cuda {
namespace {

/// Picks from cuDNN's ranked list (Perf: cudnnConvolution*AlgoPerf_t).
template <typename Perf>
decltype(Perf{}.algo) pick_algorithm(const std::vector<Perf>& perfs, int returned, const char* what,
                                     const std::string& shape) {
  for (int strict = 1; strict >= 0; --strict) {
    for (int i = 0; i < returned; ++i) {
      const Perf& p = perfs[static_cast<std::size_t>(i)];
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kConvWorkspaceLimit) continue;
      if (strict && (p.determinism != CUDNN_DETERMINISTIC || p.mathType == CUDNN_TENSOR_OP_MATH ||
                     p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
        continue;
      return p.algo;
    }
  }
  throw LibraryError(format_error(std::string("cuDNN offers no ") + what +
                                      " algorithm within the workspace limit for conv " + shape,
                                  __FILE__, __LINE__));
}

class CudaConvOp final : public ConvOp {
 public:
  CudaConvOp(CudaBackend& be, const ConvDesc& d) : be_(be) {
    const Shape out = d.output();  // InputError for impossible shapes
    const Shape& in = d.input;
    x_desc_ = TensorDesc::nchw(in.n, in.c, in.h, in.w);
    y_desc_ = TensorDesc::nchw(out.n, out.c, out.h, out.w);
    b_desc_ = TensorDesc::nchw(1, d.out_channels, 1, 1);
    w_desc_ = FilterDesc::kcrs(d.out_channels, in.c, d.kernel.h, d.kernel.w);
    conv_desc_ = ConvolutionDesc::create(d.pad.h, d.pad.w, d.stride.h, d.stride.w);
    bias_ = d.bias;

    int n = 0, c = 0, h = 0, w = 0;
    DT_CHECK_CUDNN(
        cudnnGetConvolution2dForwardOutputDim(conv_desc_, x_desc_, w_desc_, &n, &c, &h, &w));
    DT_ASSERT(n == out.n && c == out.c && h == out.h && w == out.w,
              "cuDNN conv output " + (Shape{n, c, h, w}).str() + " differs from " + out.str());

    const std::string shape =
        in.str() + " k=" + d.kernel.str() + " s=" + d.stride.str() + " p=" + d.pad.str() +
        " filters=" + std::to_string(d.out_channels);
    cudnnHandle_t handle = be.cudnn();
    {
      int max = 0, got = 0;
      DT_CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(max));
      DT_CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(handle, x_desc_, w_desc_, conv_desc_,
                                                            y_desc_, max, &got, perf.data()));
      fwd_algo_ = pick_algorithm(perf, got, "forward", shape);
    }
    {
      int max = 0, got = 0;
      DT_CHECK_CUDNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<std::size_t>(max));
      DT_CHECK_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          handle, w_desc_, y_desc_, conv_desc_, x_desc_, max, &got, perf.data()));
      bwd_data_algo_ = pick_algorithm(perf, got, "backward-data", shape);
    }
    {
      int max = 0, got = 0;
      DT_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &max));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<std::size_t>(max));
      DT_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          handle, x_desc_, y_desc_, conv_desc_, w_desc_, max, &got, perf.data()));
      bwd_filter_algo_ = pick_algorithm(perf, got, "backward-filter", shape);
    }
    std::size_t fwd = 0, bd = 0, bf = 0;
    DT_CHECK_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(handle, x_desc_, w_desc_, conv_desc_,
                                                           y_desc_, fwd_algo_, &fwd));
    DT_CHECK_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(
        handle, w_desc_, y_desc_, conv_desc_, x_desc_, bwd_data_algo_, &bd));
    DT_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        handle, x_desc_, y_desc_, conv_desc_, w_desc_, bwd_filter_algo_, &bf));
    workspace_bytes_ = std::max(fwd, std::max(bd, bf));
    workspace_ = DeviceMemory::create(workspace_bytes_);
  }

  void forward(const float* x, const float* w, const float* b, float* y) override {
    const float one = 1.0f, zero = 0.0f;
    DT_CHECK_CUDNN(cudnnConvolutionForward(be_.cudnn(), &one, x_desc_, x, w_desc_, w, conv_desc_,
                                           fwd_algo_, workspace_.get(), workspace_bytes_, &zero,
                                           y_desc_, y));
    if (bias_) DT_CHECK_CUDNN(cudnnAddTensor(be_.cudnn(), &one, b_desc_, b, &one, y_desc_, y));
  }

  void backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                float* db) override {
    const float one = 1.0f, zero = 0.0f;
    if (dx != nullptr)
      DT_CHECK_CUDNN(cudnnConvolutionBackwardData(be_.cudnn(), &one, w_desc_, w, y_desc_, dy,
                                                  conv_desc_, bwd_data_algo_, workspace_.get(),
                                                  workspace_bytes_, &zero, x_desc_, dx));
    DT_CHECK_CUDNN(cudnnConvolutionBackwardFilter(be_.cudnn(), &one, x_desc_, x, y_desc_, dy,
                                                  conv_desc_, bwd_filter_algo_, workspace_.get(),
                                                  workspace_bytes_, &zero, w_desc_, dw));
    if (bias_)
      DT_CHECK_CUDNN(
          cudnnConvolutionBackwardBias(be_.cudnn(), &one, y_desc_, dy, &zero, b_desc_, db));
  }

 private:
  CudaBackend& be_;
  TensorDesc x_desc_, y_desc_, b_desc_;
  FilterDesc w_desc_;
  ConvolutionDesc conv_desc_;
  cudnnConvolutionFwdAlgo_t fwd_algo_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_{};
  std::size_t workspace_bytes_ = 0;
  DeviceMemory workspace_;
  bool bias_ = true;
};

}  // namespace

std::unique_ptr<ConvOp> make_cuda_conv(CudaBackend& be, const ConvDesc& d) {
  return std::make_unique<CudaConvOp>(be, d);
}

}  // namespace dtrain::cuda
