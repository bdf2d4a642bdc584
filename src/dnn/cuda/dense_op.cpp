// src/dnn/cuda/dense_op.cpp — fully connected layer y = x·Wᵀ + b on cuBLAS (cublasSgemm/Sgemv).
//
// dtrain's tensors are row-major; cuBLAS is column-major. A row-major R×C matrix is the same memory
// as a column-major C×R matrix (its transpose), so with x: N×I, W: O×I, y: N×O (row-major) we use
//   forward   yᵀ (O×N)  = W·xᵀ             gemm(T, N, m=O, n=N, k=I, A=W lda=I, B=x ldb=I, ldc=O)
//   dx        dxᵀ (I×N) = Wᵀ·dyᵀ           gemm(N, N, m=I, n=N, k=O, A=W lda=I, B=dy ldb=O, ldc=I)
//   dW        dWᵀ (I×O) = xᵀ·dy            gemm(N, T, m=I, n=O, k=N, A=x lda=I, B=dy ldb=O, ldc=I)
//   db        db (O)    = dyᵀ·1            gemv(N, m=O, n=N, A=dy lda=O, x=ones)
// with beta = 0 (gradients are overwritten). The bias add is a small kernel (kernels.cu); the
// ones vector is allocated and filled once in the constructor.
#include <string>

#include "cuda_backend.hpp"
#include "kernels.hpp"

namespace dtrain::cuda {
namespace {

class CudaDenseOp final : public DenseOp {
 public:
  CudaDenseOp(CudaBackend& be, const DenseDesc& d) : be_(be), d_(d) {
    DT_REQUIRE(d.batch >= 1 && d.inputs >= 1 && d.outputs >= 1,
               "dense: batch, inputs and outputs must be >= 1, got " + std::to_string(d.batch) +
                   ", " + std::to_string(d.inputs) + ", " + std::to_string(d.outputs));
    ones_ = DeviceMemory::create(static_cast<std::size_t>(d.batch) * sizeof(float));
    launch_fill(be.stream(), ones_.as<float>(), 1.0f, static_cast<std::size_t>(d.batch));
  }

  void forward(const float* x, const float* w, const float* b, float* y) override {
    const float one = 1.0f, zero = 0.0f;
    DT_CHECK_CUBLAS(cublasSgemm(be_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, d_.outputs, d_.batch,
                                d_.inputs, &one, w, d_.inputs, x, d_.inputs, &zero, y, d_.outputs));
    launch_add_row_bias(be_.stream(), y, b, d_.batch, d_.outputs);
  }

  void backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                float* db) override {
    const float one = 1.0f, zero = 0.0f;
    if (dx != nullptr)
      DT_CHECK_CUBLAS(cublasSgemm(be_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, d_.inputs, d_.batch,
                                  d_.outputs, &one, w, d_.inputs, dy, d_.outputs, &zero, dx,
                                  d_.inputs));
    DT_CHECK_CUBLAS(cublasSgemm(be_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, d_.inputs, d_.outputs,
                                d_.batch, &one, x, d_.inputs, dy, d_.outputs, &zero, dw,
                                d_.inputs));
    DT_CHECK_CUBLAS(cublasSgemv(be_.cublas(), CUBLAS_OP_N, d_.outputs, d_.batch, &one, dy,
                                d_.outputs, ones_.as<float>(), 1, &zero, db, 1));
  }

 private:
  CudaBackend& be_;
  DenseDesc d_;
  DeviceMemory ones_;  ///< batch ones, for db = dyᵀ·1
};

}  // namespace

std::unique_ptr<DenseOp> make_cuda_dense(CudaBackend& be, const DenseDesc& d) {
  return std::make_unique<CudaDenseOp>(be, d);
}

}  // namespace dtrain::cuda
