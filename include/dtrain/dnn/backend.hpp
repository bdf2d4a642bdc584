// dtrain/dnn/backend.hpp — the small compute-backend interface behind every layer.
//
// A Backend owns memory on one device and creates *ops*: objects built once for one shape (oneDNN
// primitives / cuDNN descriptors + algorithm choice + workspace) and then executed every step with
// no allocation. Layers hold ops; the model never calls a library directly. Implementations:
// CpuBackend (oneDNN, src/dnn/onednn) and CudaBackend (cuDNN + cuBLAS, src/dnn/cuda).
//
// The conventions every op follows (pointers, dtypes, layouts, overwriting backward, errors):
// dnn/ops.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/dnn/ops.hpp"

namespace dtrain {

class Backend {
 public:
  virtual ~Backend() = default;
  /// Where this backend's buffers live and its ops run: Device::cpu or Device::cuda.
  [[nodiscard]] virtual Device device() const = 0;
  /// "cpu (oneDNN 2.6.3)" or "cuda:0 (NVIDIA H100, cuDNN 9.x)"; a CPU backend that has made
  /// bf16 ops adds how many of the ops made so far (by every model on it, for every batch size)
  /// run on oneDNN's bf16 kernels and how many are emulated (CpuBf16):
  /// "cpu (oneDNN 2.6.3; bf16: 53 ops on oneDNN's bf16 kernels, 2 emulated)".
  [[nodiscard]] virtual std::string name() const = 0;

