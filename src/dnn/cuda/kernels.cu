// src/dnn/cuda/kernels.cu — dtrain's own CUDA kernels: fp32 ↔ bf16 cast, fill, scale, finiteness
// check, optimizer updates (SGD / momentum / Nesterov / Adam, Kingma & Ba 2015, coupled L2 as
// torch.optim), dense bias add, inverted dropout with the counter-based generator of
// dtrain/dnn/counter_rng.hpp, and a warp-per-sample softmax cross-entropy (log-sum-exp). The
// activation kernels (add, relu, bias add, dropout, softmax cross-entropy) take fp32 or bf16
// activations (templates on the element type, elem.cuh: fp32 arithmetic, bf16 stores rounded to
// nearest even); fill, scale, the finiteness check and the optimizer work on fp32 parameters only.
// Element-wise kernels use grid-stride loops; the activation ones (cast, relu, add, add + relu)
// move 16-byte packs (launch_vectorized, elem.cuh). Every launcher follows kernels.hpp (enqueue on
// the given stream, check the launch, no sync). The input batch's lookup is normalize_kernels.cu.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda_check.hpp"
#include "dtrain/dnn/counter_rng.hpp"
#include "elem.cuh"
#include "kernels.hpp"

namespace dtrain::cuda {
namespace {

constexpr int kThreads = kGridThreads;  // grid_for()'s blocks (elem.cuh)

__global__ void fill_kernel(float* p, float value, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = value;
}

__global__ void scale_kernel(float* p, float alpha, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    p[i] *= alpha;
}

// Element-wise functors for launch_vectorized (elem.cuh): apply<V>(i) handles [i, i + V).
struct Identity {  // a cast: the conversion is in load_n / store_n
  __device__ float operator()(float v) const { return v; }
};
struct Relu {
  __device__ float operator()(float v) const { return relu(v); }
};

/// y = f(x) element-wise, From → To (a cast with Identity, relu with Relu).
template <typename From, typename To, typename F>
struct MapOp {
  const From* x;
  To* y;
  template <int V>
  __device__ void apply(std::size_t i) const {
    float a[V];
    load_n<V>(x, i, a);
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = F{}(a[k]);
    store_n<V>(y, i, a);
  }
};

template <typename T>
struct ReluBackwardOp {  // dx0 = relu'(y)·dy, and dx1 the same when not nullptr
  const T* y;
  const T* dy;
  T* dx0;
  T* dx1;
  template <int V>
  __device__ void apply(std::size_t i) const {
    float a[V], d[V];
    load_n<V>(y, i, a);
    load_n<V>(dy, i, d);
#pragma unroll
    for (int k = 0; k < V; ++k) d[k] = relu_grad(a[k], d[k]);
    store_n<V>(dx0, i, d);
    if (dx1 != nullptr) store_n<V>(dx1, i, d);
  }
};

template <typename T>
struct AddOp {  // y = a + b, then relu when `relu`
  T* y;
  const T* a;
  const T* b;
  bool relu_after;
  template <int V>
  __device__ void apply(std::size_t i) const {
    float u[V], w[V];
    load_n<V>(a, i, u);
    load_n<V>(b, i, w);
#pragma unroll
    for (int k = 0; k < V; ++k) u[k] = relu_after ? relu(u[k] + w[k]) : u[k] + w[k];
    store_n<V>(y, i, u);
  }
};

__global__ void nonfinite_kernel(const float* p, std::size_t n, int* flag) {
  bool bad = false;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    bad |= !isfinite(p[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

__global__ void first_nonfinite_kernel(const float* p, std::size_t n, unsigned long long* first) {
  // Each thread's first bad index is its smallest (increasing i); the minimum of those is the
  // global first. Atomics only where a value is bad.
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    if (!isfinite(p[i])) {
      atomicMin(first, static_cast<unsigned long long>(i));
      return;
    }
}

__global__ void optimizer_kernel(OptimizerParams u, float* p, const float* g, float* m, float* v,
                                 std::size_t n, const unsigned long long* guard) {
  if (guard != nullptr && *guard != kNoIndex) return;  // a non-finite gradient: skip the step
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    float grad = g[i];
    if (u.weight_decay != 0.0f) grad += u.weight_decay * p[i];
    if (u.kind == 0) {
      p[i] -= u.lr * grad;
    } else if (u.kind == 1) {
      const float mom = u.momentum * m[i] + grad;
      m[i] = mom;
      p[i] -= u.lr * (u.nesterov ? grad + u.momentum * mom : mom);
    } else {
      const float m1 = u.beta1 * m[i] + (1.0f - u.beta1) * grad;
      const float v1 = u.beta2 * v[i] + (1.0f - u.beta2) * grad * grad;
      m[i] = m1;
      v[i] = v1;
      p[i] -= u.step_size * m1 / (sqrtf(v1) * u.inv_sqrt_bc2 + u.epsilon);
    }
  }
}

template <typename T>
__global__ void add_row_bias_kernel(T* y, const float* b, int rows, int cols) {
  const std::size_t n = std::size_t(rows) * cols;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    store(y, i, load(y, i) + b[i % cols]);
}

template <typename T>
__global__ void dropout_forward_kernel(const T* x, T* y, float* mask, float p, float keep_scale,
                                       std::uint64_t key, const std::uint64_t* step_seed,
                                       std::uint64_t salt, std::size_t n) {
  const std::uint64_t seed = step_seed != nullptr ? mix_seed(*step_seed, salt) : key;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float mk = counter_uniform(seed, i) >= p ? keep_scale : 0.0f;
    mask[i] = mk;
    store(y, i, load(x, i) * mk);
  }
}

template <typename T>
__global__ void dropout_backward_kernel(const T* dy, const float* mask, T* dx, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    store(dx, i, load(dy, i) * mask[i]);
}

constexpr int kWarpsPerBlock = kThreads / 32;

// One warp per sample: max + first argmax, Σ exp(x − max), loss = lse − x[label], gradient.
// Label smoothing ε > 0: target q = (1 − ε)·onehot + ε/K, loss = lse − (1 − ε)·x[label] − (ε/K)·Σx.
template <typename T>
__global__ void softmax_xent_kernel(const T* logits, const std::int32_t* labels, int n, int classes,
                                    float grad_scale, float smoothing, T* dlogits, float* stats) {
  const int lane = threadIdx.x & 31;
  const int sample = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (sample >= n) return;  // whole warps exit together
  const T* x = logits + std::size_t(sample) * classes;

  float best = -INFINITY;
  int best_idx = classes;
  for (int c = lane; c < classes; c += 32) {
    const float xc = load(x, c);
    if (xc > best) {  // strictly greater: keeps the first index within a lane
      best = xc;
      best_idx = c;
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, off);
    const int oi = __shfl_xor_sync(0xffffffffu, best_idx, off);
    if (ob > best || (ob == best && oi < best_idx)) {
      best = ob;
      best_idx = oi;
    }
  }
  float sum = 0.0f;
  for (int c = lane; c < classes; c += 32) sum += expf(load(x, c) - best);
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  float sum_x = 0.0f;  // Σ logits, for the smoothed loss only
  if (smoothing > 0.0f) {
    for (int c = lane; c < classes; c += 32) sum_x += load(x, c);
    for (int off = 16; off > 0; off >>= 1) sum_x += __shfl_xor_sync(0xffffffffu, sum_x, off);
  }

  const int label = labels[sample];
  const bool valid = label >= 0 && label < classes;
  if (lane == 0) {
    const float lse = best + logf(sum);
    const float x_label = valid ? load(x, label) : 0.0f;  // no read outside the row
    const float loss = smoothing > 0.0f
                           ? lse - (1.0f - smoothing) * x_label - smoothing / classes * sum_x
                           : lse - x_label;
    atomicAdd(&stats[0], valid ? loss : NAN);
    if (valid && best_idx == label) atomicAdd(&stats[1], 1.0f);
  }
  // Top-5: the classes ranking before the label (a larger logit, or an equal one at a lower
  // index, the argmax's tie rule), counted over the lanes.
  int before = 0;
  if (valid) {
    const float xl = load(x, label);
    for (int c = lane; c < classes; c += 32) {
      const float xc = load(x, c);
      before += (xc > xl || (xc == xl && c < label)) ? 1 : 0;
    }
  }
  for (int off = 16; off > 0; off >>= 1) before += __shfl_xor_sync(0xffffffffu, before, off);
  if (lane == 0 && valid && before < 5) atomicAdd(&stats[2], 1.0f);
  if (dlogits != nullptr) {
    T* d = dlogits + std::size_t(sample) * classes;
    const float inv_sum = 1.0f / sum;
    const float off = smoothing / classes, on = 1.0f - smoothing + off;  // ε = 0: 1 and 0
    for (int c = lane; c < classes; c += 32) {
      const float softmax = expf(load(x, c) - best) * inv_sum;
      store(d, c, valid ? (softmax - (c == label ? on : off)) * grad_scale : 0.0f);
    }
  }
}

/// y[b][c][r] = x[b][r][c] through a 32×33 shared tile (the 33rd column keeps the column reads
/// free of bank conflicts): both the reads of x and the writes of y are coalesced. U is the
/// element's bits (a transpose moves values, it never computes with them). Block 32×8; grid
/// (⌈cols/32⌉, ⌈rows/32⌉, batch).
template <typename U>
__global__ void transpose_kernel(const U* x, U* y, int rows, int cols) {
  __shared__ U tile[32][33];
  const std::size_t base = std::size_t(blockIdx.z) * rows * cols;
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = x[base + std::size_t(r) * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int c = c0 + i, r = r0 + threadIdx.x;
    if (c < cols && r < rows) y[base + std::size_t(c) * rows + r] = tile[threadIdx.x][i];
  }
}

/// transpose_kernel with a type conversion (fp32 ↔ bf16): the tile holds fp32 values.
template <typename From, typename To>
__global__ void transpose_cast_kernel(const From* x, To* y, int rows, int cols) {
  __shared__ float tile[32][33];
  const std::size_t base = std::size_t(blockIdx.z) * rows * cols;
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = load(x, base + std::size_t(r) * cols + c);
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int c = c0 + i, r = r0 + threadIdx.x;
    if (c < cols && r < rows) store(y, base + std::size_t(c) * rows + r, tile[threadIdx.x][i]);
  }
}

/// The transpose of matrices with few rows (an image batch's 1-3 channels, NCHW → NHWC): one
/// thread per column j of matrix b reads its `rows` values (each row's reads coalesced across
/// the warp) and writes them contiguously, converting From → To; a 32×32 tile would leave most of
/// its threads idle.
template <typename From, typename To>
__global__ void transpose_few_rows_kernel(const From* x, To* y, int rows, std::int64_t cols,
                                          std::int64_t total) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t b = i / cols, j = i - b * cols;
    const std::size_t src = std::size_t(b) * rows * cols + std::size_t(j);
    for (int r = 0; r < rows; ++r) {
      const std::size_t to = std::size_t(i) * rows + r, from = src + std::size_t(r) * cols;
      if constexpr (std::is_same_v<From, To>)
        y[to] = x[from];  // bits moved as they are (NaN payloads too)
      else store(y, to, load(x, from));
    }
  }
}

