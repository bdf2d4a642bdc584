// src/dnn/cuda/elem.cuh — element access shared by kernels.cu and channel_kernels.cu, whose
// kernels take activations of either element type (Elem, kernels.hpp) as a template parameter T
// (float or __nv_bfloat16).
//
// Device side: load(p, i) reads p[i] as fp32 (bf16 widens exactly), store(p, i, v) writes the fp32
// v, rounded to nearest even for bf16 (__float2bfloat16_rn); kernels do all arithmetic in fp32
// between the two. Host side: dispatch_elem(t, f) calls f(ElemTag<T>{}) with T the C++ type of t,
// so that a launcher writes its launch once for both instantiations. Private to src/dnn/cuda;
// CUDA C++17, included only by nvcc-compiled files.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>

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

/// The C++ element type T as a value, for dispatch_elem's functor (`typename decltype(tag)::type`).
template <typename T>
struct ElemTag {
  using type = T;
};

/// Calls f(ElemTag<float>{}) for Elem::f32 and f(ElemTag<__nv_bfloat16>{}) for Elem::bf16.
template <typename F>
void dispatch_elem(Elem t, F&& f) {
  if (t == Elem::bf16)
    f(ElemTag<__nv_bfloat16>{});
  else
    f(ElemTag<float>{});
}

/// Bytes of one element of type t.
constexpr std::size_t elem_bytes(Elem t) {
  return t == Elem::bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
}

}  // namespace dtrain::cuda
