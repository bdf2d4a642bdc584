// src/collectives/nccl_allreduce.cpp — make_nccl_allreduce() of dtrain/collectives/allreduce.hpp:
// in-place ncclAllReduce(sum, float) over the ranks of an MPI communicator, Horovod / PyTorch-DDP
// style.
//
// Protocol: rank 0 of `comm` calls ncclGetUniqueId and MPI_Bcasts the 128-byte id over `comm`;
// every rank then calls ncclCommInitRank(size, id, rank) on its current GPU (the backend's). Both
// calls are collective over `comm`, so every rank must construct the object at the same point
// (between them every rank agrees that its device, stream and event were set up, and a watchdog
// ends the job if the join outlives --timeout: ncclCommInitRank itself has no deadline). Each
// sum (start_sum(): a bucket, while backward runs; allreduce_sum(): start and wait) runs on the
// object's own stream after an event recorded on the backend's stream (so the gradients computed
// there are complete, and the kernels queued later overlap it); wait() then waits for the NCCL
// stream with a deadline, polling ncclCommGetAsyncError. On any NCCL error or timeout the
// communicator is aborted (ncclCommAbort, as PyTorch's NCCLComm::abort) before LibraryError is
// thrown, so that no rank stays blocked inside NCCL.
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "../dnn/cuda/cuda_backend.hpp"
#include "dtrain/collectives/allreduce.hpp"
#include "dtrain/comm/guard.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain {
namespace {

using cuda::CudaBackend;

/// ncclGetLastError() as a string ("" when NCCL has nothing to add).
std::string nccl_last_error(ncclComm_t comm) {
  const char* e = ncclGetLastError(comm);
  return e != nullptr ? std::string(e) : std::string();
}

/// Owner of an NCCL communicator: destroy on normal exit, abort after an error.
class NcclComm {
 public:
  NcclComm() = default;
  /// ncclCommDestroy on a normal exit. While an exception unwinds the stack (a peer died, a
  /// deadline passed) ncclCommDestroy can wait forever for the dead peer: abort instead.
  ~NcclComm() {
    if (comm_ == nullptr || aborted_) return;
    if (std::uncaught_exceptions() > 0) {
      DT_CHECK_NCCL_NOTHROW(ncclCommAbort(comm_));
      return;
    }
    DT_CHECK_NCCL_NOTHROW(ncclCommDestroy(comm_));
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  /// Collective over the `size` ranks sharing `id`. ncclCommInitRank blocks until every rank has
  /// joined, and no abort can reach a communicator that does not exist yet: a watchdog thread
  /// ends the job past `timeout_s` (TimeoutError's message, then MPI_Abort with its exit code,
  /// as the bucket watchdog in collectives/bucketed.cpp does), so a rank lost inside NCCL's set-up
  /// cannot hold the others forever.
  void init(int size, const ncclUniqueId& id, int rank, double timeout_s) {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread watchdog([&] {
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return done; })) return;
      log_error(TimeoutError(timeout_s,
                             "ncclCommInitRank (rank " + std::to_string(rank) + " of " +
                                 std::to_string(size) + " joining the NCCL communicator)",
                             "a peer rank is stuck, died, or cannot reach this one")
                    .what());
      MPI_Abort(MPI_COMM_WORLD, kExitFault);
    });
    const ncclResult_t r = ncclCommInitRank(&comm_, size, id, rank);
    {
      const std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_one();
    watchdog.join();
    if (r != ncclSuccess) {
      comm_ = nullptr;
      throw LibraryError(format_error(
          std::string("ncclCommInitRank failed: ") + ncclGetErrorString(r) + " — " +
              nccl_last_error(nullptr) +
              " (NCCL needs a distinct GPU per rank; ranks sharing a GPU must use --allreduce mpi)",
          __FILE__, __LINE__));
    }
  }
  /// Aborts the communicator (pending operations are cancelled); idempotent, never throws.
  void abort() noexcept {
    if (comm_ != nullptr && !aborted_) {
      DT_CHECK_NCCL_NOTHROW(ncclCommAbort(comm_));
      aborted_ = true;
    }
  }
  [[nodiscard]] ncclComm_t get() const noexcept { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
};

class NcclAllreduce final : public GradientAllreduce {
 public:
  NcclAllreduce(MPI_Comm comm, CudaBackend& be) : be_(be) {
    int rank = 0, size = 0;
    check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    // Rank 0 always broadcasts, with a status, so that a failure there cannot leave the others
    // waiting in MPI_Bcast.
    struct {
      int status;  // ncclResult_t of ncclGetUniqueId on rank 0
      ncclUniqueId id;
    } msg{};
    if (rank == 0) msg.status = static_cast<int>(ncclGetUniqueId(&msg.id));
    MPI_Request req = MPI_REQUEST_NULL;
    check_mpi(MPI_Ibcast(&msg, static_cast<int>(sizeof(msg)), MPI_BYTE, 0, comm, &req),
              "MPI_Ibcast of the NCCL unique id");
    wait_one(req, comm_timeout(), "broadcasting the NCCL unique id from rank 0");
    if (msg.status != ncclSuccess)
      throw LibraryError(format_error(std::string("ncclGetUniqueId failed on rank 0: ") +
                                          ncclGetErrorString(static_cast<ncclResult_t>(msg.status)),
                                      __FILE__, __LINE__));
    const ncclUniqueId& id = msg.id;
    // What can fail here happens before NCCL's blocking join, and every rank agrees that it
    // succeeded everywhere (with the deadline), so a rank failing it cannot leave the others
    // waiting in ncclCommInitRank.
    all_or_nothing(comm, [&] {
      DT_CHECK_CUDA(cudaSetDevice(be.gpu()));
      stream_ = cuda::Stream::create();
      ready_ = cuda::Event::create();
    });
    comm_.init(size, id, rank, comm_timeout());
  }

