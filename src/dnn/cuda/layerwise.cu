// src/dnn/cuda/layerwise.cu — the multi-tensor LARS / LAMB kernels (see layerwise.hpp): the
// chunk table, kernel 1 (moments and the chunks' sums of squares), kernel 2 (each tensor's trust
// ratio from its chunks' sums, then the step). Follows the CPU backend's loops
// (src/dnn/onednn/layerwise.cpp) operation by operation; __f*_rn / __d*_rn keep nvcc from fusing
// multiply-adds, so that elements see the CPU's roundings.
#include <algorithm>
#include <cmath>

#include "cuda_check.hpp"
#include "kernels.hpp"
#include "layerwise.hpp"

namespace dtrain::cuda {
namespace {

constexpr int kLwThreads = 256;
static_assert(kLayerwiseChunk % kLwThreads == 0, "a chunk is a whole number of block strides");

/// a, b ← their sums over the block (every thread gets them), added in a fixed tree order: the
/// same bits whatever the scheduling. All kLwThreads threads must call it.
__device__ void block_sum2(double& a, double& b) {
  __shared__ double sa[kLwThreads], sb[kLwThreads];
  const int t = threadIdx.x;
  sa[t] = a;
  sb[t] = b;
  __syncthreads();
  for (int s = kLwThreads / 2; s > 0; s >>= 1) {
    if (t < s) {
      sa[t] = __dadd_rn(sa[t], sa[t + s]);
      sb[t] = __dadd_rn(sb[t], sb[t + s]);
    }
    __syncthreads();
  }
  a = sa[0];
  b = sb[0];
  __syncthreads();  // sa, sb may be written again by a later call
}

/// x² in double (the CPU's static_cast<double>(x) * x).
__device__ __forceinline__ double square(float x) {
  const double d = x;
  return __dmul_rn(d, d);
}

/// LAMB's r = m̂/(√v̂ + ε) + wd·p from the new moments, in the CPU's float operations.
__device__ __forceinline__ float lamb_r(const LayerwiseParams& u, float mi, float vi, float pi,
                                        float wd) {
  const float den = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), u.inv_sqrt_bc2), u.epsilon);
  return __fadd_rn(__fdiv_rn(__fmul_rn(mi, u.inv_bc1), den), __fmul_rn(wd, pi));
}

/// Kernel 1, one block per chunk: LAMB updates m and v; partials[2c], partials[2c + 1] ← Σ p²
/// and Σ g² (LARS) or Σ r² (LAMB) over chunk c of an adapted tensor.
__global__ void layerwise_norms_kernel(LayerwiseParams u, const LayerwiseChunk* chunks,
                                       const LayerwiseSpan* spans, double* partials, const float* p,
                                       const float* g, float* m, float* v,
                                       const unsigned long long* guard) {
  if (guard != nullptr && *guard != kNoIndex) return;  // a non-finite gradient: skip the step
  const LayerwiseChunk c = chunks[blockIdx.x];
  const bool adapt = spans[c.tensor].adapt != 0;
  if (!u.lamb && !adapt) return;  // LARS without trust ratio needs no norm (block-uniform)
  double pp = 0.0, other = 0.0;
  for (std::size_t i = c.begin + threadIdx.x; i < c.end; i += kLwThreads) {
    const float pi = p[i], gi = g[i];
    pp += square(pi);
    if (u.lamb) {
      const float mi = __fadd_rn(__fmul_rn(u.beta1, m[i]), __fmul_rn(1.0f - u.beta1, gi));
      const float vi =
          __fadd_rn(__fmul_rn(u.beta2, v[i]), __fmul_rn(__fmul_rn(1.0f - u.beta2, gi), gi));
      m[i] = mi;
      v[i] = vi;
      if (adapt) other += square(lamb_r(u, mi, vi, pi, u.weight_decay));
    } else {
      other += square(gi);
    }
  }
  block_sum2(pp, other);
  if (threadIdx.x == 0 && adapt) {
    partials[2 * std::size_t(blockIdx.x)] = pp;
    partials[2 * std::size_t(blockIdx.x) + 1] = other;
  }
}

