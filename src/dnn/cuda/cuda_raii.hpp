// src/dnn/cuda/cuda_raii.hpp — non-copyable, movable RAII owners for CUDA runtime, cuDNN and cuBLAS
// handles: stream, event, graph, cuDNN/cuBLAS handles, tensor/filter/convolution/pooling/activation
// descriptors, device memory (cudaMalloc) and pinned host memory (cudaMallocHost).
//
// Every owner creates its handle in the constructor (throwing LibraryError through the DT_CHECK_*
// macros) and releases it in the destructor with the non-throwing check variant, in the style of
// PyTorch's c10::cuda wrappers. The NCCL communicator owner lives in nccl_allreduce.cpp (it needs
// ncclCommAbort on error paths).
#pragma once

#include <cstddef>
#include <utility>

#include "cuda_check.hpp"
#include "dtrain/dnn/backend.hpp"

namespace dtrain::cuda {

/// The device memory this process took with cudaMalloc through dtrain (DeviceMemory,
/// CudaBackend::allocate; device_memory.cpp), counted as PyTorch's torch.cuda.memory_allocated:
/// the CUDA context and what cuDNN and cuBLAS allocate themselves are not in it. Thread-safe.
/// note_device_alloc records `bytes` at `p`, note_device_free forgets p (unknown p: nothing).
void note_device_alloc(const void* p, std::size_t bytes) noexcept;
void note_device_free(const void* p) noexcept;
/// The largest total of recorded allocations live at once since the process started (bytes).
std::size_t device_peak_bytes() noexcept;

/// Owner of one handle of type H released by Traits::destroy(H) (noexcept).
template <typename H, typename Traits>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  explicit UniqueHandle(H h) noexcept : h_(h) {}
  ~UniqueHandle() { reset(); }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;
  UniqueHandle(UniqueHandle&& o) noexcept : h_(std::exchange(o.h_, H{})) {}
  UniqueHandle& operator=(UniqueHandle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, H{});
    }
    return *this;
  }
  /// Releases the handle now (no-op when empty).
  void reset() noexcept {
    if (h_ != H{}) Traits::destroy(h_);
    h_ = H{};
  }
  /// Gives up ownership and returns the handle (the caller must release it).
  [[nodiscard]] H release() noexcept { return std::exchange(h_, H{}); }
  [[nodiscard]] H get() const noexcept { return h_; }
  operator H() const noexcept { return h_; }  // NOLINT: handles are passed straight to the APIs
  explicit operator bool() const noexcept { return h_ != H{}; }

 private:
  H h_{};
};

#define DT_DETAIL_TRAITS(Name, H, destroy_call)         \
  struct Name {                                         \
    static void destroy(H h) noexcept { destroy_call; } \
  }

DT_DETAIL_TRAITS(StreamTraits, cudaStream_t, DT_CHECK_CUDA_NOTHROW(cudaStreamDestroy(h)));
DT_DETAIL_TRAITS(EventTraits, cudaEvent_t, DT_CHECK_CUDA_NOTHROW(cudaEventDestroy(h)));
DT_DETAIL_TRAITS(CudnnTraits, cudnnHandle_t, DT_CHECK_CUDNN_NOTHROW(cudnnDestroy(h)));
DT_DETAIL_TRAITS(CublasTraits, cublasHandle_t, DT_CHECK_CUBLAS_NOTHROW(cublasDestroy(h)));
DT_DETAIL_TRAITS(TensorDescTraits, cudnnTensorDescriptor_t,
                 DT_CHECK_CUDNN_NOTHROW(cudnnDestroyTensorDescriptor(h)));
DT_DETAIL_TRAITS(FilterDescTraits, cudnnFilterDescriptor_t,
                 DT_CHECK_CUDNN_NOTHROW(cudnnDestroyFilterDescriptor(h)));
DT_DETAIL_TRAITS(ConvDescTraits, cudnnConvolutionDescriptor_t,
                 DT_CHECK_CUDNN_NOTHROW(cudnnDestroyConvolutionDescriptor(h)));
DT_DETAIL_TRAITS(PoolDescTraits, cudnnPoolingDescriptor_t,
                 DT_CHECK_CUDNN_NOTHROW(cudnnDestroyPoolingDescriptor(h)));
DT_DETAIL_TRAITS(ActDescTraits, cudnnActivationDescriptor_t,
                 DT_CHECK_CUDNN_NOTHROW(cudnnDestroyActivationDescriptor(h)));