  /// Device memory, 64-byte aligned; zero-filled. Throws LibraryError when out of memory.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;
  /// Host memory for staging transfers to/from this device (pinned on CUDA, 64-byte aligned
  /// malloc on CPU); zero-filled. Used for MPI traffic (Debian's Open MPI is not CUDA-aware).
  /// Throws LibraryError when the allocation fails.
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void deallocate_host(void* p) noexcept = 0;
  /// Copies between host and this device (bytes). Host buffers may be pageable or pinned.
  virtual void copy_to_device(void* dst, const void* host_src, std::size_t bytes) = 0;
  /// Copies `bytes` bytes from device src to host_dst; on CUDA waits for the queued work first,
  /// so host_dst holds the data when it returns.
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
  /// Copies `bytes` bytes between two device buffers (queued on the stream on CUDA).
  virtual void copy_device(void* dst, const void* src, std::size_t bytes) = 0;
  /// Host-to-device copy that need not finish before it returns (the training batch): the CUDA
  /// backend copies host_src into one of two pinned staging buffers and queues the DMA on its
  /// stream, so later work on the stream sees the data and the host does not wait for the GPU to
  /// drain; the CPU backend copies at once. host_src may be reused when it returns.
  virtual void upload(void* dst, const void* host_src, std::size_t bytes) {
    copy_to_device(dst, host_src, bytes);
  }
  /// p[i] = value for i < n.
  virtual void fill(float* p, float value, std::size_t n) = 0;
  /// p[i] *= alpha for i < n.
  virtual void scale(float* p, float alpha, std::size_t n) = 0;
  /// Sets `bytes` bytes at p to zero (0.0 in f32 and bf16 alike).
  virtual void zero(void* p, std::size_t bytes) = 0;
  /// y[i] += x[i] for i < n elements of type t (x == y allowed; bf16: the sum is computed in fp32
  /// and rounded). Residual sums and the accumulation of activation gradients.
  virtual void add(void* y, const void* x, std::size_t n, DType t) = 0;
  /// y[i] = max(a[i] + b[i], 0) for i < n elements of type t (y may alias a or b; bf16: the sum
  /// rounded, then the max, which equals add() followed by `relu` bit for bit). The end of a
  /// residual block. Default: copy_device, add() and relu.forward (a relu ActivationOp over at
  /// least n elements); the CUDA backend does it in one pass.
  virtual void add_relu(void* y, const void* a, const void* b, std::size_t n, DType t,
                        ActivationOp& relu);
  /// The backward of add_relu: dx0[i] = dx1[i] = (y[i] > 0 ? dy[i] : 0) from add_relu's output y;
  /// dx0 or dx1 may be nullptr (no gradient wanted). Default: relu.backward then copy_device; the
  /// CUDA backend writes both in one pass.
  virtual void relu_backward_fanout(const void* y, const void* dy, void* dx0, void* dx1,
                                    std::size_t n, DType t, ActivationOp& relu);
  /// y[i] = x[i] converted from `from` to `to` for i < n (f32 → bf16 rounds to nearest even;
  /// bf16 → f32 is exact; equal types copy). x and y must not overlap.
  virtual void cast(const void* x, DType from, void* y, DType to, std::size_t n) = 0;
  /// Strided block copy (cudaMemcpy2D's arguments): for r < rows, copies `width` bytes from
  /// src + r·src_pitch to dst + r·dst_pitch (pitches in bytes; blocks must not overlap). Channel
  /// concatenation and zero-padding of N×C×H×W tensors (cudaMemcpy2DAsync on CUDA).
  virtual void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                       std::size_t width, std::size_t rows) = 0;
  /// y = x converted from the other layout to `to` (see Layout): x holds a tensor of logical
  /// shape s (N×C×H×W) of elements of type t in the layout that is not `to`; y receives it in
  /// `to`. x and y must not overlap. oneDNN's reorder on the CPU, a tiled transpose kernel on CUDA.
  virtual void convert_layout(const void* x, void* y, const Shape& s, Layout to, DType t) = 0;
  /// y = the uint8 batch x normalized through a per-channel table, stored as the first layer
  /// reads it: x holds s.n samples, n×C×H×W uint8 in NCHW order (HostBatch::raw); lut is C×256
  /// fp32, io/dataset.hpp's uint8_lut() of the file (entry c·256 + b = (b/255 − mean[c])/std[c]);
  /// with p = h·W + w and HW = H·W, sample i's value at (c, p) is v = lut[c·256 + x[(i·C + c)·HW
  /// + p]], written to y (n×C×H×W elements of type t) at
  ///   (i·C + c)·HW + p   for to = nchw,      (i·HW + p)·C + c   for to = nhwc,
  /// as fp32 for t = f32 and rounded to the nearest bf16 (ties to even, float_to_bf16 /
  /// __float2bfloat16_rn) for t = bf16. A lookup and at most one rounding, so y equals bit for
  /// bit the host reader's normalized batch followed by convert_layout(…, to, f32) (when `to` is
  /// nhwc) and cast(…, f32, …, t, …) (when t is bf16) — the three passes, and their fp32
  /// intermediate, the GPU's input path would otherwise make (model/model.hpp InputForm). Only a
  /// quarter of a float batch's bytes cross PCIe. x, lut, y are this backend's pointers and must
  /// not overlap. Default (the CPU backend, and the tests' reference): a host loop; CUDA: one
  /// kernel, queued. Throws InputError for a bad shape (check_normalize_uint8), and on CUDA for an
  /// NHWC y of more than 48 KiB a pixel (12,288 fp32 or 24,576 bf16 channels).
  virtual void normalize_uint8(const std::uint8_t* x, const float* lut, void* y, const Shape& s,
                               Layout to, DType t);
  /// Returns true when every p[i], i < n, is finite.
  virtual bool all_finite(const float* p, std::size_t n) = 0;
  /// Waits for all work queued on this backend.
  virtual void synchronize() = 0;
  /// The most device memory this process's allocations held at once (bytes): on CUDA every
  /// cudaMalloc dtrain made (parameters, activation arena, workspaces, op buffers; not the CUDA
  /// context nor cuDNN's and cuBLAS's own), as torch.cuda.max_memory_allocated; 0 on the CPU.
  [[nodiscard]] virtual std::size_t device_peak_bytes() const { return 0; }