/// Calls f(ElemTag<From>{}, ElemTag<To>{}) for the element types of `from` and `to`.
template <typename F>
void dispatch_pair(Elem from, Elem to, F&& f) {
  dispatch_elem(from, [&](auto a) { dispatch_elem(to, [&](auto b) { f(a, b); }); });
}

}  // namespace

void launch_cast(cudaStream_t stream, const void* x, Elem from, void* y, Elem to, std::size_t n) {
  if (n == 0) return;
  if (from == to) {
    DT_CHECK_CUDA(cudaMemcpyAsync(y, x, n * elem_bytes(from), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  // Packs of 4 (16 bytes of fp32, 8 of bf16).
  if (from == Elem::f32)
    launch_vectorized<float>(stream, n,
                             MapOp<float, __nv_bfloat16, Identity>{static_cast<const float*>(x),
                                                                   static_cast<__nv_bfloat16*>(y)},
                             {x, y});
  else
    launch_vectorized<float>(stream, n,
                             MapOp<__nv_bfloat16, float, Identity>{
                                 static_cast<const __nv_bfloat16*>(x), static_cast<float*>(y)},
                             {x, y});
  DT_CHECK_LAUNCH();
}

void launch_relu_forward(cudaStream_t stream, const void* x, void* y, std::size_t n, Elem t) {
  if (n == 0) return;
  dispatch_elem(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_vectorized<T>(stream, n, MapOp<T, T, Relu>{static_cast<const T*>(x), static_cast<T*>(y)},
                         {x, y});
  });
  DT_CHECK_LAUNCH();
}

void launch_relu_backward(cudaStream_t stream, const void* y, const void* dy, void* dx,
                          std::size_t n, Elem t) {
  launch_relu_backward_fanout(stream, y, dy, dx, nullptr, n, t);
}

void launch_relu_backward_fanout(cudaStream_t stream, const void* y, const void* dy, void* dx0,
                                 void* dx1, std::size_t n, Elem t) {
  if (n == 0) return;
  dispatch_elem(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_vectorized<T>(stream, n,
                         ReluBackwardOp<T>{static_cast<const T*>(y), static_cast<const T*>(dy),
                                           static_cast<T*>(dx0), static_cast<T*>(dx1)},
                         {y, dy, dx0, dx1});
  });
  DT_CHECK_LAUNCH();
}

void launch_add_relu(cudaStream_t stream, void* y, const void* a, const void* b, std::size_t n,
                     Elem t, bool relu_after) {
  if (n == 0) return;
  dispatch_elem(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_vectorized<T>(stream, n,
                         AddOp<T>{static_cast<T*>(y), static_cast<const T*>(a),
                                  static_cast<const T*>(b), relu_after},
                         {y, a, b});
  });
  DT_CHECK_LAUNCH();
}

