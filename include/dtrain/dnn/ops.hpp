// dtrain/dnn/ops.hpp — what a compute backend (dnn/backend.hpp) works with: devices, dtypes,
// precisions and layouts, the descriptors of the ops it makes (convolution, pooling, activation,
// batch normalization, dense, dropout, the loss), the op interfaces the layers call every step, and
// the optimizer update's hyper-parameters.
//
// Conventions for every op:
// - Pointers are device pointers of the backend that made the op (host pointers for the CPU
//   backend). Activations — the tensors between layers and their gradients, typed `void*` — hold
//   elements of the backend's act_dtype() (fp32, or bf16 under set_precision(Precision::bf16)),
//   N×C×H×W shapes (see tensor/shape.hpp) stored in the backend's layout() (NCHW unless
//   set_layout(Layout::nhwc)). Parameters, their gradients and optimizer state — typed `float*` —
//   are fp32 in a fixed layout whatever the precision and layout (the fp32 master weights of mixed
//   precision). Ops never take ownership.
// - backward() *overwrites* parameter gradients (dW, db) — no accumulation — and overwrites dx.
// - Calls are asynchronous with respect to the host on the CUDA backend (one stream per backend);
//   synchronize() waits. The CPU backend is synchronous.
// - Errors: dtrain::InputError for impossible shapes at creation, dtrain::LibraryError on a failed
//   library call. Ops are not thread-safe; one backend is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dtrain/core/options.hpp"  // Precision, OptimizerKind (the options' enums)
#include "dtrain/tensor/shape.hpp"

