// src/dnn/cuda/cuda_backend.cpp — CudaBackend (see cuda_backend.hpp): memory, copies, element-wise
// helpers and optimizer on one stream; the CUDA-build versions of cuda_available(),
// cuda_device_count(), make_cuda_backend() and select_gpu_for_local_rank() declared in
// dtrain/dnn/backend.hpp. Follows the CUDA runtime API (stream-ordered cudaMemcpyAsync /
// cudaMemsetAsync) and cuDNN's / cuBLAS's handle-per-stream model.
#include "cuda_backend.hpp"

#include <cuda_profiler_api.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "kernels.hpp"

namespace dtrain {

namespace {
/// cudaGetDeviceCount once per call: the count, or 0 and the runtime's error in `why`.
int device_count(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
    if (why != nullptr)
      *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" +
             cudaGetErrorString(e) + ")";
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "cudaGetDeviceCount: 0 devices";
  return count;
}
}  // namespace

int cuda_device_count() { return device_count(nullptr); }

std::string cuda_unavailable_reason() {
  std::string why;
  return device_count(&why) > 0 ? std::string() : why;
}

bool cuda_available() { return cuda_device_count() > 0; }

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<cuda::CudaBackend>(device);
}

int select_gpu_for_local_rank(int local_rank, int local_size, bool allow_sharing) {
  DT_REQUIRE(local_rank >= 0 && local_rank < local_size, "invalid node-local rank " +
                                                             std::to_string(local_rank) + " of " +
                                                             std::to_string(local_size));
  const int gpus = cuda_device_count();
  if (gpus == 0)
    throw Error(format_error("no CUDA device visible to local rank " + std::to_string(local_rank) +
                                 " (" + cuda_unavailable_reason() +
                                 "; check CUDA_VISIBLE_DEVICES, the driver, and --gpus-per-task)",
                             __FILE__, __LINE__));
  if (local_size > gpus && !allow_sharing)
    throw InputError(format_error(std::to_string(local_size) + " ranks on this node but only " +
                                      std::to_string(gpus) + " GPUs; pass --allow-gpu-sharing",
                                  __FILE__, __LINE__));
  return local_rank % gpus;
}

namespace cuda {

CudaBackend::CudaBackend(int device) : gpu_(device) {
  const int count = cuda_device_count();
  DT_REQUIRE(count > 0, "--device cuda: no CUDA device is visible (" + cuda_unavailable_reason() +
                            "; driver missing, or CUDA_VISIBLE_DEVICES empty?)");
  DT_REQUIRE(device >= 0 && device < count, "GPU index " + std::to_string(device) +
                                                " out of range: " + std::to_string(count) +
                                                " visible");
  DT_CHECK_CUDA(cudaSetDevice(device));
  cudaDeviceProp prop{};
  DT_CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  cc_ = 10 * prop.major + prop.minor;
  sms_ = prop.multiProcessorCount;
  const char* dbg = std::getenv("DTRAIN_DEBUG_SYNC");
  if (dbg != nullptr && std::strcmp(dbg, "1") == 0) set_debug_sync(true);
  const std::size_t v = cudnnGetVersion();
  name_ = "cuda:" + std::to_string(device) + " (" + prop.name + ", cuDNN " +
          std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
          std::to_string(v % 100) + ")";
  stream_ = Stream::create();
  cudnn_ = CudnnHandle::create(stream_);
  cublas_ = CublasHandle::create(stream_);
  flag_ = DeviceMemory::create(sizeof(int));
  flag_host_ = PinnedMemory::create(sizeof(int));
  check_dev_ = DeviceMemory::create(kMaxPendingChecks * sizeof(unsigned long long));
  check_host_ = PinnedMemory::create(kMaxPendingChecks * sizeof(unsigned long long));
  for (Event& e : check_done_) e = Event::create();
  step_seed_ = DeviceMemory::create(sizeof(std::uint64_t));
  // cuBLAS's recommended workspace: 32 MiB on Hopper and later, 4 MiB before (cuBLAS docs,
  // cublasSetWorkspace). Set after cublasSetStream, which resets it to cuBLAS's own pool.
  const std::size_t blas_bytes = std::size_t(cc_ >= 90 ? 32 : 4) << 20;
  cublas_workspace_ = DeviceMemory::create(blas_bytes);
  DT_CHECK_CUBLAS(cublasSetWorkspace(cublas_, cublas_workspace_.get(), blas_bytes));
}

CudaBackend::~CudaBackend() {
  if (stream_) DT_CHECK_CUDA_NOTHROW(cudaStreamSynchronize(stream_));
}

void* CudaBackend::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw LibraryError(format_error("cudaMalloc of " + std::to_string(bytes) + " bytes on " +
                                        name_ + " failed: " + cudaGetErrorString(e),
                                    __FILE__, __LINE__));
  }
  note_device_alloc(p, bytes);
  DeviceMemory owner(p);  // freed if the memset fails
  DT_CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, stream_));
  DT_CHECK_CUDA(cudaStreamSynchronize(stream_));
  return owner.release();
}

