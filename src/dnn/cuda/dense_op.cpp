// src/dnn/cuda/dense_op.cpp — fully connected layer y = x·Wᵀ + b on cuBLAS (cublasSgemm/Sgemv;
// cublasGemmEx in bf16).
//
// dtrain's tensors are row-major; cuBLAS is column-major. A row-major R×C matrix is the same memory
// as a column-major C×R matrix (its transpose), so with x: N×I, W: O×I, y: N×O (row-major) we use
//   forward   yᵀ (O×N)  = W·xᵀ             gemm(T, N, m=O, n=N, k=I, A=W lda=I, B=x ldb=I, ldc=O)
//   dx        dxᵀ (I×N) = Wᵀ·dyᵀ           gemm(N, N, m=I, n=N, k=O, A=W lda=I, B=dy ldb=O, ldc=I)
//   dW        dWᵀ (I×O) = xᵀ·dy            gemm(N, T, m=I, n=O, k=N, A=x lda=I, B=dy ldb=O, ldc=I)
//   db        db (O)    = dyᵀ·1            gemv(N, m=O, n=N, A=dy lda=O, x=ones)
// with beta = 0 (gradients are overwritten). The bias add is a small kernel (kernels.cu); the
// ones vector is allocated and filled once in the constructor.
// --precision bf16: x, y, dx, dy are bf16 and the same products run as cublasGemmEx with bf16
// A and B, fp32 accumulation (CUBLAS_COMPUTE_32F, tensor cores) and C in bf16 (y, dx) or fp32 (dW,
// db: the fp32 parameter gradients directly); W is a bf16 copy of the fp32 weights made by
// forward and reused by the backward of the same step.
#include <string>

#include "cuda_backend.hpp"
#include "kernels.hpp"

namespace dtrain::cuda {
namespace {

class CudaDenseOp final : public DenseOp {
 public:
  CudaDenseOp(CudaBackend& be, const DenseDesc& d) : be_(be), d_(d), t_(be.act_dtype()) {
    DT_REQUIRE(d.batch >= 1 && d.inputs >= 1 && d.outputs >= 1,
               "dense: batch, inputs and outputs must be >= 1, got " + std::to_string(d.batch) +
                   ", " + std::to_string(d.inputs) + ", " + std::to_string(d.outputs));
    const auto batch = static_cast<std::size_t>(d.batch);
    ones_ = DeviceMemory::create(batch * sizeof(float));
    launch_fill(be.stream(), ones_.as<float>(), 1.0f, batch);
    if (t_ != DType::f32) {
      ones_lp_ = DeviceMemory::create(batch * dtype_size(t_));
      be.cast(ones_.get(), DType::f32, ones_lp_.get(), t_, batch);
      w_lp_ = DeviceMemory::create(static_cast<std::size_t>(d.outputs) *
                                   static_cast<std::size_t>(d.inputs) * dtype_size(t_));
    }
  }

  void forward(const void* x, const float* w, const float* b, void* y) override {
    const float one = 1.0f, zero = 0.0f;
    if (t_ == DType::f32) {
      DT_CHECK_CUBLAS(cublasSgemm(be_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, d_.outputs, d_.batch,
                                  d_.inputs, &one, w, d_.inputs, static_cast<const float*>(x),
                                  d_.inputs, &zero, static_cast<float*>(y), d_.outputs));
    } else {
      be_.cast(w, DType::f32, w_lp_.get(), t_, w_count());
      w_ready_ = true;
      gemm(CUBLAS_OP_T, CUBLAS_OP_N, d_.outputs, d_.batch, d_.inputs, w_lp_.get(), d_.inputs, x,
           d_.inputs, y, t_, d_.outputs);
    }
    launch_add_row_bias(be_.stream(), y, b, d_.batch, d_.outputs, elem(t_));
  }

  void backward(const void* x, const float* w, const void* dy, void* dx, float* dw,
                float* db) override {
    if (t_ != DType::f32) {
      // w_lp_ holds forward's bf16 copy of w (the weights do not change in between).
      if (dx != nullptr && !w_ready_) be_.cast(w, DType::f32, w_lp_.get(), t_, w_count());
      w_ready_ = false;
      if (dx != nullptr)
        gemm(CUBLAS_OP_N, CUBLAS_OP_N, d_.inputs, d_.batch, d_.outputs, w_lp_.get(), d_.inputs, dy,
             d_.outputs, dx, t_, d_.inputs);
      gemm(CUBLAS_OP_N, CUBLAS_OP_T, d_.inputs, d_.outputs, d_.batch, x, d_.inputs, dy, d_.outputs,
           dw, DType::f32, d_.inputs);
      gemm(CUBLAS_OP_N, CUBLAS_OP_N, d_.outputs, 1, d_.batch, dy, d_.outputs, ones_lp_.get(),
           d_.batch, db, DType::f32, d_.outputs);
      return;
    }
    const float one = 1.0f, zero = 0.0f;
    const auto* dyf = static_cast<const float*>(dy);
    if (dx != nullptr)
      DT_CHECK_CUBLAS(cublasSgemm(be_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, d_.inputs, d_.batch,
                                  d_.outputs, &one, w, d_.inputs, dyf, d_.outputs, &zero,
                                  static_cast<float*>(dx), d_.inputs));
    DT_CHECK_CUBLAS(cublasSgemm(be_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, d_.inputs, d_.outputs,
                                d_.batch, &one, static_cast<const float*>(x), d_.inputs, dyf,
                                d_.outputs, &zero, dw, d_.inputs));
    DT_CHECK_CUBLAS(cublasSgemv(be_.cublas(), CUBLAS_OP_N, d_.outputs, d_.batch, &one, dyf,
                                d_.outputs, ones_.as<float>(), 1, &zero, db, 1));
  }

 private:
  [[nodiscard]] std::size_t w_count() const {
    return static_cast<std::size_t>(d_.outputs) * static_cast<std::size_t>(d_.inputs);
  }
  /// C = op(A)·op(B) (column-major, beta = 0) with A and B of the activation type t_, C of type
  /// c_type, fp32 accumulation.
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* a, int lda,
            const void* b, int ldb, void* c, DType c_type, int ldc) {
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t ab = t_ == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cudaDataType_t ct = c_type == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
    DT_CHECK_CUBLAS(cublasGemmEx(be_.cublas(), ta, tb, m, n, k, &one, a, ab, lda, b, ab, ldb, &zero,
                                 c, ct, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  CudaBackend& be_;
  DenseDesc d_;
  DType t_;               ///< of x, y, dx, dy
  DeviceMemory ones_;     ///< batch ones, for db = dyᵀ·1
  DeviceMemory ones_lp_;  ///< the same in bf16 (bf16 only)
  DeviceMemory w_lp_;     ///< bf16 copy of W (bf16 only)
  bool w_ready_ = false;  ///< forward left the copy of this step's W in w_lp_
};

}  // namespace

std::unique_ptr<DenseOp> make_cuda_dense(CudaBackend& be, const DenseDesc& d) {
  return std::make_unique<CudaDenseOp>(be, d);
}

}  // namespace dtrain::cuda