namespace dtrain {

enum class Device { cpu, cuda };

/// Floating-point math of convolutions and matrix products on the GPU (--math). fp32:
/// full-precision FMA (cuDNN CUDNN_FMA_MATH, cuBLAS CUBLAS_DEFAULT_MATH; results match the CPU
/// backend to ~1e-6); tf32: tensor cores with TF32 inputs and fp32 accumulation (10-bit mantissa
/// products; PyTorch's torch.backends.cudnn.allow_tf32 / torch.backends.cuda.matmul.allow_tf32),
/// compute capability ≥ 8.0 only. The CPU backend always computes in fp32.
enum class MathMode { fp32, tf32 };

/// Element type of a tensor in memory. f32: IEEE binary32. bf16: bfloat16 — binary32's sign and
/// 8-bit exponent with a 7-bit mantissa (the upper half of an fp32), converted from fp32 with
/// round-to-nearest-even (as torch.Tensor.to(torch.bfloat16), __float2bfloat16_rn).
enum class DType { f32, bf16 };
/// Bytes per element: 4 | 2.
[[nodiscard]] constexpr std::size_t dtype_size(DType t) { return t == DType::bf16 ? 2 : 4; }
/// "f32" | "bf16".
const char* dtype_name(DType t);

/// Precision of the activations (--precision). fp32: everything in fp32. bf16: mixed precision
/// (Micikevicius et al. 2018, with bfloat16 as Kalamkar et al. 2019; PyTorch's
/// torch.autocast(dtype=torch.bfloat16)): activations and their gradients are stored in bf16,
/// convolutions and matrix products read bf16 copies of the fp32 weights (rounded per call),
/// every op accumulates in fp32, batchnorm statistics, the loss and its softmax are computed in
/// fp32, and parameter gradients, the optimizer and everything exchanged or checkpointed stay
/// fp32 (no loss scaling: bf16 has fp32's exponent range). On CUDA the ops run natively in bf16
/// (cuDNN/cuBLAS tensor cores, compute capability ≥ 8.0); so does the CPU backend on AVX-512 CPUs
/// (oneDNN's bf16 kernels, fast with AVX512_BF16 or AMX; CpuBf16: they round at the same places
/// as the emulation, summing in another order). Elsewhere the CPU backend emulates it — it
/// rounds the same tensors to bf16 and computes in fp32 on converted copies — so any CPU runs the
/// same model code and numerics (slower than fp32: a test and reference path). Against the
/// emulation, two differences of at most one bf16 rounding per element remain on CUDA: cuDNN
/// writes a convolution's weight gradient in the filter's type (bf16, as PyTorch's autocast does)
/// before dtrain widens it, and a layer's bias is added to the bf16-rounded product (the
/// emulation, like oneDNN, rounds the sum once). The enum Precision is --precision's
/// (core/options.hpp).
/// "fp32" | "bf16".
const char* precision_name(Precision p);
/// The element type of activations under precision p: f32, or bf16 for Precision::bf16.
[[nodiscard]] constexpr DType act_dtype_of(Precision p) {
  return p == Precision::bf16 ? DType::bf16 : DType::f32;
}

/// Memory layout of the activations — the tensors between layers — on a backend (--layout).
/// The logical shape is N×C×H×W either way; only the order in memory differs:
///   nchw  element (n, c, h, w) at ((n·C + c)·H + h)·W + w (the default; datasets are stored so)
///   nhwc  element (n, c, h, w) at ((n·H + h)·W + w)·C + c ("channels last": PyTorch's
///         torch.channels_last, cuDNN's CUDNN_TENSOR_NHWC — the order tensor-core convolution
///         kernels read, so cuDNN runs them without transposing around each call)
/// Parameters keep one layout whatever the activations use (conv weights K×C×R×S, dense weights
/// O×I over the NCHW flattening of their input), so checkpoints, the ps and allreduce never see it.
/// Where a layer reads a sample as a flat vector (flatten, dense) or the model takes the batch from
/// the data reader, an NHWC tensor is converted (Backend::convert_layout). Dropout draws its mask
/// per memory position, so its masks differ between the layouts (each is a valid dropout mask).
enum class Layout { nchw, nhwc };

/// "nchw" | "nhwc".
const char* layout_name(Layout l);

/// Whether tensors of shape s differ in memory between the two layouts: C > 1 and H·W > 1.
[[nodiscard]] inline bool layouts_differ(const Shape& s) { return s.c > 1 && s.h * s.w > 1; }

/// A pair of sizes along height and width (kernel, stride or padding of a 2-D window). Built from
/// one int for a square window (`Hw(3)` is 3×3), or from two (`Hw{1, 7}` is 1 high, 7 wide).
struct Hw {
  int h = 1;
  int w = 1;
  Hw() = default;
  Hw(int both) : h(both), w(both) {}  // NOLINT(google-explicit-constructor): square by default
  Hw(int h_, int w_) : h(h_), w(w_) {}
  [[nodiscard]] bool square() const { return h == w; }
  /// "3" when square, else "1x7" (the job-file syntax).
  [[nodiscard]] std::string str() const {
    return square() ? std::to_string(h) : std::to_string(h) + "x" + std::to_string(w);
  }
  friend bool operator==(const Hw&, const Hw&) = default;
};

/// 2-D convolution y = conv(x, w) + b, cross-correlation as in cuDNN/oneDNN/PyTorch.
/// x: N×C×H×W, w: K×C×R×S, b: K (absent when !bias), y: N×K×P×Q with
/// P = (H + 2·pad.h − R)/stride.h + 1, Q = (W + 2·pad.w − S)/stride.w + 1.
struct ConvDesc {
  Shape input;           ///< N×C×H×W
  int out_channels = 0;  ///< K
  Hw kernel{3};          ///< R×S
  Hw stride{1};
  Hw pad{0};         ///< zero padding on both sides of each axis
  bool bias = true;  ///< false: y = conv(x, w) (the b pointers are ignored and may be null)
  /// Output shape; throws InputError when the kernel does not fit the (padded) input.
  [[nodiscard]] Shape output() const;
};

class ConvOp {
 public:
  virtual ~ConvOp() = default;
  /// y = conv(x, w) + b (b ignored without bias).
  virtual void forward(const void* x, const float* w, const float* b, void* y) = 0;
  /// dx = conv_bwd_data(dy, w) (skipped when dx == nullptr), dw = conv_bwd_filter(x, dy),
  /// db = Σ dy over N, P, Q (skipped without bias).
  virtual void backward(const void* x, const float* w, const void* dy, void* dx, float* dw,
                        float* db) = 0;
  /// Whether backward can add into dx instead of overwriting it (set_accumulate_dx). The CUDA op
  /// can (cuDNN's β = 1: one pass instead of a scratch gradient and an add); default false.
  [[nodiscard]] virtual bool can_accumulate_dx() const { return false; }
  /// on: later backward calls write dx += conv_bwd_data(dy, w) (the input's gradient from its
  /// other consumers already in dx; bf16: the sum in fp32, rounded once). Only when
  /// can_accumulate_dx(); throws LibraryError otherwise.
  virtual void set_accumulate_dx(bool on);
  /// Fuses the relu that follows (layer fusion, Backend::fuse()): from now on forward writes
  /// y = max(conv(x, w) + b, 0) — the bias and the relu applied inside the convolution (oneDNN's
  /// eltwise_relu post-op; on cuDNN one pass over y) — and backward_relu() replaces backward().
  /// Returns false, changing nothing, where the op has no fused form (the default; a bf16
  /// convolution under the CPU backend's emulation). Calling it again returns true.
  virtual bool enable_relu() { return false; }
  /// After enable_relu(): from the gradient dy of the fused output y (y of the last forward, with
  /// these weights), first dy[i] = (y[i] > 0 ? dy[i] : 0) in place — the relu's gradient, the
  /// pre-activation's, so dy must be a buffer nothing reads afterwards — then dx, dw, db as
  /// backward() from it (cuDNN: the mask applied in the pass that sums db). Throws LibraryError
  /// when enable_relu() did not succeed.
  virtual void backward_relu(const void* x, const void* y, const float* w, void* dy, void* dx,
                             float* dw, float* db);
};

enum class PoolKind { max, avg };

/// 2-D pooling; avg excludes padding (as PyTorch's count_include_pad=False). Global average
/// pooling is avg with kernel = H×W, stride 1, pad 0.
struct PoolDesc {
  Shape input;  ///< N×C×H×W
  PoolKind kind = PoolKind::max;
  Hw kernel{2};
  Hw stride{2};
  Hw pad{0};
  /// N×C×P×Q; throws InputError when the window does not fit.
  [[nodiscard]] Shape output() const;
};

class PoolOp {
 public:
  virtual ~PoolOp() = default;
  /// training=true keeps what backward needs (max indices / workspace) inside the op.
  virtual void forward(const void* x, void* y, bool training) = 0;
  /// dx from dy; must follow a forward(training=true) on the same x.
  virtual void backward(const void* x, const void* y, const void* dy, void* dx) = 0;
};

enum class ActKind { relu, sigmoid };

class ActivationOp {
 public:
  virtual ~ActivationOp() = default;
  /// y = f(x), elementwise over shape.count() elements (x == y allowed: in place).
  virtual void forward(const void* x, void* y) = 0;
  /// dx = f'(x) · dy, computed from y alone (relu: y > 0; sigmoid: y·(1 − y)), so that the
  /// forward may have run in place; x is unused and may equal y.
  virtual void backward(const void* x, const void* y, const void* dy, void* dx) = 0;
};

/// Spatial batch normalization over N, H, W per channel (Ioffe & Szegedy 2015), with learned
/// scale γ and shift β (each C floats) and running mean/variance (each C floats).
struct BatchNormDesc {
  Shape input;  ///< N×C×H×W
  float epsilon = 1e-5f;
  float momentum = 0.1f;  ///< running = (1−momentum)·running + momentum·batch (PyTorch convention)
};

class BatchNormOp {
 public:
  virtual ~BatchNormOp() = default;
  /// Training: normalizes with batch statistics, saves them for backward, and updates
  /// running_mean/running_var in place (running_var uses the unbiased batch variance).
  /// Inference: normalizes with running_mean/running_var.
  virtual void forward(const void* x, const float* gamma, const float* beta, float* running_mean,
                       float* running_var, void* y, bool training) = 0;
  /// dx, dgamma, dbeta from dy, using the statistics saved by the last training forward.
  virtual void backward(const void* x, const float* gamma, const void* dy, void* dx, float* dgamma,
                        float* dbeta) = 0;
  /// Fuses the relu that follows: from now on forward writes y = max(BN(x), 0) (training and
  /// inference), and backward_relu() replaces backward(). Returns false, changing nothing, where
  /// the op has no fused kernel (the default; the CUDA op in the NHWC layout has one: cuDNN's
  /// CUDNN_BATCHNORM_OPS_BN_ACTIVATION, as MXNet's and NVIDIA's MLPerf ResNet-50 use).
  virtual bool enable_relu() { return false; }
  /// After enable_relu(): dx, dgamma, dbeta from the gradient dy of the fused output y
  /// (y = max(BN(x), 0) of the last training forward, made with these gamma and beta; the relu's
  /// mask is applied inside). Throws LibraryError when enable_relu() did not succeed.
  virtual void backward_relu(const void* x, const void* y, const float* gamma, const float* beta,
                             const void* dy, void* dx, float* dgamma, float* dbeta);
  /// Fuses a residual add and the relu after it (the end of a ResNet block): after it returns
  /// true, forward_add_relu and backward_add_relu replace forward and backward. False (the
  /// default), changing nothing, where the op has no fused kernel (the CUDA op in NHWC:
  /// CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION).
  virtual bool enable_add_relu() { return false; }
  /// y = max(BN(x) + z, 0); z has x's shape. Otherwise as forward.
  virtual void forward_add_relu(const void* x, const void* z, const float* gamma, const float* beta,
                                float* running_mean, float* running_var, void* y, bool training);
  /// From dy of forward_add_relu's output y: dz = (y > 0 ? dy : 0), and dx, dgamma, dbeta as
  /// backward with that masked gradient. dx or dz may be nullptr (not wanted). Throws
  /// LibraryError when enable_add_relu() did not succeed.
  virtual void backward_add_relu(const void* x, const void* y, const float* gamma,
                                 const float* beta, const void* dy, void* dx, void* dz,
                                 float* dgamma, float* dbeta);
};

/// Fully connected y = x·Wᵀ + b. x: N×I (any N×C×H×W with C·H·W = I), W: O×I, b: O, y: N×O.
struct DenseDesc {
  int batch = 0;    ///< N
  int inputs = 0;   ///< I
  int outputs = 0;  ///< O
};

class DenseOp {
 public:
  virtual ~DenseOp() = default;
  /// y = x·Wᵀ + b: x N×I and y N×O activations, w O×I and b O fp32 parameters.
  virtual void forward(const void* x, const float* w, const float* b, void* y) = 0;
  /// dx = dy·W (skipped when dx == nullptr), dW = dyᵀ·x, db = Σₙ dy.
  virtual void backward(const void* x, const float* w, const void* dy, void* dx, float* dw,
                        float* db) = 0;
};

/// The key of a dropout mask. `value`: the key. `device`, where set (CUDA, see
/// Backend::set_step_seed): a device word holding the step's seed, and the kernel reads the key as
/// mix_seed(*device, salt) when it runs — equal to `value` — so that a step replayed from a CUDA
/// graph (StepGraph) draws that step's mask, not the captured one's.
struct DropoutKey {
  std::uint64_t value = 0;
  const std::uint64_t* device = nullptr;
  std::uint64_t salt = 0;
};

/// Inverted dropout (Srivastava et al. 2014): y = x·mask/(1−p) in training, y = x in inference.
class DropoutOp {
 public:
  virtual ~DropoutOp() = default;
  /// The mask is drawn from a counter-based generator keyed by `seed` (so a resumed run draws the
  /// same masks as an uninterrupted one); the op keeps the mask for backward.
  virtual void forward(const void* x, void* y, bool training, std::uint64_t seed) = 0;
  /// The same with the key of `key` (DropoutKey). Default: forward(x, y, training, key.value),
  /// for backends that ignore key.device (the CPU: Backend::set_step_seed gives no device word).
  virtual void forward_keyed(const void* x, void* y, bool training, const DropoutKey& key) {
    forward(x, y, training, key.value);
  }
  /// dx = dy · mask (0 or 1/(1−p) per element) of the last training forward.
  virtual void backward(const void* dy, void* dx) = 0;
};

/// Device work recorded once and replayed as one launch: a CUDA graph (cudaStreamBeginCapture on
/// the backend's stream, cudaGraphInstantiate, cudaGraphLaunch). The work holds every pointer and
/// by-value kernel argument of the capture: whatever changes between replays must be in memory
/// the work reads (Backend::set_step_seed), and the memory must not move (Backend::
/// buffers_generation). Made by Backend::make_step_graph; not thread-safe.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  /// Records the device work `body` queues, without running it, and instantiates it. Returns ""
  /// on success, else the CUDA error (capture ended, error cleared, nothing ran, this graph
  /// empty): a call that cannot be captured (a synchronization, an allocation), or an exception
  /// from `body` (its message).
  virtual std::string capture(const std::function<void()>& body) = 0;
  /// Queues the recorded work once on the backend's stream (asynchronous). Throws LibraryError
  /// when the launch fails, InputError before a successful capture().
  virtual void replay() = 0;
};

