// src/dnn/cuda/normalize_kernels.cu — the input batch's one pass on the GPU
// (Backend::normalize_uint8): uint8 NCHW bytes looked up in the file's per-channel table, rounded
// to bf16 where the model computes in bf16, written in the layout the first layer reads. The
// host loop it equals bit for bit is src/dnn/normalize_uint8.cpp.
//
// NCHW output (or NHWC with C = 1 or H·W = 1, the same bytes): element-wise, launch_vectorized
// (elem.cuh) — V bytes in, one 16-byte store out per thread.
//
// NHWC output: a transpose of each sample's C×(H·W) matrix with a lookup on the way. A block
// takes a tile of P consecutive pixels of one sample and goes through shared memory: it reads the
// tile plane by plane (consecutive threads, consecutive bytes of one channel: coalesced), looks
// each byte up and rounds it into the tile in NHWC order, then writes the tile's P·C values,
// which are contiguous in y, with consecutive threads on consecutive elements (coalesced). One
// thread per pixel writing its C values would instead store with a stride of C elements (for an
// RGB batch each warp-wide store would touch three times the 32-byte sectors), which is what the
// tile avoids; with C ≤ 4 a 32×32 transpose tile, as in kernels.cu, would leave most of its
// threads idle.
#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "cuda_check.hpp"
#include "elem.cuh"
#include "kernels.hpp"

namespace dtrain::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTilePixels = 256;        ///< P for images (C ≤ 16 in fp32, ≤ 32 in bf16)
constexpr std::size_t kTileBytes = 16384;  ///< P·C·sizeof(T) stays within this where P ≥ 1 allows
constexpr std::size_t kMaxSharedBytes = 49152;  ///< dynamic shared memory without opting in

/// NCHW: y[i] = lut[c·256 + x[i]], c = (i / hw) mod channels, for the V elements from i.
template <typename T>
struct NormalizeNchwOp {
  const std::uint8_t* x;
  const float* lut;
  T* y;
  std::size_t hw, channels;
  template <int V>
  __device__ void apply(std::size_t i) const {
    std::size_t c = (i / hw) % channels, p = i % hw;
    std::uint8_t b[V];
    if constexpr (V == 1) {
      b[0] = x[i];
    } else {
      const Pack<std::uint8_t, V> r = *reinterpret_cast<const Pack<std::uint8_t, V>*>(x + i);
#pragma unroll
      for (int k = 0; k < V; ++k) b[k] = r.v[k];
    }
    float v[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      v[k] = lut[c * 256 + b[k]];
      if (++p == hw) {  // the next plane: the next channel, or channel 0 of the next sample
        p = 0;
        c = c + 1 == channels ? 0 : c + 1;
      }
    }
    store_n<V>(y, i, v);
  }
};

/// NHWC through a shared tile (see the top of the file). Block b: sample b / tiles, pixels
/// [j0, j0 + P) with j0 = (b mod tiles)·P; dynamic shared memory P·C elements of T.
template <typename T>
__global__ void normalize_nhwc_kernel(const std::uint8_t* x, const float* lut, T* y, int channels,
                                      std::size_t hw, std::size_t tiles, int tile_pixels) {
  extern __shared__ __align__(16) unsigned char shared[];
  T* tile = reinterpret_cast<T*>(shared);
  const std::size_t sample = blockIdx.x / tiles, j0 = (blockIdx.x % tiles) * tile_pixels;
  const std::size_t left = hw - j0;
  const int pixels = left < std::size_t(tile_pixels) ? static_cast<int>(left) : tile_pixels;
  const std::size_t c_count = static_cast<std::size_t>(channels);
  const std::uint8_t* src = x + sample * c_count * hw + j0;
  for (int k = threadIdx.x; k < channels * tile_pixels; k += blockDim.x) {
    const int c = k / tile_pixels, p = k - c * tile_pixels;
    if (p < pixels)
      store(tile, std::size_t(p) * channels + c, lut[c * 256 + src[std::size_t(c) * hw + p]]);
  }
  __syncthreads();
  T* dst = y + (sample * hw + j0) * c_count;
  for (int k = threadIdx.x; k < pixels * channels; k += blockDim.x) dst[k] = tile[k];
}

template <typename T>
void launch_nhwc(cudaStream_t stream, const std::uint8_t* x, const float* lut, T* y, int n,
                 int channels, std::size_t hw) {
  const std::size_t per_pixel = std::size_t(channels) * sizeof(T);
  DT_REQUIRE(per_pixel <= kMaxSharedBytes,
             "normalize_uint8: an NHWC batch of " + std::to_string(channels) +
                 " channels exceeds the kernel's shared tile (at most " +
                 std::to_string(kMaxSharedBytes / sizeof(T)) + " channels)");
  const int pixels = static_cast<int>(
      std::clamp<std::size_t>(kTileBytes / per_pixel, 1, std::size_t(kMaxTilePixels)));
  const std::size_t tiles = (hw + pixels - 1) / pixels, blocks = std::size_t(n) * tiles;
  DT_REQUIRE(blocks <= 0x7fffffffu, "normalize_uint8: a batch of " + std::to_string(n) +
                                        " samples of " + std::to_string(hw) +
                                        " pixels exceeds the CUDA grid");
  normalize_nhwc_kernel<T><<<static_cast<unsigned>(blocks), kThreads, pixels * per_pixel, stream>>>(
      x, lut, y, channels, hw, tiles, pixels);
}

}  // namespace

void launch_normalize_uint8(cudaStream_t stream, const std::uint8_t* x, const float* lut, void* y,
                            int n, int channels, std::size_t hw, bool nhwc, Elem t) {
  if (n == 0) return;
  dispatch_elem(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* out = static_cast<T*>(y);
    if (nhwc && channels > 1 && hw > 1) {
      launch_nhwc(stream, x, lut, out, n, channels, hw);
    } else {
      const std::size_t total = std::size_t(n) * channels * hw;
      launch_vectorized<T>(stream, total,
                           NormalizeNchwOp<T>{x, lut, out, hw, std::size_t(channels)}, {x, y});
    }
  });
  DT_CHECK_LAUNCH();
}

}  // namespace dtrain::cuda