  /// Stopwatch points (mark()).
  static constexpr int kMarks = 4;
  /// Records stopwatch point i (0 ≤ i < kMarks, overwriting it) where this backend's queue stands
  /// now: a CUDA event on the stream, so that device time is measured without waiting for the
  /// device (the trainer reads a step's compute time one step late); the CPU backend, whose calls
  /// are synchronous, takes the host clock. Throws InputError for i outside [0, kMarks), and
  /// LibraryError if the CUDA event call fails.
  virtual void mark(int i);
  /// Seconds of the queue between points a and b (b recorded after a), once point b is reached
  /// (waits for it on a GPU). Throws InputError for an index outside [0, kMarks) or a point not
  /// recorded, and LibraryError if a CUDA event call fails.
  virtual double seconds_between(int a, int b);
  /// Throws InputError unless 0 ≤ i < kMarks (mark() and seconds_between() of every backend).
  static void require_mark(int i);

  // The op factories below build an op for one shape in this backend's current layout, precision
  // and math (oneDNN primitives on the CPU, cuDNN/cuBLAS descriptors and kernels on CUDA). Each
  // throws InputError for the arguments named and LibraryError when oneDNN, CUDA, cuDNN or cuBLAS
  // fails to build it.
  /// A convolution; InputError from d.output() (input not positive, out_channels < 1, kernel or
  /// stride < 1, pad < 0, kernel larger than the padded input).
  virtual std::unique_ptr<ConvOp> make_conv(const ConvDesc& d) = 0;
  /// A max or average pooling; InputError from d.output() (input not positive, kernel or stride
  /// < 1, pad < 0 or more than half the kernel, window larger than the padded input).
  virtual std::unique_ptr<PoolOp> make_pool(const PoolDesc& d) = 0;
  /// An elementwise relu or sigmoid over `shape`; InputError when shape.count() is 0.
  virtual std::unique_ptr<ActivationOp> make_activation(ActKind kind, const Shape& shape) = 0;
  /// A spatial batchnorm; InputError unless every dimension of d.input ≥ 1, d.epsilon > 0 (and
  /// ≥ CUDNN_BN_MIN_EPSILON on CUDA) and d.momentum ∈ [0, 1].
  virtual std::unique_ptr<BatchNormOp> make_batchnorm(const BatchNormDesc& d) = 0;
  /// A fully connected layer; InputError unless batch, inputs and outputs are ≥ 1.
  virtual std::unique_ptr<DenseOp> make_dense(const DenseDesc& d) = 0;
  /// Inverted dropout of rate p over `shape`; InputError unless p ∈ [0, 1) and shape.count() > 0.
  virtual std::unique_ptr<DropoutOp> make_dropout(const Shape& shape, float p) = 0;
  /// Softmax cross-entropy for batches of up to `batch` samples of `classes` logits, with
  /// label_smoothing(); InputError from check_softmax_xent().
  virtual std::unique_ptr<SoftmaxXentOp> make_softmax_xent(int batch, int classes) = 0;
  /// Label smoothing ε ∈ [0, 1) of the softmax cross-entropy ops made after this call
  /// (--label-smoothing; see SoftmaxXentOp). Set before the model is built.
  void set_label_smoothing(float epsilon) { label_smoothing_ = epsilon; }
  [[nodiscard]] float label_smoothing() const { return label_smoothing_; }
  /// Math of the convolution and dense ops made after this call (see MathMode; default fp32).
  /// Throws InputError for tf32 on a GPU older than compute capability 8.0.
  virtual void set_math(MathMode mode) { math_ = mode; }
  /// How the convolution ops made after this call choose their algorithms on a GPU: false
  /// (default) cuDNN's heuristics, no cost; true: every algorithm timed once per problem when the
  /// op is made (cudnnFind*Algorithm; PyTorch's torch.backends.cudnn.benchmark = True,
  /// TensorFlow's cuDNN autotuning) — seconds at start-up, the fastest kernels on this GPU, which
  /// may then differ between runs and ranks. Ignored by the CPU backend (oneDNN picks its own).
  void set_cudnn_benchmark(bool on) { cudnn_benchmark_ = on; }
  [[nodiscard]] bool cudnn_benchmark() const { return cudnn_benchmark_; }
  /// How the GPU convolution ops made after this call reach cuDNN (ConvApi; default legacy):
  /// graph runs each direction through cuDNN's graph API where an engine qualifies (with
  /// cudnn_benchmark(), the fastest of the first 8 timed, unless the timed legacy algorithm is
  /// faster), the legacy call elsewhere. Ignored by the CPU backend.
  void set_conv_api(ConvApi api) { conv_api_ = api; }
  [[nodiscard]] ConvApi conv_api() const { return conv_api_; }
  /// Whether models built on this backend fuse a relu into the layer before it where that layer
  /// has a fused form (add → add_relu; batchnorm and convolution → the op's enable_relu()) and
  /// let convolutions add their input gradient in place (ConvOp::set_accumulate_dx): --fuse auto
  /// (true, the default) | off (false: every layer runs alone, the parity reference). Set before
  /// the model is built. Results are identical either way except where a fused kernel rounds
  /// once instead of twice (bf16 gradient sums).
  void set_fuse(bool on) { fuse_ = on; }
  /// Whether GPU convolutions prefer cuDNN's deterministic algorithms (bit-reproducible runs on
  /// the same GPU; PyTorch's torch.backends.cudnn.deterministic = True) over the first one cuDNN
  /// ranks. Default false, as PyTorch. Set before the model is built; ignored by the CPU backend.
  void set_deterministic(bool on) { deterministic_ = on; }
  [[nodiscard]] bool deterministic() const { return deterministic_; }
  /// The most workspace one GPU convolution algorithm may use, in MiB (0: the backend's default,
  /// 512 MiB on CUDA); cuDNN's faster algorithms for large activations may need more. Set before
  /// the model is built; ignored by the CPU backend.
  void set_conv_workspace_mb(std::size_t mb) { conv_workspace_mb_ = mb; }
  [[nodiscard]] std::size_t conv_workspace_mb() const { return conv_workspace_mb_; }
  [[nodiscard]] bool fuse() const { return fuse_; }
  /// Whether set_math(MathMode::tf32) is possible (a GPU of compute capability ≥ 8.0).
  [[nodiscard]] virtual bool supports_tf32() const { return false; }
  [[nodiscard]] MathMode math() const { return math_; }
  /// Precision of the ops and layers made after this call (see Precision; default fp32). Set
  /// before the model is built. Throws InputError where the backend cannot run it (bf16 on a GPU
  /// older than compute capability 8.0).
  virtual void set_precision(Precision p) { precision_ = p; }
  [[nodiscard]] Precision precision() const { return precision_; }
  /// The element type of activations: act_dtype_of(precision()).
  [[nodiscard]] DType act_dtype() const { return act_dtype_of(precision_); }
  /// Bytes of one activation element (4 or 2).
  [[nodiscard]] std::size_t act_size() const { return dtype_size(act_dtype()); }
  /// Layout of the activations of the conv, pool, activation and batchnorm ops made after this
  /// call, and of the layers built on this backend (see Layout; default nchw). Set before the
  /// model is built.
  void set_layout(Layout layout) { layout_ = layout; }
  [[nodiscard]] Layout layout() const { return layout_; }
  /// Whether a tensor of shape s is stored otherwise than its NCHW order on this backend (NHWC
  /// and layouts_differ(s)): where a flat NCHW reader or writer must convert.
  [[nodiscard]] bool differs_from_nchw(const Shape& s) const {
    return layout_ == Layout::nhwc && layouts_differ(s);
  }