  ~NcclAllreduce() override {
    // Unwinding: a queued allreduce may wait for a dead peer forever; abort it before waiting.
    if (std::uncaught_exceptions() > 0) comm_.abort();
    if (stream_) DT_CHECK_CUDA_NOTHROW(cudaStreamSynchronize(stream_));
  }

  void allreduce_sum(float* data, std::size_t n) override {
    start_sum(data, n);
    wait();
  }

  void start_sum(float* data, std::size_t n) override {
    if (n == 0) return;
    // The event marks what the backend's stream has queued so far (the kernels that made these
    // gradients); the NCCL stream starts the sum after it, while later kernels keep computing.
    DT_CHECK_CUDA(cudaEventRecord(ready_, be_.stream()));
    DT_CHECK_CUDA(cudaStreamWaitEvent(stream_, ready_, 0));
    check_nccl(ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm_.get(), stream_),
               "ncclAllReduce");
    pending_ += n;
  }

  void wait() override {
    if (pending_ == 0) return;
    const std::size_t n = pending_;
    pending_ = 0;
    wait_with_deadline(n);
  }

  [[nodiscard]] bool asynchronous() const override { return true; }
  [[nodiscard]] std::string name() const override { return "nccl"; }

 private:
  static void check_mpi(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw LibraryError(
        format_error(std::string(what) + " failed: " + std::string(msg, len), __FILE__, __LINE__));
  }

  void check_nccl(ncclResult_t r, const char* what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    const std::string detail = nccl_last_error(comm_.get());
    comm_.abort();
    throw LibraryError(format_error(std::string(what) + " failed: " + ncclGetErrorString(r) +
                                        (detail.empty() ? "" : " — " + detail),
                                    __FILE__, __LINE__));
  }

  // Polls the NCCL stream so that an asynchronous NCCL error or a hung peer ends in an exception.
  void wait_with_deadline(std::size_t n) {
    // Same deadline as every other communication wait (--timeout, comm_timeout()).
    const double timeout_s = comm_timeout();
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_s));
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) {
        comm_.abort();
        DT_CHECK_CUDA(q);
      }
      ncclResult_t async = ncclSuccess;
      check_nccl(ncclCommGetAsyncError(comm_.get(), &async), "ncclCommGetAsyncError");
      check_nccl(async, "ncclAllReduce (asynchronous error)");
      if (std::chrono::steady_clock::now() > deadline) {
        int ranks = 0;
        (void)ncclCommCount(comm_.get(), &ranks);  // before the abort frees the communicator
        comm_.abort();
        throw TimeoutError(timeout_s,
                           "ncclAllReduce of " + std::to_string(n * sizeof(float)) +
                               " bytes over the " + std::to_string(ranks) + " workers",
                           "a peer died or the ranks called allreduce a different number of "
                           "times; communicator aborted");
      }
      nap_us(20);
    }
  }

  CudaBackend& be_;
  std::size_t pending_ = 0;  ///< floats started and not yet waited for
  cuda::Stream stream_;
  cuda::Event ready_;
  NcclComm comm_;  // declared last: destroyed first, while the stream still exists
};

}  // namespace

std::unique_ptr<GradientAllreduce> make_nccl_allreduce(MPI_Comm comm, Backend& backend) {
  return std::make_unique<NcclAllreduce>(comm, cuda::as_cuda_backend(backend));
}

}  // namespace dtrain