void launch_fill(cudaStream_t stream, float* p, float value, std::size_t n) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, value, n);
  DT_CHECK_LAUNCH();
}

void launch_scale(cudaStream_t stream, float* p, float alpha, std::size_t n) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, alpha, n);
  DT_CHECK_LAUNCH();
}

void launch_add(cudaStream_t stream, void* y, const void* x, std::size_t n, Elem t) {
  launch_add_relu(stream, y, y, x, n, t, false);
}

void launch_nonfinite_flag(cudaStream_t stream, const float* p, std::size_t n, int* flag) {
  if (n == 0) return;
  nonfinite_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, n, flag);
  DT_CHECK_LAUNCH();
}

void launch_first_nonfinite(cudaStream_t stream, const float* p, std::size_t n,
                            unsigned long long* first) {
  if (n == 0) return;
  first_nonfinite_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, n, first);
  DT_CHECK_LAUNCH();
}

void launch_optimizer_update(cudaStream_t stream, const OptimizerParams& u, float* p,
                             const float* g, float* m, float* v, std::size_t n,
                             const unsigned long long* guard) {
  if (n == 0) return;
  optimizer_kernel<<<grid_for(n), kThreads, 0, stream>>>(u, p, g, m, v, n, guard);
  DT_CHECK_LAUNCH();
}

