// dtrain/collectives/wire.cpp — 16-bit gradients on the wire, summed in fp32 (see
// collectives/wire.hpp).
#include "dtrain/collectives/wire.hpp"

#include <climits>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

void check_count(std::size_t n) {
  DT_REQUIRE(n < static_cast<std::size_t>(INT_MAX),
             "--wire-dtype: a sum of " + std::to_string(n) + " values exceeds MPI's count limit");
}

}  // namespace

WireAllreduce::WireAllreduce(MPI_Comm comm, WireDtype w) : comm_(comm), wire_(w) {
  DT_CHECK_MPI(MPI_Comm_rank(comm, &rank_));
  DT_CHECK_MPI(MPI_Comm_size(comm, &size_));
  counts_.resize(size_);
  displs_.resize(size_);
}

void WireAllreduce::sum(float* data, std::size_t n, bool blocking, double timeout_s,
                        const std::string& what) {
  if (n == 0) return;
  check_count(n);
  if (wire_ == WireDtype::fp32) {
    if (blocking) {
      DT_CHECK_MPI(
          MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_));
    } else {
      MPI_Request req = MPI_REQUEST_NULL;
      DT_CHECK_MPI(
          MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_, &req));
      wait_one(req, timeout_s, what);
    }
    return;
  }
  send_.resize(n);
  encode_wire(wire_, data, send_.data(), n);
  sum_encoded(send_.data(), n, blocking, timeout_s, what);
  decode_wire(wire_, send_.data(), data, n);
}

void WireAllreduce::sum_encoded(std::uint16_t* v, std::size_t n, bool blocking, double timeout_s,
                                const std::string& what) {
  if (n == 0) return;
  DT_ASSERT(wire_ != WireDtype::fp32, "WireAllreduce::sum_encoded: fp32 has no 16-bit encoding");
  check_count(n);
  // Segment j of the buffer, [displs_[j], displs_[j] + counts_[j]), is summed by rank j.
  const auto W = static_cast<std::size_t>(size_);
  for (std::size_t j = 0; j < W; ++j) {
    const std::size_t lo = j * n / W, hi = (j + 1) * n / W;
    displs_[j] = static_cast<int>(lo);
    counts_[j] = static_cast<int>(hi - lo);
  }
  const int mine = counts_[rank_];
  recv_.resize(W * static_cast<std::size_t>(mine));
  std::vector<int> rcounts(W, mine), rdispls(W);
  for (std::size_t i = 0; i < W; ++i) rdispls[i] = static_cast<int>(i) * mine;
  auto run = [&](auto post_blocking, auto post_nonblocking, const char* phase) {
    if (blocking) {
      DT_CHECK_MPI(post_blocking());
    } else {
      MPI_Request req = MPI_REQUEST_NULL;
      DT_CHECK_MPI(post_nonblocking(&req));
      wait_one(req, timeout_s, what + " (" + phase + ")");
    }
  };
  // 1. Reduce-scatter: everyone's segment j to rank j, 16 bits a value.
  run(
      [&] {
        return MPI_Alltoallv(v, counts_.data(), displs_.data(), MPI_UINT16_T, recv_.data(),
                             rcounts.data(), rdispls.data(), MPI_UINT16_T, comm_);
      },
      [&](MPI_Request* r) {
        return MPI_Ialltoallv(v, counts_.data(), displs_.data(), MPI_UINT16_T, recv_.data(),
                              rcounts.data(), rdispls.data(), MPI_UINT16_T, comm_, r);
      },
      "16-bit reduce-scatter");
  // 2. The segment's sum in fp32, in rank order (the same bits whatever the arrival order).
  const auto m = static_cast<std::size_t>(mine);
  if (m > 0) reduce_wire_rows(wire_, recv_.data(), m, W, v + displs_[rank_], m);
  // 3. Allgather of the 16-bit sums; every rank decodes the same bits.
  run(
      [&] {
        return MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, v, counts_.data(), displs_.data(),
                              MPI_UINT16_T, comm_);
      },
      [&](MPI_Request* r) {
        return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, v, counts_.data(),
                               displs_.data(), MPI_UINT16_T, comm_, r);
      },
      "16-bit allgather");
}

}  // namespace dtrain