void CudaBackend::deallocate(void* p) noexcept {
  if (p == nullptr) return;
  note_device_free(p);
  DT_CHECK_CUDA_NOTHROW(cudaFree(p));
}

void* CudaBackend::allocate_host(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  PinnedMemory owner = PinnedMemory::create(bytes);
  std::memset(owner.get(), 0, bytes);
  return owner.release();
}

void CudaBackend::deallocate_host(void* p) noexcept {
  if (p) DT_CHECK_CUDA_NOTHROW(cudaFreeHost(p));
}

void CudaBackend::copy_to_device(void* dst, const void* host_src, std::size_t bytes) {
  if (bytes == 0) return;
  DT_CHECK_CUDA(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  // The caller may overwrite host_src as soon as we return (pinned sources are read by DMA later).
  DT_CHECK_CUDA(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_to_host(void* host_dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  DT_CHECK_CUDA(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  DT_CHECK_CUDA(cudaStreamSynchronize(stream_));
}

void CudaBackend::upload(void* dst, const void* host_src, std::size_t bytes) {
  if (bytes == 0) return;
  Staging& s = staging_[next_staging_];
  next_staging_ ^= 1;
  if (s.done) DT_CHECK_CUDA(cudaEventSynchronize(s.done));  // its previous copy has been read
  else s.done = Event::create();
  if (s.bytes < bytes) {
    s.mem = PinnedMemory();
    s.bytes = 0;  // a failed create below leaves no stale size behind
    s.mem = PinnedMemory::create(bytes);
    s.bytes = bytes;
  }
  std::memcpy(s.mem.get(), host_src, bytes);
  DT_CHECK_CUDA(cudaMemcpyAsync(dst, s.mem.get(), bytes, cudaMemcpyHostToDevice, stream_));
  DT_CHECK_CUDA(cudaEventRecord(s.done, stream_));
}

void CudaBackend::copy_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  DT_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::fill(float* p, float value, std::size_t n) { launch_fill(stream_, p, value, n); }

void CudaBackend::scale(float* p, float alpha, std::size_t n) {
  launch_scale(stream_, p, alpha, n);
}

void CudaBackend::zero(void* p, std::size_t bytes) {
  if (bytes != 0) DT_CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, stream_));
}

void CudaBackend::add(void* y, const void* x, std::size_t n, DType t) {
  launch_add(stream_, y, x, n, elem(t));
}

void CudaBackend::add_relu(void* y, const void* a, const void* b, std::size_t n, DType t,
                           ActivationOp& /*relu: one fused kernel instead*/) {
  launch_add_relu(stream_, y, a, b, n, elem(t));
}

void CudaBackend::relu_backward_fanout(const void* y, const void* dy, void* dx0, void* dx1,
                                       std::size_t n, DType t, ActivationOp& /*relu*/) {
  if (dx0 == nullptr) std::swap(dx0, dx1);
  if (dx0 != nullptr) launch_relu_backward_fanout(stream_, y, dy, dx0, dx1, n, elem(t));
}

void CudaBackend::cast(const void* x, DType from, void* y, DType to, std::size_t n) {
  launch_cast(stream_, x, elem(from), y, elem(to), n);
}

void CudaBackend::copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                          std::size_t width, std::size_t rows) {
  if (width == 0 || rows == 0) return;
  DT_CHECK_CUDA(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows,
                                  cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::convert_layout(const void* x, void* y, const Shape& s, Layout to, DType t) {
  // Per sample, NCHW is a C×(H·W) matrix and NHWC its transpose: our tiled transpose, the same
  // for fp32 and bf16 (cudnnTransformTensor's bf16 support is not documented).
  const int hw = s.h * s.w;
  if (to == Layout::nhwc) launch_transpose(stream_, x, y, s.n, s.c, hw, elem(t));
  else launch_transpose(stream_, x, y, s.n, hw, s.c, elem(t));
}

void CudaBackend::normalize_uint8(const std::uint8_t* x, const float* lut, void* y, const Shape& s,
                                  Layout to, DType t) {
  check_normalize_uint8(s);
  launch_normalize_uint8(stream_, x, lut, y, s.n, s.c,
                         static_cast<std::size_t>(s.h) * static_cast<std::size_t>(s.w),
                         to == Layout::nhwc, elem(t));
}

bool CudaBackend::all_finite(const float* p, std::size_t n) {
  if (n == 0) return true;
  DT_CHECK_CUDA(cudaMemsetAsync(flag_.get(), 0, sizeof(int), stream_));
  launch_nonfinite_flag(stream_, p, n, flag_.as<int>());
  DT_CHECK_CUDA(
      cudaMemcpyAsync(flag_host_.get(), flag_.get(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
  DT_CHECK_CUDA(cudaStreamSynchronize(stream_));
  return *flag_host_.as<int>() == 0;
}

void CudaBackend::synchronize() { DT_CHECK_CUDA(cudaStreamSynchronize(stream_)); }

void CudaBackend::set_math(MathMode mode) {
  if (mode == MathMode::tf32 && cc_ < 80)
    throw InputError(format_error("--math tf32 needs compute capability 8.0 or newer; " + name_ +
                                      " has " + std::to_string(cc_ / 10) + "." +
                                      std::to_string(cc_ % 10) + " (use --math fp32)",
                                  __FILE__, __LINE__));
  Backend::set_math(mode);
  DT_CHECK_CUBLAS(cublasSetMathMode(cublas_, mode == MathMode::tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                    : CUBLAS_DEFAULT_MATH));
}

void CudaBackend::set_precision(Precision p) {
  if (p == Precision::bf16 && cc_ < 80)
    throw InputError(format_error("--precision bf16 needs compute capability 8.0 or newer; " +
                                      name_ + " has " + std::to_string(cc_ / 10) + "." +
                                      std::to_string(cc_ % 10) + " (use --precision fp32)",
                                  __FILE__, __LINE__));
  Backend::set_precision(p);
}

void CudaBackend::set_profiling(bool on) {
  if (on) {
    DT_CHECK_CUDA(cudaProfilerStart());
  } else {
    DT_CHECK_CUDA(cudaStreamSynchronize(stream_));  // the window's work is done, not just queued
    DT_CHECK_CUDA(cudaProfilerStop());
  }
}

void CudaBackend::check_after(const std::string& what) {
  if (!debug_sync()) return;
  const cudaError_t e = cudaStreamSynchronize(stream_);
  const cudaError_t last = e != cudaSuccess ? e : cudaGetLastError();
  if (last != cudaSuccess)
    throw LibraryError(format_error("CUDA error after " + what + " on " + name_ + ": " +
                                        cudaGetErrorName(last) + " (" + cudaGetErrorString(last) +
                                        ")",
                                    __FILE__, __LINE__));
}

void CudaBackend::reserve_workspace(std::size_t bytes) {
  if (bytes <= workspace_bytes_) return;
  // The old buffer may still be read by queued work: wait before freeing it.
  DT_CHECK_CUDA(cudaStreamSynchronize(stream_));
  ++generation_;  // a graph captured before holds the old address
  workspace_ = DeviceMemory();
  workspace_bytes_ = 0;
  workspace_ = DeviceMemory::create(bytes);
  workspace_bytes_ = bytes;
}

std::unique_ptr<StepGraph> CudaBackend::make_step_graph() { return make_cuda_step_graph(*this); }

const std::uint64_t* CudaBackend::set_step_seed(std::uint64_t seed) {
  launch_store_u64(stream_, step_seed_.as<std::uint64_t>(), seed);
  return step_seed_.as<std::uint64_t>();
}

void CudaBackend::check_gradient(const float* g, std::size_t n) {
  DT_REQUIRE(checks_ < kMaxPendingChecks,
             "check_gradient: " + std::to_string(checks_) + " earlier answers are still unread");
  const int slot = (check_first_ + checks_) % kMaxPendingChecks;
  auto* dev = check_dev_.as<unsigned long long>() + slot;
  DT_CHECK_CUDA(cudaMemsetAsync(dev, 0xff, sizeof *dev, stream_));  // kNoIndex
  launch_first_nonfinite(stream_, g, n, dev);
  DT_CHECK_CUDA(cudaMemcpyAsync(check_host_.as<unsigned long long>() + slot, dev, sizeof *dev,
                                cudaMemcpyDeviceToHost, stream_));
  DT_CHECK_CUDA(cudaEventRecord(check_done_[slot].get(), stream_));
  guard_ = dev;
  ++checks_;
}

void CudaBackend::mark(int i) {
  require_mark(i);
  if (!marks_[i]) marks_[i] = Event::create_timed();
  DT_CHECK_CUDA(cudaEventRecord(marks_[i].get(), stream_));
  marked_[i] = true;
}

double CudaBackend::seconds_between(int a, int b) {
  require_mark(a);
  require_mark(b);
  DT_REQUIRE(marked_[a] && marked_[b], "seconds_between: stopwatch point " + std::to_string(a) +
                                           " or " + std::to_string(b) + " was not recorded");
  DT_CHECK_CUDA(cudaEventSynchronize(marks_[b].get()));
  float ms = 0.0f;
  DT_CHECK_CUDA(cudaEventElapsedTime(&ms, marks_[a].get(), marks_[b].get()));
  return 1e-3 * ms;
}

std::optional<std::size_t> CudaBackend::take_gradient_check() {
  DT_REQUIRE(checks_ > 0, "take_gradient_check: no check_gradient answer is unread");
  const int slot = check_first_;
  DT_CHECK_CUDA(cudaEventSynchronize(check_done_[slot].get()));
  const unsigned long long first = check_host_.as<unsigned long long>()[slot];
  check_first_ = (check_first_ + 1) % kMaxPendingChecks;
  --checks_;
  if (first == kNoIndex) return std::nullopt;
  return static_cast<std::size_t>(first);
}

bool CudaBackend::optimizer_update(const OptimizerUpdate& u, float* p, const float* g, float* m,
                                   float* v, std::size_t n) {
  // After check_gradient() the device skips the update itself (no host read-back); otherwise a
  // separate finiteness pass, read back.
  const bool finite = guard_ != nullptr || all_finite(g, n);
  OptimizerParams k;
  switch (u.kind) {
    case OptimizerKind::sgd:
      k.kind = 0;
      break;
    case OptimizerKind::momentum:
      k.kind = 1;
      break;
    case OptimizerKind::adam:
      k.kind = 2;
      break;
    case OptimizerKind::lars:
    case OptimizerKind::lamb:
      throw InputError("optimizer_update: lars and lamb need each tensor's range "
                       "(layerwise_update)");
  }
  DT_ASSERT(k.kind == 0 || m != nullptr, "optimizer_update: momentum/adam need state m");
  DT_ASSERT(k.kind != 2 || v != nullptr, "optimizer_update: adam needs state v");
  k.lr = u.lr;
  k.momentum = u.momentum;
  k.nesterov = u.nesterov ? 1 : 0;
  k.beta1 = u.beta1;
  k.beta2 = u.beta2;
  k.epsilon = u.epsilon;
  k.weight_decay = u.weight_decay;
  if (k.kind == 2) {
    DT_REQUIRE(u.step >= 1, "adam: step must be >= 1, got " + std::to_string(u.step));
    const double t = static_cast<double>(u.step);
    const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(u.beta1), t));
    k.step_size = u.lr / bc1;
    k.inv_sqrt_bc2 =
        static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(static_cast<double>(u.beta2), t)));
  }
  launch_optimizer_update(stream_, k, p, g, m, v, n, guard_);
  return finite;
}

std::unique_ptr<ConvOp> CudaBackend::make_conv(const ConvDesc& d) {
  return make_cuda_conv(*this, d);
}
std::unique_ptr<PoolOp> CudaBackend::make_pool(const PoolDesc& d) {
  return make_cuda_pool(*this, d);
}
std::unique_ptr<ActivationOp> CudaBackend::make_activation(ActKind kind, const Shape& shape) {
  return make_cuda_activation(*this, kind, shape);
}
std::unique_ptr<BatchNormOp> CudaBackend::make_batchnorm(const BatchNormDesc& d) {
  return make_cuda_batchnorm(*this, d);
}
std::unique_ptr<DenseOp> CudaBackend::make_dense(const DenseDesc& d) {
  return make_cuda_dense(*this, d);
}
std::unique_ptr<DropoutOp> CudaBackend::make_dropout(const Shape& shape, float p) {
  return make_cuda_dropout(*this, shape, p);
}
std::unique_ptr<SoftmaxXentOp> CudaBackend::make_softmax_xent(int batch, int classes) {
  return make_cuda_softmax_xent(*this, batch, classes, label_smoothing());
}

CudaBackend& as_cuda_backend(Backend& backend) {
  auto* cb = dynamic_cast<CudaBackend*>(&backend);
  if (cb == nullptr)
    throw Error(format_error("the NCCL allreduce needs the CUDA backend, but the backend is " +
                                 backend.name() + " (use --device cuda, or --allreduce mpi)",
                             __FILE__, __LINE__));
  return *cb;
}

}  // namespace cuda
}  // namespace dtrain
