// src/dnn/cuda/kernels.hpp — host-side launchers of dtrain's own CUDA kernels (kernels.cu).
//
// Plain C++ declarations so that the g++-compiled op files can call them. Every launcher enqueues
// on `stream`, checks the launch (LibraryError on failure) and returns without synchronizing.
// n == 0 is a no-op. Pointers are device pointers unless stated. kernels.cu is compiled as C++17
// by nvcc, so this header must not include the C++20 public headers (backend.hpp, shape.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dtrain::cuda {

/// Element type of an activation buffer a kernel reads or writes (dtrain::DType, which this C++17
/// header cannot include): fp32, or bf16 (__nv_bfloat16; loaded exactly as fp32, the arithmetic in
/// fp32, stores rounded to nearest even with __float2bfloat16_rn). Parameters, gradients of
/// parameters, masks and statistics are always fp32.
enum class Elem { f32, bf16 };

/// y[i] = x[i] converted from `from` to `to`, i < n (equal types: a copy). x, y must not overlap.
void launch_cast(cudaStream_t stream, const void* x, Elem from, void* y, Elem to, std::size_t n);

/// p[i] = value, i < n.
void launch_fill(cudaStream_t stream, float* p, float value, std::size_t n);
/// p[i] *= alpha, i < n.
void launch_scale(cudaStream_t stream, float* p, float alpha, std::size_t n);
/// y[i] += x[i], i < n elements of type t (x == y allowed).
void launch_add(cudaStream_t stream, void* y, const void* x, std::size_t n, Elem t);
/// y[i] = max(x[i], 0), NaN kept (x == y allowed).
void launch_relu_forward(cudaStream_t stream, const void* x, void* y, std::size_t n, Elem t);
/// dx[i] = y[i] > 0 (or NaN) ? dy[i] : 0, from the forward's output y (dy == dx allowed).
void launch_relu_backward(cudaStream_t stream, const void* y, const void* dy, void* dx,
                          std::size_t n, Elem t);
/// The same gradient written to two buffers in one pass: dx0[i] = dx1[i] = relu'(y[i])·dy[i]
/// (dx1 may be nullptr) — the backward of relu(a + b), whose two inputs get the same gradient.
void launch_relu_backward_fanout(cudaStream_t stream, const void* y, const void* dy, void* dx0,
                                 void* dx1, std::size_t n, Elem t);
/// y[i] = a[i] + b[i], then max(·, 0) (NaN kept) when relu_after; y may alias a or b. One pass
/// instead of copy + add + relu: the end of a residual block (He et al. 2016).
void launch_add_relu(cudaStream_t stream, void* y, const void* a, const void* b, std::size_t n,
                     Elem t, bool relu_after = true);
/// Sets *flag (device int, must be 0 beforehand) to 1 when some p[i], i < n, is not finite.
void launch_nonfinite_flag(cudaStream_t stream, const float* p, std::size_t n, int* flag);
/// "No index": what *first holds when launch_first_nonfinite found nothing (set it first).
inline constexpr unsigned long long kNoIndex = ~0ull;
/// *first = min(*first, i) over the i < n where p[i] is not finite (Backend::check_gradient).
void launch_first_nonfinite(cudaStream_t stream, const float* p, std::size_t n,
                            unsigned long long* first);
/// dtrain::OptimizerUpdate flattened for the kernel (bias corrections precomputed on the host).
struct OptimizerParams {
  int kind = 0;  ///< 0 sgd, 1 momentum, 2 adam (OptimizerKind order)
  float lr = 0.0f;
  float momentum = 0.0f;
  int nesterov = 0;
  float beta1 = 0.0f, beta2 = 0.0f, epsilon = 0.0f;
  float weight_decay = 0.0f;
  float step_size = 0.0f;     ///< adam: lr / (1 − beta1^step)
  float inv_sqrt_bc2 = 1.0f;  ///< adam: 1 / sqrt(1 − beta2^step)
};
/// One optimizer step over n parameters, elementwise with g' = g + wd·p:
/// sgd p −= lr·g'; momentum m = μ·m + g', p −= lr·(nesterov ? g' + μ·m : m);
/// adam m = β1·m + (1−β1)·g', v = β2·v + (1−β2)·g'², p −= step_size·m/(sqrt(v)·inv_sqrt_bc2 + ε)
/// (torch.optim.Adam's arrangement, identical to the CPU backend's loop).
/// `guard`: nullptr, or a launch_first_nonfinite result: the update does nothing unless it holds
/// kNoIndex (read on the device, so the host never waits for it).
void launch_optimizer_update(cudaStream_t stream, const OptimizerParams& u, float* p,
                             const float* g, float* m, float* v, std::size_t n,
                             const unsigned long long* guard = nullptr);
