// src/dnn/cuda/elem.cuh — element access shared by kernels.cu and channel_kernels.cu, whose
// kernels take activations of either element type (Elem, kernels.hpp) as a template parameter T
// (float or __nv_bfloat16).
//
// Device side: load(p, i) reads p[i] as fp32 (bf16 widens exactly), store(p, i, v) writes the fp32
// v, rounded to nearest even for bf16 (__float2bfloat16_rn); kernels do all arithmetic in fp32
// between the two (relu and its gradient relu_grad here, shared by both files). Host side:
// dispatch_elem(t, f) calls f(ElemTag<T>{}) with T the C++ type of t, so that a launcher writes
// its launch once for both instantiations. Private to src/dnn/cuda; CUDA C++17, included only by
// nvcc-compiled files.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "kernels.hpp"

namespace dtrain::cuda {

__device__ __forceinline__ float load(const float* p, std::size_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, std::size_t i) {
  return __bfloat162float(p[i]);
}

__device__ __forceinline__ void store(float* p, std::size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, std::size_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

/// relu keeping NaN (the non-finite checks downstream see it): v > 0 or NaN passes.
__device__ __forceinline__ float relu(float v) { return v > 0.0f || v != v ? v : 0.0f; }
/// relu's gradient from the output y: dy where y > 0 (or NaN), else 0.
__device__ __forceinline__ float relu_grad(float y, float dy) {
  return y > 0.0f || y != y ? dy : 0.0f;
}

/// The C++ element type T as a value, for dispatch_elem's functor (`typename decltype(tag)::type`).
template <typename T>
struct ElemTag {
  using type = T;
};

/// Calls f(ElemTag<float>{}) for Elem::f32 and f(ElemTag<__nv_bfloat16>{}) for Elem::bf16.
template <typename F>
void dispatch_elem(Elem t, F&& f) {
  if (t == Elem::bf16) f(ElemTag<__nv_bfloat16>{});
  else f(ElemTag<float>{});
}

/// Bytes of one element of type t.
constexpr std::size_t elem_bytes(Elem t) {
  return t == Elem::bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
}

}  // namespace dtrain::cuda

namespace dtrain::cuda {

// Vectorized element-wise access: V consecutive elements move as one aligned V·sizeof(T)-byte
// load or store (16 bytes: 8 bf16 or 4 fp32 values per instruction, as PyTorch's
// vectorized_elementwise_kernel), which memory-bound kernels need to approach the GPU's
// bandwidth: with one 2-byte bf16 access per thread the relu and add kernels of ResNet-50 ran at
// a third of it on an H200 (tests/gpu/kernel_profile.sh).

/// V elements of type T, aligned to their size (V·sizeof(T) ≤ 16).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

/// out[k] = p[i + k] as fp32, k < V; p + i must be V·sizeof(T)-aligned when V > 1.
template <int V, typename T>
__device__ __forceinline__ void load_n(const T* p, std::size_t i, float (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = load(p, i);
  } else {
    const Pack<T, V> r = *reinterpret_cast<const Pack<T, V>*>(p + i);
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = load(r.v, k);
  }
}

/// p[i + k] = in[k] (rounded for bf16), k < V; alignment as load_n.
template <int V, typename T>
__device__ __forceinline__ void store_n(T* p, std::size_t i, const float (&in)[V]) {
  if constexpr (V == 1) {
    store(p, i, in[0]);
  } else {
    Pack<T, V> r;
#pragma unroll
    for (int k = 0; k < V; ++k) store(r.v, k, in[k]);
    *reinterpret_cast<Pack<T, V>*>(p + i) = r;
  }
}

/// Runs f.template apply<V>(i) for every group of V elements [i, i + V) of [0, n) (grid-stride),
/// then f.template apply<1>(i) for the n mod V elements left at the end.
template <int V, typename F>
__global__ void vectorized_kernel(std::size_t n, F f) {
  const std::size_t groups = n / V;
  const std::size_t first = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  for (std::size_t g = first; g < groups; g += std::size_t(gridDim.x) * blockDim.x)
    f.template apply<V>(g * V);
  if constexpr (V > 1) {
    const std::size_t tail = groups * V + first;
    if (tail < n) f.template apply<1>(tail);
  }
}

/// Whether device pointer p may be read or written in packs of `bytes` bytes.
inline bool aligned_to(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

/// Threads per block of the grid-stride launches (grid_for()'s blocks).
constexpr int kGridThreads = 256;

/// Blocks of kGridThreads threads for a grid-stride loop over `items` work items: enough to cover
/// them, at least 1 and at most 65536 (the loop takes the rest).
inline unsigned grid_for(std::size_t items) {
  const std::size_t blocks = (items + kGridThreads - 1) / kGridThreads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks ? blocks : 1) : 65536);
}

/// Launches vectorized_kernel for f over n elements on `stream`: packs of V = 16 / sizeof(T)
/// elements when every pointer in `ptrs` is 16-byte aligned (the model's arena aligns every
/// tensor to 64 bytes), else one element per access; grid_for()'s blocks.
template <typename T, typename F>
void launch_vectorized(cudaStream_t stream, std::size_t n, F f,
                       std::initializer_list<const void*> ptrs) {
  constexpr int V = 16 / sizeof(T);
  bool vec = true;
  for (const void* p : ptrs) vec = vec && (p == nullptr || aligned_to(p, 16));
  const unsigned grid = grid_for(vec ? (n + V - 1) / V : n);
  if (vec) vectorized_kernel<V><<<grid, kGridThreads, 0, stream>>>(n, f);
  else vectorized_kernel<1><<<grid, kGridThreads, 0, stream>>>(n, f);
}

}  // namespace dtrain::cuda