/// Floats of the statistics SoftmaxXentOp::forward_backward (and Model's steps) add to:
/// Σ loss, #correct (top-1), #top-5 hits.
inline constexpr int kStatsFloats = 3;
/// How many leading classes a top-k hit may rank behind (top-5 accuracy).
inline constexpr int kTopK = 5;

/// Classes of the row logits[0, classes) that rank before `label`: a larger logit, or an equal
/// one at a lower index (the argmax's tie rule: the first maximum). 0: the argmax is the label;
/// < kTopK: a top-5 hit. Host memory; pure function.
int classes_ranked_before(const float* logits, int classes, int label);

/// Softmax cross-entropy over K = `classes` logits per sample, against the target
/// q = (1 − ε)·onehot(label) + ε/K — label smoothing (Szegedy et al. 2016) with the ε of the
/// backend that made the op (Backend::label_smoothing(); 0 gives the plain loss):
///   loss = −Σ_j q_j·log softmax_j = lse − (1 − ε)·l_label − (ε/K)·Σ_j l_j.
class SoftmaxXentOp {
 public:
  virtual ~SoftmaxXentOp() = default;
  /// logits: n×classes activations, labels: n int32 in [0, classes) (device). Adds Σ loss, the
  /// number of correct argmax predictions and the number of top-5 hits to stats[0], stats[1] and
  /// stats[2] (kStatsFloats device floats, not cleared here; computed in fp32 whatever the
  /// precision). Ties rank the lower class first (the argmax is the first maximal logit), so a
  /// sample is a top-5 hit when fewer than 5 classes rank before its label: every sample when
  /// classes ≤ 5. If dlogits != nullptr, writes
  /// dlogits = (softmax − q) · grad_scale, n×classes activations.
  /// n may be smaller than the batch the op was made for (last partial batch). The CPU backend
  /// throws InputError for n outside [0, batch] or a label outside [0, classes); the CUDA backend
  /// throws Error for n > batch and, for a label outside [0, classes), adds NaN to stats[0] and
  /// writes that sample's dlogits as zeros.
  virtual void forward_backward(const void* logits, const std::int32_t* labels, int n,
                                float grad_scale, void* dlogits, float* stats) = 0;
};

