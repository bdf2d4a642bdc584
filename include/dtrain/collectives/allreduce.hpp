// dtrain/collectives/allreduce.hpp — gradient averaging for synchronous data-parallel training.
//
// Every worker calls allreduce_sum() on its gradient buffer in the same order; afterwards all hold
// the element-wise sum (the trainer pre-scales gradients by 1/global_batch so the sum is the mean).
// Implementations: MPI_Allreduce on host memory (CPU backend, or GPU gradients staged through
// pinned host buffers: `--allreduce mpi`), and NCCL on device memory (`--allreduce nccl`,
// Horovod/DDP style).
#pragma once

#include <climits>
#include <cstddef>
#include <memory>
#include <string>

#include <mpi.h>

#include "dtrain/collectives/wire.hpp"
#include "dtrain/dnn/backend.hpp"

namespace dtrain {

class GradientAllreduce {
 public:
  virtual ~GradientAllreduce() = default;
  /// In place: data[i] = Σ_workers data[i], data a device pointer of the trainer's backend,
  /// n floats. Collective over the worker communicator; blocks until the result is in `data`.
  /// Throws LibraryError when an MPI, CUDA or NCCL call fails and TimeoutError when the sum does
  /// not complete within comm_timeout() seconds (NCCL: the communicator is aborted first). The
  /// MPI version staging a GPU's data through host memory throws Error when n > max_floats.
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
  /// Returns once every sum start_sum() queued is in its `data`. NCCL: polls its stream and
  /// ncclCommGetAsyncError; throws LibraryError on an NCCL or CUDA error, TimeoutError naming the
  /// ncclAllReduce when the sums do not finish within comm_timeout() seconds (the communicator
  /// is aborted first in both cases). Default (MPI): a no-op.
  virtual void wait() {}
  /// True when start_sum returns before its sum is done (NCCL, on its own stream).
  [[nodiscard]] virtual bool asynchronous() const { return false; }
};

/// MPI_Allreduce over `comm`; stages through host memory when the backend is a GPU: a pinned
/// staging buffer of `max_floats` floats (ignored on the CPU backend), the largest n that
/// allreduce_sum then takes. A sum of n floats is posted as ceil(n / max_count) MPI_Iallreduce
/// calls of at most `max_count` floats (an MPI count is an int: default INT_MAX; lower only to
/// test the split). `wire`: bf16 or fp16 send the values in 16 bits and sum them in fp32 at the
/// receiver (collectives/wire.hpp, --wire-dtype), one WireAllreduce per max_count floats. The
/// communicator is borrowed and must outlive the object. Throws InputError for max_count outside
/// [1, INT_MAX], LibraryError when the staging buffer cannot be allocated.
std::unique_ptr<GradientAllreduce> make_mpi_allreduce(MPI_Comm comm, Backend& backend,
                                                      std::size_t max_floats,
                                                      std::size_t max_count = INT_MAX,
                                                      WireDtype wire = WireDtype::fp32);

/// ncclAllReduce over the ranks of `comm` (unique id broadcast with MPI), on its own stream.
/// Collective over `comm`. Throws Error when built without CUDA or when `backend` is not a CUDA
/// backend, LibraryError when an MPI, CUDA or NCCL set-up call fails (ncclCommInitRank: e.g. two
/// ranks on one GPU), TimeoutError when the unique id's broadcast exceeds comm_timeout() seconds.
std::unique_ptr<GradientAllreduce> make_nccl_allreduce(MPI_Comm comm, Backend& backend);

}  // namespace dtrain