/// y[b][c][r] = x[b][r][c]: `batch` row-major rows×cols matrices transposed (x, y must not
/// overlap; elements of type t). NCHW → NHWC is (N, C, H·W), NHWC → NCHW is (N, H·W, C).
/// Throws InputError when batch > 65535 or rows > 65535·32 (the grid's z and y limits).
void launch_transpose(cudaStream_t stream, const void* x, void* y, int batch, int rows, int cols,
                      Elem t);
/// The same with a conversion: x of type `from`, y of type `to` (fp32 ↔ bf16 rounds as
/// launch_cast) — a filter's fp32 KCRS weights to the bf16 KRSC copy cuDNN reads, in one pass.
/// Matrices of at most 8 rows (an image batch's channels) take a one-thread-per-column kernel.
void launch_transpose(cudaStream_t stream, const void* x, Elem from, void* y, Elem to, int batch,
                      int rows, int cols);
/// Backend::normalize_uint8 (normalize_kernels.cu): x uint8 n×C×H×W NCHW (hw = H·W), lut C×256
/// fp32; y n×C×H×W of type t in NHWC order when nhwc, else NCHW, each element lut[c·256 + byte]
/// rounded as launch_cast rounds. Throws InputError when C·sizeof(t) exceeds 48 KiB (the NHWC
/// kernel's shared tile) or the NHWC grid would exceed 2^31 − 1 blocks.
void launch_normalize_uint8(cudaStream_t stream, const std::uint8_t* x, const float* lut, void* y,
                            int n, int channels, std::size_t hw, bool nhwc, Elem t);
/// y[r·cols + c] += b[c] for r < rows, c < cols (row-major bias add of a dense layer; y of type
/// t, b fp32).
void launch_add_row_bias(cudaStream_t stream, void* y, const float* b, int rows, int cols, Elem t);
/// Inverted dropout forward: element i is kept iff counter_uniform(seed, i) >= p (the CPU backend's
/// rule), mask[i] = kept ? 1/(1 − p) : 0 (fp32), y[i] = x[i]·mask[i] (x == y allowed; x, y of
/// type t). The key: `seed`, or where step_seed != nullptr mix_seed(*step_seed, salt), read by the
/// kernel from device memory when it runs (dtrain/dnn/backend.hpp DropoutKey).
void launch_dropout_forward(cudaStream_t stream, const void* x, void* y, float* mask, float p,
                            std::uint64_t seed, const std::uint64_t* step_seed, std::uint64_t salt,
                            std::size_t n, Elem t);
/// *dst = value, as one stream-ordered single-thread kernel (dst device memory).
void launch_store_u64(cudaStream_t stream, std::uint64_t* dst, std::uint64_t value);
/// dx[i] = dy[i]·mask[i] (dy, dx of type t).
void launch_dropout_backward(cudaStream_t stream, const void* dy, const float* mask, void* dx,
                             std::size_t n, Elem t);
/// A max pooling's shapes for launch_max_pool_backward_nhwc: input N×C×H×W, output N×C×P×Q,
/// window kh×kw, stride sh×sw, padding ph×pw (PoolDesc's, in pixels).
struct MaxPoolGeometry {
  int n, c, h, w, p, q, kh, kw, sh, sw, ph, pw;
};
/// Whether launch_max_pool_backward_nhwc takes g: windows that do not overlap (kh ≤ sh, kw ≤ sw).
bool max_pool_backward_supported(const MaxPoolGeometry& g);
/// Max-pooling backward (pool_kernels.cu), x and dx N×H×W×C, y and dy N×P×Q×C, all of type t:
/// dx = dy at each window's first position (row-major) whose x equals y (a NaN y: the first NaN
/// x), 0 everywhere else — exact and deterministic. Requires max_pool_backward_supported(g) (not
/// checked here); x, y from the same forward.
void launch_max_pool_backward_nhwc(cudaStream_t stream, const MaxPoolGeometry& g, const void* x,
                                   const void* y, const void* dy, void* dx, Elem t);
/// Softmax cross-entropy, one warp per sample (log-sum-exp; logits and dlogits of type t, the
/// arithmetic and stats fp32): stats[0] += Σ loss, stats[1] +=
/// number of samples whose first maximal logit is at the label, stats[2] += number of samples
/// with fewer than 5 classes ranked before the label (top-5; ties rank the lower class first); when
/// dlogits != nullptr, dlogits = (softmax − q)·grad_scale with q = (1 − smoothing)·onehot +
/// smoothing/classes (label smoothing; 0: the one-hot target). A label outside [0, classes) adds
/// NaN to the loss (so the trainer's non-finite-loss check reports it), counts as wrong and gets a
/// zero gradient row.
void launch_softmax_xent(cudaStream_t stream, const void* logits, const std::int32_t* labels, int n,
                         int classes, float grad_scale, float smoothing, void* dlogits,
                         float* stats, Elem t);

}  // namespace dtrain::cuda