/// The arguments of a SoftmaxXentOp, checked by every backend's: batches of up to `batch`
/// samples of `classes` logits, label smoothing ε = `smoothing`. Throws InputError unless
/// batch ≥ 1, classes ≥ 1 and 0 ≤ ε < 1.
void check_softmax_xent(int batch, int classes, float smoothing);

// The update rule, OptimizerKind (sgd, momentum, adam; the layer-wise lars, lamb: Backend::
// layerwise_update), is --optimizer's enum (core/options.hpp).
/// Hyper-parameters of one optimizer update over a flat range of parameters.
struct OptimizerUpdate {
  OptimizerKind kind = OptimizerKind::sgd;
  float lr = 0.01f;           ///< learning rate of this step (schedule already applied)
  float momentum = 0.9f;      ///< momentum: v = μ·v + g
  bool nesterov = false;      ///< Nesterov: p −= lr·(g + μ·v)
  float beta1 = 0.9f;         ///< Adam (Kingma & Ba 2015)
  float beta2 = 0.999f;       ///< Adam: decay of the second moment v
  float epsilon = 1e-8f;      ///< Adam: added to √v̂ in the denominator
  float weight_decay = 0.0f;  ///< L2: g += wd·p (coupled, as torch.optim.SGD/Adam)
  std::int64_t step = 1;      ///< 1-based update count, for Adam's (and LAMB's) bias correction
  float lars_eta = 0.001f;    ///< LARS trust coefficient η
  float lars_epsilon = 0.0f;  ///< LARS: added to the trust ratio's denominator
};