DT_DETAIL_TRAITS(DeviceMemTraits, void*, note_device_free(h); DT_CHECK_CUDA_NOTHROW(cudaFree(h)));
DT_DETAIL_TRAITS(HostMemTraits, void*, DT_CHECK_CUDA_NOTHROW(cudaFreeHost(h)));
DT_DETAIL_TRAITS(GraphTraits, cudaGraph_t, DT_CHECK_CUDA_NOTHROW(cudaGraphDestroy(h)));
DT_DETAIL_TRAITS(GraphExecTraits, cudaGraphExec_t, DT_CHECK_CUDA_NOTHROW(cudaGraphExecDestroy(h)));
#undef DT_DETAIL_TRAITS

/// A captured CUDA graph (cudaStreamEndCapture's) and its executable instance.
using Graph = UniqueHandle<cudaGraph_t, GraphTraits>;
using GraphExec = UniqueHandle<cudaGraphExec_t, GraphExecTraits>;

/// A non-blocking CUDA stream on the current device.
class Stream : public UniqueHandle<cudaStream_t, StreamTraits> {
 public:
  Stream() = default;
  static Stream create() {
    cudaStream_t s = nullptr;
    DT_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return Stream(s);
  }

  using UniqueHandle::UniqueHandle;  ///< adopts an existing handle
};

/// A CUDA event without timing (cheap cross-stream dependency).
class Event : public UniqueHandle<cudaEvent_t, EventTraits> {
 public:
  Event() = default;
  static Event create() {
    cudaEvent_t e = nullptr;
    DT_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return Event(e);
  }
  /// An event that records a time stamp (cudaEventElapsedTime).
  static Event create_timed() {
    cudaEvent_t e = nullptr;
    DT_CHECK_CUDA(cudaEventCreate(&e));
    return Event(e);
  }

  using UniqueHandle::UniqueHandle;  ///< adopts an existing handle
};

/// A cuDNN handle bound to `stream`.
class CudnnHandle : public UniqueHandle<cudnnHandle_t, CudnnTraits> {
 public:
  CudnnHandle() = default;
  static CudnnHandle create(cudaStream_t stream) {
    cudnnHandle_t h = nullptr;
    DT_CHECK_CUDNN(cudnnCreate(&h));
    CudnnHandle owner(h);
    DT_CHECK_CUDNN(cudnnSetStream(h, stream));
    return owner;
  }

  using UniqueHandle::UniqueHandle;  ///< adopts an existing handle
};

/// A cuBLAS handle bound to `stream`, pointer mode host, default (fp32-exact) math mode.
class CublasHandle : public UniqueHandle<cublasHandle_t, CublasTraits> {
 public:
  CublasHandle() = default;
  static CublasHandle create(cudaStream_t stream) {
    cublasHandle_t h = nullptr;
    DT_CHECK_CUBLAS(cublasCreate(&h));
    CublasHandle owner(h);
    DT_CHECK_CUBLAS(cublasSetStream(h, stream));
    DT_CHECK_CUBLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    return owner;
  }

  using UniqueHandle::UniqueHandle;  ///< adopts an existing handle
};

