// dtrain/collectives/mpi_allreduce.cpp — gradient sum with MPI_Iallreduce over the worker
// communicator, waited on with a deadline; GPU gradients are staged through pinned host memory
// because Debian's Open MPI is not CUDA-aware.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/collectives/allreduce.hpp"
#include "dtrain/comm/big_message.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

class MpiAllreduce final : public GradientAllreduce {
 public:
  MpiAllreduce(MPI_Comm comm, Backend& backend, std::size_t max_floats, std::size_t max_count,
               WireDtype wire)
      : comm_(comm), backend_(backend), max_count_(max_count) {
    DT_REQUIRE(max_count >= 1 && max_count <= kMpiMaxCount,
               "mpi allreduce: the count limit must be in [1, INT_MAX], got " +
                   std::to_string(max_count));
    if (backend.device() != Device::cpu) {
      staging_ = static_cast<float*>(backend.allocate_host(max_floats * sizeof(float)));
      capacity_ = max_floats;
    }
    if (wire != WireDtype::fp32) wire_ = std::make_unique<WireAllreduce>(comm, wire);
  }
  ~MpiAllreduce() override {
    if (staging_) backend_.deallocate_host(staging_);
  }
  MpiAllreduce(const MpiAllreduce&) = delete;
  MpiAllreduce& operator=(const MpiAllreduce&) = delete;

  void allreduce_sum(float* data, std::size_t n) override {
    float* host = data;
    if (staging_) {
      DT_ASSERT(n <= capacity_, "allreduce larger than its staging buffer");
      backend_.copy_to_host(staging_, data, n * sizeof(float));
      host = staging_;
    }
    if (wire_) {  // 16 bits on the wire, one piece of at most max_count_ floats after another
      for (std::size_t at = 0; at < n; at += max_count_)
        wire_->sum(host + at, std::min(max_count_, n - at), false, comm_timeout(),
                   "gradient allreduce over the workers (--wire-dtype " +
                       std::string(to_string(wire_->dtype())) + ")");
      if (staging_) backend_.copy_to_device(data, staging_, n * sizeof(float));
      return;
    }
    // One MPI_Iallreduce per max_count_ floats (an MPI count is an int): every piece posted, in
    // the same order on every rank, then waited for together.
    std::vector<MPI_Request> reqs;
    for (std::size_t at = 0; at < n; at += max_count_) {
      const std::size_t len = std::min(max_count_, n - at);
      reqs.emplace_back(MPI_REQUEST_NULL);
      DT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, host + at, static_cast<int>(len), MPI_FLOAT,
                                  MPI_SUM, comm_, &reqs.back()));
    }
    wait_all(reqs, comm_timeout(), "gradient allreduce over the workers");
    if (staging_) backend_.copy_to_device(data, staging_, n * sizeof(float));
  }
  [[nodiscard]] std::string name() const override { return "mpi"; }

 private:
  MPI_Comm comm_;
  Backend& backend_;
  float* staging_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t max_count_;                ///< floats per MPI_Iallreduce
  std::unique_ptr<WireAllreduce> wire_;  ///< --wire-dtype bf16|fp16
};

}  // namespace

std::unique_ptr<GradientAllreduce> make_mpi_allreduce(MPI_Comm comm, Backend& backend,
                                                      std::size_t max_floats, std::size_t max_count,
                                                      WireDtype wire) {
  return std::make_unique<MpiAllreduce>(comm, backend, max_floats, max_count, wire);
}

#ifndef DTRAIN_HAVE_CUDA
std::unique_ptr<GradientAllreduce> make_nccl_allreduce(MPI_Comm, Backend&) {
  throw Error("--allreduce nccl: dtrain was built without CUDA/NCCL");
}
#endif

}  // namespace dtrain
