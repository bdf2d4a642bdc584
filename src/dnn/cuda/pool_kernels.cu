// src/dnn/cuda/pool_kernels.cu — max-pooling backward in NHWC for windows that do not overlap
// (kernel ≤ stride in both dimensions: VGG's 2×2 stride 2), declared in kernels.hpp.
//
// Why our own: on an H200, VGG-16 at batch 128 in bf16 channels-last spent 20.1 ms of its 57.5 ms
// of kernel time per step in cuDNN's pooling_bw_kernel_max_deterministic (5 calls), where
// PyTorch's max_pool_backward_nhwc took 4.6 ms (tests/gpu/kernel_profile.sh,
// docs/results/gpu-h200/2026-11-27/). With windows that do not overlap every input pixel belongs
// to at most one window, so one thread per (output pixel, pack of V channels) finds the window's
// maximum from x and y — the first position, in row-major window order, whose x equals y (a NaN y:
// the first NaN x), the maximum PyTorch's max_pool2d records — and writes the whole window's dx:
// dy there, 0 elsewhere. Every dx element is written by one thread at most, nothing is added, so
// the result is exact and deterministic. Pixels no window covers (trailing rows and columns, gaps
// when kernel < stride, padding) are zeroed by a memset first.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda_check.hpp"
#include "elem.cuh"
#include "kernels.hpp"

namespace dtrain::cuda {
namespace {

template <int V, typename T>
__global__ void max_pool_backward_nhwc_kernel(MaxPoolGeometry g, const T* x, const T* y,
                                              const T* dy, T* dx) {
  const int groups = g.c / V;
  const std::size_t items = std::size_t(g.n) * g.p * g.q * groups;
  for (std::size_t item = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; item < items;
       item += std::size_t(gridDim.x) * blockDim.x) {
    const int cg = static_cast<int>(item % groups);
    std::size_t pix = item / groups;  // (n·P + op)·Q + oq
    const int oq = static_cast<int>(pix % g.q);
    const std::size_t rest = pix / g.q;
    const int op = static_cast<int>(rest % g.p);
    const int n = static_cast<int>(rest / g.p);
    float ym[V], g_out[V];
    load_n<V>(y, pix * g.c + std::size_t(cg) * V, ym);
    load_n<V>(dy, pix * g.c + std::size_t(cg) * V, g_out);
    bool found[V];
#pragma unroll
    for (int k = 0; k < V; ++k) found[k] = false;
    for (int r = 0; r < g.kh; ++r) {
      const int ih = op * g.sh - g.ph + r;
      if (ih < 0 || ih >= g.h) continue;
      for (int s = 0; s < g.kw; ++s) {
        const int iw = oq * g.sw - g.pw + s;
        if (iw < 0 || iw >= g.w) continue;
        const std::size_t at = ((std::size_t(n) * g.h + ih) * g.w + iw) * g.c + std::size_t(cg) * V;
        float xv[V], out[V];
        load_n<V>(x, at, xv);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const bool hit = !found[k] && (xv[k] == ym[k] || (ym[k] != ym[k] && xv[k] != xv[k]));
          out[k] = hit ? g_out[k] : 0.0f;
          found[k] = found[k] || hit;
        }
        store_n<V>(dx, at, out);
      }
    }
  }
}

}  // namespace

bool max_pool_backward_supported(const MaxPoolGeometry& g) {
  return g.kh <= g.sh && g.kw <= g.sw && g.kh >= 1 && g.kw >= 1 && g.n >= 1 && g.c >= 1 &&
         g.p >= 1 && g.q >= 1;
}

void launch_max_pool_backward_nhwc(cudaStream_t stream, const MaxPoolGeometry& g, const void* x,
                                   const void* y, const void* dy, void* dx, Elem t) {
  const bool covered = g.ph == 0 && g.pw == 0 && g.kh == g.sh && g.kw == g.sw &&
                       g.p * g.sh == g.h && g.q * g.sw == g.w;
  if (!covered)
    DT_CHECK_CUDA(
        cudaMemsetAsync(dx, 0, std::size_t(g.n) * g.h * g.w * g.c * elem_bytes(t), stream));
  dispatch_elem(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    const bool vec = g.c % V == 0 && aligned_to(x, 16) && aligned_to(y, 16) && aligned_to(dy, 16) &&
                     aligned_to(dx, 16);
    const unsigned grid = grid_for(std::size_t(g.n) * g.p * g.q * (vec ? g.c / V : g.c));
    const T* xt = static_cast<const T*>(x);
    const T* yt = static_cast<const T*>(y);
    const T* dyt = static_cast<const T*>(dy);
    T* dxt = static_cast<T*>(dx);
    if (vec)
      max_pool_backward_nhwc_kernel<V><<<grid, kGridThreads, 0, stream>>>(g, xt, yt, dyt, dxt);
    else max_pool_backward_nhwc_kernel<1><<<grid, kGridThreads, 0, stream>>>(g, xt, yt, dyt, dxt);
  });
  DT_CHECK_LAUNCH();
}

}  // namespace dtrain::cuda