/// cuDNN's format for a dtrain Layout (CUDNN_TENSOR_NCHW / CUDNN_TENSOR_NHWC).
inline cudnnTensorFormat_t cudnn_format(Layout layout) {
  return layout == Layout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

/// cuDNN's data type for a dtrain DType (CUDNN_DATA_FLOAT / CUDNN_DATA_BFLOAT16).
inline cudnnDataType_t cudnn_dtype(DType t) {
  return t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/// cudnnTensorDescriptor_t, set as n×c×h×w of elements t (fp32 by default) in NCHW or NHWC
/// memory order.
class TensorDesc : public UniqueHandle<cudnnTensorDescriptor_t, TensorDescTraits> {
 public:
  TensorDesc() = default;
  static TensorDesc nchw(int n, int c, int h, int w) { return make(Layout::nchw, n, c, h, w); }
  static TensorDesc make(Layout layout, int n, int c, int h, int w, DType t = DType::f32) {
    cudnnTensorDescriptor_t d = nullptr;
    DT_CHECK_CUDNN(cudnnCreateTensorDescriptor(&d));
    TensorDesc owner(d);
    DT_CHECK_CUDNN(cudnnSetTensor4dDescriptor(d, cudnn_format(layout), cudnn_dtype(t), n, c, h, w));
    return owner;
  }
  static TensorDesc of(const Shape& s, Layout layout, DType t = DType::f32) {
    return make(layout, s.n, s.c, s.h, s.w, t);
  }

  using UniqueHandle::UniqueHandle;  ///< adopts an existing handle
};

/// cudnnFilterDescriptor_t, k×c×r×s of elements t (fp32 by default) stored KCRS (NCHW) or
/// KRSC (NHWC).
class FilterDesc : public UniqueHandle<cudnnFilterDescriptor_t, FilterDescTraits> {
 public:
  FilterDesc() = default;
  static FilterDesc kcrs(int k, int c, int r, int s) { return make(Layout::nchw, k, c, r, s); }
  static FilterDesc make(Layout layout, int k, int c, int r, int s, DType t = DType::f32) {
    cudnnFilterDescriptor_t d = nullptr;
    DT_CHECK_CUDNN(cudnnCreateFilterDescriptor(&d));
    FilterDesc owner(d);
    DT_CHECK_CUDNN(cudnnSetFilter4dDescriptor(d, cudnn_dtype(t), cudnn_format(layout), k, c, r, s));
    return owner;
  }

  using UniqueHandle::UniqueHandle;  ///< adopts an existing handle
};

/// cudnnConvolutionDescriptor_t: 2-D cross-correlation, fp32 compute, pad/stride per axis
/// (height, width) and math type `math` (CUDNN_FMA_MATH: no TF32, results match the fp32 CPU
/// backend; CUDNN_TENSOR_OP_MATH: TF32 tensor cores allowed).
class ConvolutionDesc : public UniqueHandle<cudnnConvolutionDescriptor_t, ConvDescTraits> {
 public:
  ConvolutionDesc() = default;
  static ConvolutionDesc create(int pad_h, int pad_w, int stride_h, int stride_w,
                                cudnnMathType_t math = CUDNN_FMA_MATH) {
    cudnnConvolutionDescriptor_t d = nullptr;
    DT_CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&d));
    ConvolutionDesc owner(d);
    DT_CHECK_CUDNN(cudnnSetConvolution2dDescriptor(d, pad_h, pad_w, stride_h, stride_w, 1, 1,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DT_CHECK_CUDNN(cudnnSetConvolutionMathType(d, math));
    return owner;
  }

  using UniqueHandle::UniqueHandle;  ///< adopts an existing handle
};

/// cudnnPoolingDescriptor_t; window, pad and stride per axis (height, width).
class PoolingDesc : public UniqueHandle<cudnnPoolingDescriptor_t, PoolDescTraits> {
 public:
  PoolingDesc() = default;
  static PoolingDesc create(cudnnPoolingMode_t mode, int kernel_h, int kernel_w, int pad_h,
                            int pad_w, int stride_h, int stride_w) {
    cudnnPoolingDescriptor_t d = nullptr;
    DT_CHECK_CUDNN(cudnnCreatePoolingDescriptor(&d));
    PoolingDesc owner(d);
    DT_CHECK_CUDNN(cudnnSetPooling2dDescriptor(d, mode, CUDNN_NOT_PROPAGATE_NAN, kernel_h, kernel_w,
                                               pad_h, pad_w, stride_h, stride_w));
    return owner;
  }

  using UniqueHandle::UniqueHandle;  ///< adopts an existing handle
};

/// cudnnActivationDescriptor_t.
class ActivationDesc : public UniqueHandle<cudnnActivationDescriptor_t, ActDescTraits> {
 public:
  ActivationDesc() = default;
  static ActivationDesc create(cudnnActivationMode_t mode) {
    cudnnActivationDescriptor_t d = nullptr;
    DT_CHECK_CUDNN(cudnnCreateActivationDescriptor(&d));
    ActivationDesc owner(d);
    DT_CHECK_CUDNN(cudnnSetActivationDescriptor(d, mode, CUDNN_PROPAGATE_NAN, 0.0));
    return owner;
  }

  using UniqueHandle::UniqueHandle;  ///< adopts an existing handle
};

/// Device memory from cudaMalloc (256-byte aligned, so ≥ the 64 bytes Backend promises).
class DeviceMemory : public UniqueHandle<void*, DeviceMemTraits> {
 public:
  DeviceMemory() = default;
  /// Allocates `bytes` (nothing for 0); contents uninitialized.
  static DeviceMemory create(std::size_t bytes) {
    if (bytes == 0) return DeviceMemory();
    void* p = nullptr;
    DT_CHECK_CUDA(cudaMalloc(&p, bytes));
    note_device_alloc(p, bytes);
    return DeviceMemory(p);
  }
  template <typename T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(get());
  }

  using UniqueHandle::UniqueHandle;  ///< adopts an existing handle
};

/// Page-locked host memory from cudaMallocHost.
class PinnedMemory : public UniqueHandle<void*, HostMemTraits> {
 public:
  PinnedMemory() = default;
  static PinnedMemory create(std::size_t bytes) {
    if (bytes == 0) return PinnedMemory();
    void* p = nullptr;
    DT_CHECK_CUDA(cudaMallocHost(&p, bytes));
    return PinnedMemory(p);
  }
  template <typename T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(get());
  }

  using UniqueHandle::UniqueHandle;  ///< adopts an existing handle
};

}  // namespace dtrain::cuda
