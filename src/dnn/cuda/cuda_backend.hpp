// src/dnn/cuda/cuda_backend.hpp — the CUDA backend class (private to src/dnn/cuda): one GPU, one
// non-blocking stream, one cuDNN and one cuBLAS handle bound to it. Implements dtrain::Backend
// (dtrain/dnn/backend.hpp) with cuDNN 9 legacy (cudnn_ops.h / cudnn_cnn.h) calls, cuBLAS and the
// kernels of kernels.cu. Code that needs the stream (the NCCL allreduce) reaches it with
// as_cuda_backend().
//
// Memory and synchronization rules of this backend:
// - allocate(): cudaMalloc + cudaMemsetAsync(0) + stream sync (allocation happens at setup).
// - copy_to_device() returns once host_src may be reused (it waits for the stream), copy_to_host()
//   once host_dst holds the data; copy_device(), fill(), scale(), ops, check_gradient() and
//   optimizer_update() / layerwise_update() after a check are asynchronous. all_finite() (and
//   the updates without a check before them) synchronizes to read its flag;
//   take_gradient_check() waits for that check's copy only.
// - Ops hold a reference to the backend (its handles, stream) and must not outlive it.
// - CUDA graphs (make_step_graph): ops queue only stream-ordered work after their construction
//   (their buffers, algorithms and workspace sizes are fixed when they are made), so a training
//   step can be captured; reserve_workspace() counts its moves (buffers_generation()).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "conv_graph.hpp"
#include "cuda_raii.hpp"
#include "kernels.hpp"
#include "dtrain/dnn/backend.hpp"

namespace dtrain::cuda {

/// Default upper bound of the cuDNN convolution workspace one op may use (bytes; Backend::
/// set_conv_workspace_mb overrides it). The workspace itself is one buffer per backend
/// (workspace()), sized to the largest any op asked for.
inline constexpr std::size_t kConvWorkspaceLimit = std::size_t(512) << 20;

class CudaBackend final : public Backend {
 public:
  /// Binds the calling thread to GPU `device` (cudaSetDevice) and creates stream and handles.
  /// Throws InputError for a device index outside [0, cuda_device_count()), LibraryError otherwise.
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  [[nodiscard]] Device device() const override { return Device::cuda; }
  [[nodiscard]] std::string name() const override { return name_; }

  void* allocate(std::size_t bytes) override;
  void deallocate(void* p) noexcept override;
  void* allocate_host(std::size_t bytes) override;
  void deallocate_host(void* p) noexcept override;
  void copy_to_device(void* dst, const void* host_src, std::size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override;
  void copy_device(void* dst, const void* src, std::size_t bytes) override;
  void upload(void* dst, const void* host_src, std::size_t bytes) override;
  void fill(float* p, float value, std::size_t n) override;
  void scale(float* p, float alpha, std::size_t n) override;
  void zero(void* p, std::size_t bytes) override;
  void add(void* y, const void* x, std::size_t n, DType t) override;
  /// One pass (launch_add_relu); `relu` is not used.
  void add_relu(void* y, const void* a, const void* b, std::size_t n, DType t,
                ActivationOp& relu) override;
  /// One pass writing both gradients (launch_relu_backward_fanout); `relu` is not used.
  void relu_backward_fanout(const void* y, const void* dy, void* dx0, void* dx1, std::size_t n,
                            DType t, ActivationOp& relu) override;
  void cast(const void* x, DType from, void* y, DType to, std::size_t n) override;
  void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
               std::size_t width, std::size_t rows) override;
  void convert_layout(const void* x, void* y, const Shape& s, Layout to, DType t) override;
  /// One kernel (launch_normalize_uint8: element-wise for NCHW, a shared tile for NHWC), queued.
  void normalize_uint8(const std::uint8_t* x, const float* lut, void* y, const Shape& s, Layout to,
                       DType t) override;
  bool all_finite(const float* p, std::size_t n) override;
  void synchronize() override;
  [[nodiscard]] std::size_t device_peak_bytes() const override { return cuda::device_peak_bytes(); }

  std::unique_ptr<ConvOp> make_conv(const ConvDesc& d) override;
  std::unique_ptr<PoolOp> make_pool(const PoolDesc& d) override;
  std::unique_ptr<ActivationOp> make_activation(ActKind kind, const Shape& shape) override;
  std::unique_ptr<BatchNormOp> make_batchnorm(const BatchNormDesc& d) override;
  std::unique_ptr<DenseOp> make_dense(const DenseDesc& d) override;
  std::unique_ptr<DropoutOp> make_dropout(const Shape& shape, float p) override;
  std::unique_ptr<SoftmaxXentOp> make_softmax_xent(int batch, int classes) override;

  bool optimizer_update(const OptimizerUpdate& u, float* p, const float* g, float* m, float* v,
                        std::size_t n) override;
  /// LARS / LAMB as two multi-tensor launches over a chunk table (layerwise.hpp), without host
  /// synchronization after a check_gradient() (without one, all_finite() waits for its flag, as
  /// optimizer_update()). The table is built and uploaded (a synchronous copy) when `segments`
  /// differ from the last call's — once per model.
  bool layerwise_update(const OptimizerUpdate& u, const std::vector<ParamSegment>& segments,
                        float* p, const float* g, float* m, float* v) override;
  void check_gradient(const float* g, std::size_t n) override;
  void mark(int i) override;
  double seconds_between(int a, int b) override;
  std::optional<std::size_t> take_gradient_check() override;
  void set_math(MathMode mode) override;
  /// bf16 needs compute capability ≥ 8.0 (InputError otherwise).
  void set_precision(Precision p) override;
  [[nodiscard]] bool supports_tf32() const override { return cc_ >= 80; }
  void check_after(const std::string& what) override;
  void set_profiling(bool on) override;
  /// A CudaStepGraph (step_graph.cpp) on this backend's stream.
  std::unique_ptr<StepGraph> make_step_graph() override;
  /// One single-thread kernel writing `seed` into step_seed_ (launch_store_u64).
  const std::uint64_t* set_step_seed(std::uint64_t seed) override;
  /// Counts reserve_workspace()'s moves of the workspace.
  [[nodiscard]] std::uint64_t buffers_generation() const override { return generation_; }

