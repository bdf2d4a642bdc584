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

  /// Starts data[i] = Σ_workers data[i] over n floats (a device pointer), to begin once the work
  /// queued so far on the backend's stream is done, and returns: a bucket of the gradient leaves
  /// while backward still computes the rest (PyTorch DDP's reducer). Calls must come in the same
  /// order, with the same n, on every worker; wait() returns once every sum started is done.
  /// Default (MPI through host memory): the whole allreduce_sum at once, wait() a no-op.
  /// Throws as allreduce_sum (NCCL: errors of an enqueued sum surface in wait()).
  virtual void start_sum(float* data, std::size_t n) { allreduce_sum(data, n); }
  virtual void wait() {}
  /// True when start_sum returns before its sum is done (NCCL, on its own stream).
  [[nodiscard]] virtual bool asynchronous() const { return false; }
};

/// MPI_Allreduce over `comm`; stages through host memory when the backend is a GPU.
/// The communicator is borrowed and must outlive the object.
std::unique_ptr<GradientAllreduce> make_mpi_allreduce(MPI_Comm comm, Backend& backend,
                                                      std::size_t max_floats);

/// ncclAllReduce over the ranks of `comm` (unique id broadcast with MPI), on its own stream.
/// Throws Error when built without CUDA or when `backend` is not a CUDA backend.
std::unique_ptr<GradientAllreduce> make_nccl_allreduce(MPI_Comm comm, Backend& backend);

}  // namespace dtrain