void launch_add_row_bias(cudaStream_t stream, void* y, const float* b, int rows, int cols, Elem t) {
  const std::size_t n = std::size_t(rows) * cols;
  if (n == 0) return;
  dispatch_elem(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_row_bias_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(y), b, rows, cols);
  });
  DT_CHECK_LAUNCH();
}

void launch_dropout_forward(cudaStream_t stream, const void* x, void* y, float* mask, float p,
                            std::uint64_t seed, const std::uint64_t* step_seed, std::uint64_t salt,
                            std::size_t n, Elem t) {
  if (n == 0) return;
  const float keep_scale = 1.0f / (1.0f - p);
  dispatch_elem(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), mask, p, keep_scale, seed, step_seed, salt,
        n);
  });
  DT_CHECK_LAUNCH();
}

__global__ void store_u64_kernel(std::uint64_t* dst, std::uint64_t value) { *dst = value; }

void launch_store_u64(cudaStream_t stream, std::uint64_t* dst, std::uint64_t value) {
  store_u64_kernel<<<1, 1, 0, stream>>>(dst, value);
  DT_CHECK_LAUNCH();
}

void launch_dropout_backward(cudaStream_t stream, const void* dy, const float* mask, void* dx,
                             std::size_t n, Elem t) {
  if (n == 0) return;
  dispatch_elem(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(dy), mask,
                                                                  static_cast<T*>(dx), n);
  });
  DT_CHECK_LAUNCH();
}