  /// Grows the shared scratch buffer to at least `bytes` (ops call it when they are made).
  void reserve_workspace(std::size_t bytes);
  /// The shared scratch buffer (reserve_workspace()'s largest size; nullptr when 0). Every op runs
  /// on the one stream, so ops never use it at the same time. Read it at call time: it moves when
  /// a later op reserves more.
  [[nodiscard]] void* workspace() const noexcept { return workspace_.get(); }
  [[nodiscard]] std::size_t workspace_bytes() const noexcept { return workspace_bytes_; }
  /// Streaming multiprocessors of the GPU (132 on an H100 SXM).
  [[nodiscard]] int multiprocessors() const noexcept { return sms_; }

  /// The GPU index this backend runs on.
  [[nodiscard]] int gpu() const noexcept { return gpu_; }
  /// The one stream every call of this backend is queued on.
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_.get(); }
  [[nodiscard]] cudnnHandle_t cudnn() const noexcept { return cudnn_.get(); }
  [[nodiscard]] cublasHandle_t cublas() const noexcept { return cublas_.get(); }
  /// The graph-API convolution plans built on this backend's cuDNN handle (--conv-api graph).
  [[nodiscard]] GraphConvPlans& conv_plans() noexcept { return conv_plans_; }

 private:
  int gpu_ = 0;
  std::string name_;
  Stream stream_;
  CudnnHandle cudnn_;
  CublasHandle cublas_;
  GraphConvPlans conv_plans_;  ///< after cudnn_: released before the handle they were built on
  int cc_ = 0;                 ///< compute capability, 10·major + minor (90 for H100)
  int sms_ = 1;
  struct Staging {  ///< a pinned upload buffer and the event of its last copy
    PinnedMemory mem;
    std::size_t bytes = 0;
    Event done;
  };
  Staging staging_[2];
  int next_staging_ = 0;
  DeviceMemory workspace_;
  std::size_t workspace_bytes_ = 0;
  std::uint64_t generation_ = 0;  ///< buffers_generation()
  DeviceMemory step_seed_;        ///< one std::uint64_t: set_step_seed()'s device word
  /// cuBLAS's workspace (cublasSetWorkspace): its own, allocated here, so that no cuBLAS call
  /// allocates inside a CUDA graph capture.
  DeviceMemory cublas_workspace_;
  DeviceMemory flag_;       ///< one int for all_finite()
  PinnedMemory flag_host_;  ///< its host copy
  /// check_gradient(): kMaxPendingChecks slots of a first non-finite index on the device, their
  /// pinned host copies, and the events of those copies; a ring, `checks_` unread from
  /// `check_first_`.
  DeviceMemory check_dev_;
  PinnedMemory check_host_;
  Event check_done_[kMaxPendingChecks];
  int check_first_ = 0, checks_ = 0;
  const unsigned long long* guard_ =
      nullptr;           ///< the latest check's device slot (optimizer_update)
  Event marks_[kMarks];  ///< mark(): timed events, made on first use
  /// layerwise_update(): the segments its device tables were built for, the chunk and span
  /// tables (layerwise.hpp) and the chunks' partial sums (2 doubles a chunk).
  struct Layerwise {
    std::vector<ParamSegment> segments;
    DeviceMemory chunks, spans, partials;
    int num_chunks = 0;
  } layerwise_;
  /// Makes layerwise_ describe `segments` (checked by check_layerwise).
  void prepare_layerwise(const std::vector<ParamSegment>& segments);
  bool marked_[kMarks] = {};
};

/// The kernels' element type (kernels.hpp) of a DType.
inline Elem elem(DType t) { return t == DType::bf16 ? Elem::bf16 : Elem::f32; }

/// Returns `backend` as a CudaBackend; throws dtrain::Error naming the backend when it is not one
/// (e.g. `--allreduce nccl` with `--device cpu`).
CudaBackend& as_cuda_backend(Backend& backend);

// Op factories (one translation unit each family); they read handles and stream from `be`.
std::unique_ptr<ConvOp> make_cuda_conv(CudaBackend& be, const ConvDesc& d);
std::unique_ptr<PoolOp> make_cuda_pool(CudaBackend& be, const PoolDesc& d);
std::unique_ptr<ActivationOp> make_cuda_activation(CudaBackend& be, ActKind kind,
                                                   const Shape& shape);
std::unique_ptr<BatchNormOp> make_cuda_batchnorm(CudaBackend& be, const BatchNormDesc& d);
std::unique_ptr<DenseOp> make_cuda_dense(CudaBackend& be, const DenseDesc& d);
std::unique_ptr<DropoutOp> make_cuda_dropout(CudaBackend& be, const Shape& shape, float p);
std::unique_ptr<SoftmaxXentOp> make_cuda_softmax_xent(CudaBackend& be, int batch, int classes,
                                                      float label_smoothing);
std::unique_ptr<StepGraph> make_cuda_step_graph(CudaBackend& be);

}  // namespace dtrain::cuda