  /// Profiler range (--profile-steps): on → cudaProfilerStart, off → cudaProfilerStop on the
  /// CUDA backend, so that Nsight Systems (`nsys profile --capture-range=cudaProfilerApi`) and
  /// Nsight Compute (`ncu --profile-from-start off`) record only the work queued in between. A
  /// no-op on the CPU backend. Throws LibraryError if the CUDA call fails.
  virtual void set_profiling(bool on) { (void)on; }

  /// CUDA graphs (--cuda-graph, model/step_graphs.hpp). A graph of this backend's work, or
  /// nullptr where there are none (the CPU backend).
  [[nodiscard]] virtual std::unique_ptr<StepGraph> make_step_graph() { return nullptr; }
  /// Queues a write of `seed` into a device word that dropout reads at run time (DropoutKey) and
  /// returns that word; the next call overwrites it, in stream order. nullptr (the CPU backend,
  /// which does nothing): dropout takes its key by value. Not inside a capture: the write is the
  /// per-step input of the graph. Throws LibraryError if the launch fails.
  virtual const std::uint64_t* set_step_seed(std::uint64_t seed) {
    (void)seed;
    return nullptr;
  }
  /// Counts the moves of buffers the backend shares between ops (the convolution workspace grows
  /// when a later op needs more): a graph captured at another count holds freed addresses.
  [[nodiscard]] virtual std::uint64_t buffers_generation() const { return 0; }

