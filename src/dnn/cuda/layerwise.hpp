// src/dnn/cuda/layerwise.hpp — the multi-tensor LARS / LAMB update on the GPU (layerwise.cu), the
// kernels behind CudaBackend::layerwise_update (dtrain/dnn/backend.hpp gives the rules: LARS, You,
// Gitman, Ginsburg 2017, in torchlars/apex LARC's arrangement; LAMB, You et al. 2020, Algorithm 2
// with φ = identity).
//
// Design (as apex's multi_tensor_apply and PyTorch's _foreach kernels: one launch over many
// tensors, driven by a table): every tensor of the flat parameter buffer is cut into chunks of at
// most kLayerwiseChunk floats, none crossing a tensor boundary. One block per chunk. Kernel 1 sums
// the chunk's squares in double (LARS: ‖p‖², ‖g‖²; LAMB, after updating m and v: ‖p‖², ‖r‖²) and
// writes them to `partials`; kernel 2 — one block per chunk again — first adds its tensor's chunk
// partials (every block of a tensor in the same fixed order, so all get the same sums), forms the
// trust ratio, then updates its chunk. Two launches per step whatever the tensor count, no host
// synchronization, and a reduction order fixed by the table alone: the same bits on every replica
// and every run. The elementwise arithmetic is the CPU backend's (src/dnn/onednn/layerwise.cpp)
// operation by operation, with round-to-nearest intrinsics so that nvcc fuses no multiply-add.
//
// Plain C++17 declarations (kernels.hpp's rules: enqueue on `stream`, check the launch, no sync;
// device pointers).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace dtrain::cuda {

/// Floats per chunk (a block's share of one tensor): 32 per thread of a 256-thread block.
inline constexpr std::size_t kLayerwiseChunk = 8192;

/// One tensor: floats [begin, end) of the flat buffer; adapt: trust ratio and weight decay apply
/// (false for biases and batch-norm parameters: the plain momentum / Adam step).
struct LayerwiseTensor {
  std::size_t begin = 0, end = 0;
  bool adapt = true;
};

/// A chunk of the device table: floats [begin, end) of tensor `tensor`.
struct LayerwiseChunk {
  std::size_t begin = 0, end = 0;
  int tensor = 0;
};

/// Where a tensor's chunks lie in the chunk table, as the kernels read it.
struct LayerwiseSpan {
  int first_chunk = 0, chunks = 0;
  int adapt = 0;
};

/// The two device tables of a tensor list: chunks in tensor order, kLayerwiseChunk floats each
/// (a tensor's last chunk the rest), and each tensor's span of them. Throws nothing; host memory.
struct LayerwiseTables {
  std::vector<LayerwiseChunk> chunks;
  std::vector<LayerwiseSpan> spans;
};
/// The tables of `tensors` (non-empty ranges; the caller checked them).
LayerwiseTables layerwise_tables(const std::vector<LayerwiseTensor>& tensors);

/// dtrain::OptimizerUpdate of a LARS or LAMB step, flattened for the kernels (LAMB's bias
/// corrections precomputed on the host as the CPU backend does).
struct LayerwiseParams {
  int lamb = 0;  ///< 0: LARS, 1: LAMB
  float lr = 0.0f;
  float momentum = 0.0f;  ///< LARS μ
  int nesterov = 0;       ///< LARS
  float weight_decay = 0.0f;
  float lars_eta = 0.0f, lars_epsilon = 0.0f;
  float beta1 = 0.0f, beta2 = 0.0f, epsilon = 0.0f;  ///< LAMB
  float inv_bc1 = 1.0f;                              ///< LAMB: 1 / (1 − β1^step)
  float inv_sqrt_bc2 = 1.0f;                         ///< LAMB: 1 / √(1 − β2^step)
};

/// One LARS or LAMB step over the tensors of the device tables `chunks` (num_chunks entries) and
/// `spans`: p, g, m (and v for LAMB) are the flat fp32 buffers the tables index; `partials` is
/// device scratch of 2·num_chunks doubles. `guard`: nullptr, or a launch_first_nonfinite result
/// (kernels.hpp): both kernels do nothing unless it holds kNoIndex. num_chunks == 0 is a no-op.
void launch_layerwise_update(cudaStream_t stream, const LayerwiseParams& u,
                             const LayerwiseChunk* chunks, const LayerwiseSpan* spans,
                             int num_chunks, double* partials, float* p, const float* g, float* m,
                             float* v, const unsigned long long* guard);

}  // namespace dtrain::cuda