/// Floats [begin, end) of the flat parameter buffer holding one tensor, and whether the
/// layer-wise rules adapt it (trust ratio and weight decay) — false for biases and batch-norm
/// parameters, You et al.'s exclusion: those take the plain momentum / Adam step with the
/// global learning rate and no weight decay.
struct ParamSegment {
  std::size_t begin = 0, end = 0;
  bool adapt = true;
  friend bool operator==(const ParamSegment&, const ParamSegment&) = default;
};

/// The arguments of Backend::layerwise_update, checked by every backend's: u.kind lars or lamb,
/// u.step ≥ 1 for lamb, segments non-empty, each non-empty and starting where the previous ended,
/// the first at 0. Returns n = segments.back().end. Throws InputError otherwise.
std::size_t check_layerwise(const OptimizerUpdate& u, const std::vector<ParamSegment>& segments);

/// LAMB's bias corrections at step t = u.step ≥ 1 (You et al. 2020, Algorithm 2, Adam's m̂ and v̂):
/// inv_bc1 = 1/(1 − β1^t) and inv_sqrt_bc2 = 1/√(1 − β2^t), computed in double and rounded to
/// float once, so that every backend's layerwise_update scales by the same two floats.
struct LambCorrections {
  float inv_bc1 = 1.0f, inv_sqrt_bc2 = 1.0f;
};
[[nodiscard]] LambCorrections lamb_corrections(const OptimizerUpdate& u);

/// The shape of Backend::normalize_uint8, checked by every backend's: throws InputError unless
/// s.n ≥ 0 and, when s.n > 0, s.c, s.h, s.w ≥ 1.
void check_normalize_uint8(const Shape& s);

}  // namespace dtrain