  /// Debug aid (--debug-sync, or DTRAIN_DEBUG_SYNC=1 in the environment on the CUDA backend):
  /// when on, the model calls check_after() after every layer's forward and backward, which waits
  /// for the device and turns a pending asynchronous fault (an illegal address in a kernel) into a
  /// LibraryError naming that layer — instead of the fault surfacing at the next copy or inside
  /// the NCCL wait, which then gets the blame. Costs one host synchronization per layer.
  void set_debug_sync(bool on) { debug_sync_ = on; }
  [[nodiscard]] bool debug_sync() const { return debug_sync_; }
  /// With debug_sync(): waits for the queued work and throws LibraryError "CUDA error after WHAT:
  /// ..." if it failed. A no-op on the CPU backend (its calls are synchronous).
  virtual void check_after(const std::string& what) { (void)what; }

  /// One optimizer step over n parameters: p, g, and state m, v (each n floats; m unused by sgd,
  /// v used only by adam; may be nullptr when unused). g is not modified. Returns whether every
  /// g value was finite; the update is applied either way (a caller that would skip a
  /// non-finite step checks all_finite() first; one that stops the run reads this and saves a
  /// pass over g — the CPU backend reads it in the update's own loop) — unless a
  /// check_gradient() came before: then the update leaves p, m and v unchanged when the latest
  /// check found a non-finite value (the CPU returns false; the GPU, which does not wait for the
  /// answer, returns true: take_gradient_check() tells). Throws Error when m (momentum, Adam) or
  /// v (Adam) is missing, InputError for Adam with u.step < 1, LibraryError on a failed CUDA call.
  virtual bool optimizer_update(const OptimizerUpdate& u, float* p, const float* g, float* m,
                                float* v, std::size_t n) = 0;
  /// optimizer_update(), after which g[0, n) holds the updated p[0, n) (the same bits): an async
  /// ps replies from the buffer a push's chunk arrived in instead of from p, so a worker's copy
  /// of the reply never reads p — whose cache lines the next update would otherwise first have to
  /// take back from that worker's core (tests/benchmarks/ps_update_bench.cpp --cross-core). The
  /// CPU backend writes g in the update's own loop; this default copies p afterwards.
  virtual bool optimizer_update_into_grad(const OptimizerUpdate& u, float* p, float* g, float* m,
                                          float* v, std::size_t n);

