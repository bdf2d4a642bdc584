// src/dnn/cuda/kernels.cu — dtrain's own CUDA kernels: fill, scale, finiteness check, optimizer
// updates (SGD / momentum / Nesterov / Adam, Kingma & Ba 2015, coupled L2 as torch.optim), dense
// bias add, inverted dropout with the counter-based generator of dtrain/dnn/counter_rng.hpp, and a
// warp-per-sample softmax cross-entropy (log-sum-exp). Element-wise kernels use grid-stride loops;
// every launcher follows kernels.hpp (enqueue on the given stream, check the launch, no sync).
#include <cmath>
#include <cstdint>

#include "cuda_check.hpp"
#include "dtrain/dnn/counter_rng.hpp"
#include "kernels.hpp"

namespace dtrain::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

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

__global__ void relu_forward_kernel(const float* x, float* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] = x[i] > 0.0f || x[i] != x[i] ? x[i] : 0.0f;  // NaN passes (the non-finite checks see it)
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    dx[i] = y[i] > 0.0f || y[i] != y[i] ? dy[i] : 0.0f;
}

__global__ void add_kernel(float* y, const float* x, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__global__ void nonfinite_kernel(const float* p, std::size_t n, int* flag) {
  bool bad = false;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    bad |= !isfinite(p[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

__global__ void optimizer_kernel(OptimizerParams u, float* p, const float* g, float* m, float* v,
                                 std::size_t n) {
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

__global__ void add_row_bias_kernel(float* y, const float* b, int rows, int cols) {
  const std::size_t n = std::size_t(rows) * cols;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] += b[i % cols];
}

__global__ void dropout_forward_kernel(const float* x, float* y, float* mask, float p,
                                       float keep_scale, std::uint64_t seed, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float mk = counter_uniform(seed, i) >= p ? keep_scale : 0.0f;
    mask[i] = mk;
    y[i] = x[i] * mk;
  }
}

__global__ void dropout_backward_kernel(const float* dy, const float* mask, float* dx,
                                        std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    dx[i] = dy[i] * mask[i];
}

constexpr int kWarpsPerBlock = kThreads / 32;

// One warp per sample: max + first argmax, Σ exp(x − max), loss = lse − x[label], gradient.
// Label smoothing ε > 0: target q = (1 − ε)·onehot + ε/K, loss = lse − (1 − ε)·x[label] − (ε/K)·Σx.
__global__ void softmax_xent_kernel(const float* logits, const std::int32_t* labels, int n,
                                    int classes, float grad_scale, float smoothing, float* dlogits,
                                    float* stats) {
  const int lane = threadIdx.x & 31;
  const int sample = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (sample >= n) return;  // whole warps exit together
  const float* x = logits + std::size_t(sample) * classes;

  float best = -INFINITY;
  int best_idx = classes;
  for (int c = lane; c < classes; c += 32) {
    const float xc = x[c];
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
  for (int c = lane; c < classes; c += 32) sum += expf(x[c] - best);
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  float sum_x = 0.0f;  // Σ logits, for the smoothed loss only
  if (smoothing > 0.0f) {
    for (int c = lane; c < classes; c += 32) sum_x += x[c];
    for (int off = 16; off > 0; off >>= 1) sum_x += __shfl_xor_sync(0xffffffffu, sum_x, off);
  }

  const int label = labels[sample];
  const bool valid = label >= 0 && label < classes;
  if (lane == 0) {
    const float lse = best + logf(sum);
    const float loss = smoothing > 0.0f
                           ? lse - (1.0f - smoothing) * x[label] - smoothing / classes * sum_x
                           : lse - x[label];
    atomicAdd(&stats[0], valid ? loss : NAN);
    if (valid && best_idx == label) atomicAdd(&stats[1], 1.0f);
  }
  if (dlogits != nullptr) {
    float* d = dlogits + std::size_t(sample) * classes;
    const float inv_sum = 1.0f / sum;
    const float off = smoothing / classes, on = 1.0f - smoothing + off;  // ε = 0: 1 and 0
    for (int c = lane; c < classes; c += 32) {
      const float softmax = expf(x[c] - best) * inv_sum;
      d[c] = valid ? (softmax - (c == label ? on : off)) * grad_scale : 0.0f;
    }
  }
}

}  // namespace

void launch_relu_forward(cudaStream_t stream, const float* x, float* y, std::size_t n) {
  if (n == 0) return;
  relu_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  DT_CHECK_LAUNCH();
}

void launch_relu_backward(cudaStream_t stream, const float* y, const float* dy, float* dx,
                          std::size_t n) {
  if (n == 0) return;
  relu_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, dy, dx, n);
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

void launch_add(cudaStream_t stream, float* y, const float* x, std::size_t n) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, x, n);
  DT_CHECK_LAUNCH();
}

void launch_nonfinite_flag(cudaStream_t stream, const float* p, std::size_t n, int* flag) {
  if (n == 0) return;
  nonfinite_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, n, flag);
  DT_CHECK_LAUNCH();
}

void launch_optimizer_update(cudaStream_t stream, const OptimizerParams& u, float* p,
                             const float* g, float* m, float* v, std::size_t n) {
  if (n == 0) return;
  optimizer_kernel<<<grid_for(n), kThreads, 0, stream>>>(u, p, g, m, v, n);
  DT_CHECK_LAUNCH();
}

void launch_add_row_bias(cudaStream_t stream, float* y, const float* b, int rows, int cols) {
  const std::size_t n = std::size_t(rows) * cols;
  if (n == 0) return;
  add_row_bias_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, b, rows, cols);
  DT_CHECK_LAUNCH();
}

void launch_dropout_forward(cudaStream_t stream, const float* x, float* y, float* mask, float p,
                            std::uint64_t seed, std::size_t n) {
  if (n == 0) return;
  const float keep_scale = 1.0f / (1.0f - p);
  dropout_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, mask, p, keep_scale, seed, n);
  DT_CHECK_LAUNCH();
}

void launch_dropout_backward(cudaStream_t stream, const float* dy, const float* mask, float* dx,
                             std::size_t n) {
  if (n == 0) return;
  dropout_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(dy, mask, dx, n);
  DT_CHECK_LAUNCH();
}

void launch_softmax_xent(cudaStream_t stream, const float* logits, const std::int32_t* labels,
                         int n, int classes, float grad_scale, float smoothing, float* dlogits,
                         float* stats) {
  if (n <= 0) return;
  const unsigned blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  softmax_xent_kernel<<<blocks, kThreads, 0, stream>>>(logits, labels, n, classes, grad_scale,
                                                       smoothing, dlogits, stats);
  DT_CHECK_LAUNCH();
}

}  // namespace dtrain::cuda