void launch_softmax_xent(cudaStream_t stream, const void* logits, const std::int32_t* labels, int n,
                         int classes, float grad_scale, float smoothing, void* dlogits,
                         float* stats, Elem t) {
  if (n <= 0) return;
  const unsigned blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  dispatch_elem(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_xent_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(logits), labels, n,
                                                         classes, grad_scale, smoothing,
                                                         static_cast<T*>(dlogits), stats);
  });
  DT_CHECK_LAUNCH();
}

void launch_transpose(cudaStream_t stream, const void* x, void* y, int batch, int rows, int cols,
                      Elem t) {
  launch_transpose(stream, x, t, y, t, batch, rows, cols);
}

void launch_transpose(cudaStream_t stream, const void* x, Elem from, void* y, Elem to, int batch,
                      int rows, int cols) {
  if (batch == 0 || rows == 0 || cols == 0) return;
  constexpr int kFewRows = 8;
  if (rows <= kFewRows && from == to) {  // the element's bits, as transpose_kernel moves them
    const std::int64_t total = std::int64_t{batch} * cols;
    const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((total + 255) / 256, 65536));
    if (from == Elem::bf16)
      transpose_few_rows_kernel<<<blocks, 256, 0, stream>>>(static_cast<const std::uint16_t*>(x),
                                                            static_cast<std::uint16_t*>(y), rows,
                                                            std::int64_t{cols}, total);
    else
      transpose_few_rows_kernel<<<blocks, 256, 0, stream>>>(static_cast<const std::uint32_t*>(x),
                                                            static_cast<std::uint32_t*>(y), rows,
                                                            std::int64_t{cols}, total);
    DT_CHECK_LAUNCH();
    return;
  }
  if (from != to) {
    dispatch_pair(from, to, [&](auto a, auto b) {
      using From = typename decltype(a)::type;
      using To = typename decltype(b)::type;
      const auto* xs = static_cast<const From*>(x);
      auto* ys = static_cast<To*>(y);
      if (rows <= kFewRows) {
        const std::int64_t total = std::int64_t{batch} * cols;
        const auto blocks =
            static_cast<unsigned>(std::min<std::int64_t>((total + 255) / 256, 65536));
        transpose_few_rows_kernel<<<blocks, 256, 0, stream>>>(xs, ys, rows, std::int64_t{cols},
                                                              total);
      } else {
        DT_REQUIRE(batch <= 65535 && (rows + 31) / 32 <= 65535,
                   "transpose: " + std::to_string(batch) + " matrices of " + std::to_string(rows) +
                       " rows exceed the CUDA grid (at most 65535 and 65535·32)");
        const dim3 grid((cols + 31) / 32, (rows + 31) / 32, batch), block(32, 8);
        transpose_cast_kernel<<<grid, block, 0, stream>>>(xs, ys, rows, cols);
      }
    });
    DT_CHECK_LAUNCH();
    return;
  }
  DT_REQUIRE(batch <= 65535 && (rows + 31) / 32 <= 65535,
             "transpose: " + std::to_string(batch) + " matrices of " + std::to_string(rows) +
                 " rows exceed the CUDA grid (at most 65535 and 65535·32)");
  const dim3 grid((cols + 31) / 32, (rows + 31) / 32, batch), block(32, 8);
  if (from == Elem::bf16)
    transpose_kernel<<<grid, block, 0, stream>>>(static_cast<const std::uint16_t*>(x),
                                                 static_cast<std::uint16_t*>(y), rows, cols);
  else
    transpose_kernel<<<grid, block, 0, stream>>>(static_cast<const std::uint32_t*>(x),
                                                 static_cast<std::uint32_t*>(y), rows, cols);
  DT_CHECK_LAUNCH();
}

}  // namespace dtrain::cuda