  /// One LARS or LAMB step (u.kind) over the tensors `segments`, which cover [0, n) in order
  /// (n = segments.back().end), each tensor's norms taken over its whole range. With g' = g + wd·p
  /// on adapted tensors (wd = 0 and trust 1 on the others):
  ///   lars (You, Gitman, Ginsburg 2017, in torchlars/apex LARC's arrangement): trust
  ///     t = η‖p‖/(‖g‖ + wd‖p‖ + lars_epsilon) (1 when ‖p‖ or ‖g‖ is 0); m = μ·m + t·g',
  ///     p −= lr·(nesterov ? t·g' + μ·m : m).
  ///   lamb (You et al. 2020, Algorithm 2 with φ = identity): m = β1·m + (1−β1)·g,
  ///     v = β2·v + (1−β2)·g², r = m̂/(√v̂ + ε) + wd·p (m̂, v̂ bias-corrected with u.step),
  ///     t = ‖p‖/‖r‖ (1 when either is 0), p −= lr·t·r.
  /// Norms accumulate in double in an order fixed by the segments alone, so the result does not
  /// depend on the thread count or the GPU's scheduling (sync replicas stay bit-identical). CPU:
  /// one tensor per OpenMP task, its squares summed in index order. CUDA: every tensor cut into
  /// chunks of 8,192 floats; one launch sums each chunk's squares (a fixed tree over a block's
  /// threads), a second adds each tensor's chunk sums in chunk order, forms its trust ratio and
  /// updates it (apex's multi-tensor arrangement: two launches per step whatever the tensor
  /// count, no host synchronization after a check_gradient()); the elementwise float arithmetic
  /// is the CPU's, operation by operation, so the two backends differ only where the double sums'
  /// last bits round the trust ratio differently (relative 1e-5 at most in tests). p, g, m (and v
  /// for lamb) are device pointers of n floats. Returns whether every g was finite (the update is
  /// applied either way, unless a check_gradient() found a non-finite value: then nothing
  /// changes, and the GPU returns true, as optimizer_update()). Throws InputError for another
  /// u.kind, lamb with u.step < 1, segments that are empty, not contiguous from 0, or empty ones;
  /// Error when m or (lamb) v is missing; LibraryError on a failed CUDA call. The default (a
  /// backend without the rules) throws InputError naming the backend.
  virtual bool layerwise_update(const OptimizerUpdate& u, const std::vector<ParamSegment>& segments,
                                float* p, const float* g, float* m, float* v);

  /// Unread check_gradient() answers allowed at a time.
  static constexpr int kMaxPendingChecks = 2;
  /// A gradient check that does not stall the device (the all-finite guard of PyTorch's fused
  /// optimizers, found_inf, and of TensorFlow's LossScaleOptimizer): queues a search of g[0, n)
  /// (fp32) for its first non-finite value and returns; the optimizer_update() calls after it,
  /// until the next check, change nothing if the search finds one. Its answer is read later, in
  /// order, with take_gradient_check() — a GPU step then needs no host synchronization, and the
  /// trainer reads each step's answer one step late. The CPU backend searches at once. Throws
  /// InputError when kMaxPendingChecks answers are unread (LibraryError on a failed CUDA call).
  virtual void check_gradient(const float* g, std::size_t n) = 0;
  /// The answer of the oldest unread check_gradient(): the index of the first non-finite value,
  /// or std::nullopt when every value was finite. Waits for the device if the search has not
  /// finished. Throws InputError when no answer is unread (LibraryError on a failed CUDA call).
  virtual std::optional<std::size_t> take_gradient_check() = 0;

 private:
  float label_smoothing_ = 0.0f;
  MathMode math_ = MathMode::fp32;
  bool cudnn_benchmark_ = false;
  ConvApi conv_api_ = ConvApi::legacy;
  bool fuse_ = true;
  bool deterministic_ = false;
  std::size_t conv_workspace_mb_ = 0;
  Precision precision_ = Precision::fp32;
  Layout layout_ = Layout::nchw;
  bool debug_sync_ = false;
  double host_marks_[kMarks] = {-1, -1, -1, -1};  ///< mark(): host clock of the points
};

