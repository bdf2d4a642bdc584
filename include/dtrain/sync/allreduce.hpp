// dtrain/sync/allreduce.hpp — gradient averaging for synchronous data-parallel training.
//
// Every worker calls allreduce_sum() on its gradient buffer in the same order; afterwards all hold the
// element-wise sum (the trainer pre-scales gradients by 1/global_batch so the sum is the mean).
// Implementations: MPI_Allreduce on host memory (CPU backend, or GPU gradients staged through pinned
// host buffers: `--allreduce mpi`), and NCCL on device memory (`--allreduce nccl`, Horovod/DDP style).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <mpi.h>

#include "dtrain/dnn/backend.hpp"

namespace dtrain {

class GradientAllreduce {
 public:
  virtual ~GradientAllreduce() = default;
  /// In place: data[i] = Σ_workers data[i], data a device pointer of the trainer's backend,
  /// n floats. Collective over the worker communicator; blocks until the result is in `data`.
  /// Throws LibraryError on failure (the NCCL communicator is aborted first).
  virtual void allreduce_sum(float* data, std::size_t n) = 0;
  /// "mpi" or "nccl".
  [[nodiscard]] virtual std::string name() const = 0;
};

/// MPI_Allreduce over `comm`; stages through host memory when the backend is a GPU.
/// The communicator is borrowed and must outlive the object.
std::unique_ptr<GradientAllreduce> make_mpi_allreduce(MPI_Comm comm, Backend& backend,
                                                      std::size_t max_floats);

/// ncclAllReduce over the ranks of `comm` (unique id broadcast with MPI), on its own stream.
/// Throws Error when built without CUDA or when `backend` is not a CUDA backend.
std::unique_ptr<GradientAllreduce> make_nccl_allreduce(MPI_Comm comm, Backend& backend);

}  // namespace dtrain