/// LARS trust η‖p‖/(‖g‖ + wd‖p‖ + ε) from the sums of squares (1 when a norm is 0).
__device__ float lars_trust(const LayerwiseParams& u, double pp, double gg) {
  const double wn = sqrt(pp), gn = sqrt(gg);
  if (!(wn > 0.0 && gn > 0.0)) return 1.0f;
  const double den =
      __dadd_rn(__dadd_rn(gn, __dmul_rn(double(u.weight_decay), wn)), double(u.lars_epsilon));
  return static_cast<float>(__ddiv_rn(__dmul_rn(double(u.lars_eta), wn), den));
}

/// Kernel 2, one block per chunk: the tensor's norms from its chunks' partials, then the step.
__global__ void layerwise_apply_kernel(LayerwiseParams u, const LayerwiseChunk* chunks,
                                       const LayerwiseSpan* spans, const double* partials, float* p,
                                       const float* g, float* m, const float* v,
                                       const unsigned long long* guard) {
  if (guard != nullptr && *guard != kNoIndex) return;
  const LayerwiseChunk c = chunks[blockIdx.x];
  const LayerwiseSpan s = spans[c.tensor];
  const bool adapt = s.adapt != 0;
  float trust = 1.0f;  // LARS: the trust ratio; LAMB: ‖p‖/‖r‖
  if (adapt) {
    double pp = 0.0, other = 0.0;
    for (int k = threadIdx.x; k < s.chunks; k += kLwThreads) {
      const std::size_t at = 2 * std::size_t(s.first_chunk + k);
      pp = __dadd_rn(pp, partials[at]);
      other = __dadd_rn(other, partials[at + 1]);
    }
    block_sum2(pp, other);
    if (!u.lamb) trust = lars_trust(u, pp, other);
    else if (pp > 0.0 && other > 0.0) trust = static_cast<float>(sqrt(__ddiv_rn(pp, other)));
  }
  const float wd = adapt ? u.weight_decay : 0.0f;
  if (u.lamb) {
    const float step = __fmul_rn(u.lr, trust);
    for (std::size_t i = c.begin + threadIdx.x; i < c.end; i += kLwThreads)
      p[i] = __fsub_rn(p[i], __fmul_rn(step, lamb_r(u, m[i], v[i], p[i], wd)));
    return;
  }
  for (std::size_t i = c.begin + threadIdx.x; i < c.end; i += kLwThreads) {
    const float pi = p[i];
    const float gi = __fmul_rn(trust, __fadd_rn(g[i], __fmul_rn(wd, pi)));
    const float vi = __fadd_rn(__fmul_rn(u.momentum, m[i]), gi);
    m[i] = vi;
    const float d = u.nesterov ? __fadd_rn(gi, __fmul_rn(u.momentum, vi)) : vi;
    p[i] = __fsub_rn(pi, __fmul_rn(u.lr, d));
  }
}

}  // namespace

LayerwiseTables layerwise_tables(const std::vector<LayerwiseTensor>& tensors) {
  LayerwiseTables t;
  t.spans.reserve(tensors.size());
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const LayerwiseTensor& s = tensors[k];
    LayerwiseSpan span;
    span.first_chunk = static_cast<int>(t.chunks.size());
    span.adapt = s.adapt ? 1 : 0;
    for (std::size_t b = s.begin; b < s.end; b += kLayerwiseChunk)
      t.chunks.push_back({b, std::min(b + kLayerwiseChunk, s.end), static_cast<int>(k)});
    span.chunks = static_cast<int>(t.chunks.size()) - span.first_chunk;
    t.spans.push_back(span);
  }
  return t;
}

void launch_layerwise_update(cudaStream_t stream, const LayerwiseParams& u,
                             const LayerwiseChunk* chunks, const LayerwiseSpan* spans,
                             int num_chunks, double* partials, float* p, const float* g, float* m,
                             float* v, const unsigned long long* guard) {
  if (num_chunks <= 0) return;
  const auto grid = static_cast<unsigned>(num_chunks);
  layerwise_norms_kernel<<<grid, kLwThreads, 0, stream>>>(u, chunks, spans, partials, p, g, m, v,
                                                          guard);
  DT_CHECK_LAUNCH();
  layerwise_apply_kernel<<<grid, kLwThreads, 0, stream>>>(u, chunks, spans, partials, p, g, m, v,
                                                          guard);
  DT_CHECK_LAUNCH();
}

}  // namespace dtrain::cuda