/// How the CPU backend runs Precision::bf16. native: each op on oneDNN's bf16 kernels where oneDNN
/// has non-reference ones for this CPU — made for AVX512_BF16 and AMX (oneDNN's avx512_core_bf16
/// ISA and later: Cooper Lake, Sapphire Rapids, Zen 4; as PyTorch's CPU autocast); on an AVX-512
/// CPU without them oneDNN's bf16 kernels emulate those instructions, possibly slower than fp32
/// — and the emulation below for the rest: dropout and the loss always, batchnorm where oneDNN
/// has only its plain-loop kernels (NCHW, or NHWC with C not a multiple of 16), every op on a CPU
/// without AVX-512 (oneDNN 2.6 has no bf16 primitives there). emulated: every op
/// under the emulation (fp32 kernels on bf16-rounded tensors, src/dnn/bf16_emulation.hpp) — the
/// reference the CUDA bf16 path is tested against.
enum class CpuBf16 { native, emulated };

/// The oneDNN CPU backend (always available). Throws LibraryError when oneDNN cannot make its
/// engine.
std::unique_ptr<Backend> make_cpu_backend(CpuBf16 bf16 = CpuBf16::native);

/// True when dtrain was built with CUDA and at least one GPU is visible.
bool cuda_available();
/// Number of visible GPUs (0 when built without CUDA or no driver).
int cuda_device_count();
/// Why no GPU can be used: "" when cuda_device_count() > 0, else "dtrain was built without CUDA"
/// or the CUDA runtime's own error of cudaGetDeviceCount (e.g. "cudaGetDeviceCount:
/// cudaErrorInsufficientDriver (CUDA driver version is insufficient for CUDA runtime version)").
/// Never throws.
std::string cuda_unavailable_reason();
/// The cuDNN/cuBLAS backend on GPU `device`. Throws Error when built without CUDA; in a CUDA build,
/// InputError when no GPU is visible or `device` is outside [0, cuda_device_count()), and
/// LibraryError when a CUDA, cuDNN or cuBLAS set-up call fails.
std::unique_ptr<Backend> make_cuda_backend(int device);

/// The GPU a rank should use, from its node-local rank (MPI_COMM_TYPE_SHARED rank) and the number
/// of ranks on its node: local_rank % G, with G = cuda_device_count(). Several ranks per GPU are
/// allowed only with `allow_sharing` (`--allow-gpu-sharing`; such runs must use `--allreduce mpi`,
/// since NCCL rejects two ranks on one GPU).
/// Throws Error when built without CUDA or when no GPU is visible, and InputError
/// "N ranks on this node but only G GPUs; pass --allow-gpu-sharing" when local_size > G and
/// !allow_sharing.
int select_gpu_for_local_rank(int local_rank, int local_size, bool allow_sharing);

/// RAII owner of a backend allocation of `count` elements of T (non-copyable, movable), or a
/// borrowed view (borrow()).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// `count` elements from be.allocate() (none when count is 0); throws as be.allocate().
  DeviceBuffer(Backend& be, std::size_t count)
      : be_(&be), count_(count),
        ptr_(count ? static_cast<T*>(be.allocate(count * sizeof(T))) : nullptr) {}
  /// A view of `count` elements at `p` that someone else owns and frees (reset() forgets it).
  static DeviceBuffer borrow(T* p, std::size_t count) {
    DeviceBuffer b;
    b.count_ = count;
    b.ptr_ = p;
    return b;
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  /// Frees an owned allocation (a borrowed view is only forgotten); empty afterwards.
  void reset() noexcept {
    if (ptr_ && be_) be_->deallocate(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  [[nodiscard]] T* data() const { return ptr_; }             ///< backend memory; nullptr when empty
  [[nodiscard]] std::size_t size() const { return count_; }  ///< elements
  [[nodiscard]] std::size_t bytes() const { return count_ * sizeof(T); }

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(be_, o.be_);
    std::swap(count_, o.count_);
    std::swap(ptr_, o.ptr_);
  }
  Backend* be_ = nullptr;
  std::size_t count_ = 0;
  T* ptr_ = nullptr;
};

}  // namespace dtrain
