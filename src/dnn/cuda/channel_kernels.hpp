// src/dnn/cuda/channel_kernels.hpp — launchers of the per-channel kernels of channel_kernels.cu:
// the conv bias (+ relu) and its gradient, and batchnorm training (forward and backward) on
// N×C×H×W tensors of fp32 or bf16 elements (Elem, kernels.hpp; parameters, statistics and sums
// fp32). Deterministic (fixed summation order); enqueued on `stream`, launch
// checked (LibraryError), never synchronizing. Plain C++17 (included by nvcc-compiled code).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels.hpp"

namespace dtrain::cuda {

/// The N×C×H×W shape the kernels see (all ≥ 1).
struct ChannelShape {
  int n = 1, c = 1, h = 1, w = 1;
};

/// Chunks of the batch each channel's reduction is split into (blocks per channel).
int channel_chunks(const ChannelShape& s);
/// Floats of device scratch every launcher below needs for shape s (2·C·chunks).
std::size_t channel_scratch_floats(const ChannelShape& s);

/// out[c] = Σ_{n,h,w} x[n,c,h,w] (overwrites; the conv bias gradient, cudnnConvolutionBackwardBias
/// with beta = 0).
void launch_channel_sum(cudaStream_t stream, const ChannelShape& s, const void* x, Elem t,
                        float* out, float* scratch);

/// The conv bias gradient under a fused relu, in one pass: dy[i] = relu'(y[i])·dy[i] in place
/// (y: the fused output, relu' = 1 where y > 0 or NaN, else 0), out[c] = Σ_{n,h,w} of the result
/// (overwrites) — launch_relu_backward then launch_channel_sum, bit for bit, one read of dy fewer.
void launch_channel_sum_relu_mask(cudaStream_t stream, const ChannelShape& s, const void* y,
                                  void* dy, Elem t, float* out, float* scratch);

/// y[n,c,h,w] += b[c] (the conv bias; cudnnAddTensor took 2-3× as long), then y = max(y, 0) (NaN
/// kept) when relu_after: bias and relu in one pass (16-byte packs, launch_vectorized in elem.cuh).
void launch_add_channel_bias(cudaStream_t stream, const ChannelShape& s, void* y, Elem t,
                             const float* b, bool relu_after = false);

/// Batchnorm training forward (spatial: statistics per channel over N·H·W = M values):
/// saved_mean = mean, saved_invstd = 1/sqrt(var + ε) with the biased variance,
/// y = (x − mean)·saved_invstd·γ + β, running_mean/var = (1 − momentum)·running + momentum·(mean,
/// var·M/(M − 1)), var itself when M = 1 (the CPU backend's rule).
void launch_bn_forward_training(cudaStream_t stream, const ChannelShape& s, const void* x, void* y,
                                Elem t, const float* gamma, const float* beta, float* running_mean,
                                float* running_var, float epsilon, float momentum,
                                float* saved_mean, float* saved_invstd, float* scratch);

/// Batchnorm backward from the saved statistics: dβ = Σdy, dγ = Σ dy·x̂ (both overwritten) and,
/// unless dx == nullptr, dx = γ·invstd/M·(M·dy − dβ − x̂·dγ), x̂ = (x − mean)·invstd.
void launch_bn_backward(cudaStream_t stream, const ChannelShape& s, const void* x, const void* dy,
                        Elem t, const float* gamma, const float* saved_mean,
                        const float* saved_invstd, void* dx, float* dgamma, float* dbeta,
                        float* scratch);

}  // namespace dtrain::cuda
