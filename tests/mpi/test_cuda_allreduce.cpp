// tests/mpi/test_cuda_allreduce.cpp — the NCCL gradient allreduce (src/dnn/cuda/nccl_allreduce.cpp)
// against the MPI one (src/sync/mpi_allreduce.cpp, staged through pinned memory) and against the
// closed-form sum, on device buffers of several sizes. Inputs are rank-seeded multiples of 0.25 so
// every partial sum is exact in fp32 and the comparison can be exact whatever the reduction order.
// Needs one GPU per rank on every node (NCCL rejects two ranks on one GPU); otherwise every rank
// skips together (the decision is collective, so no rank is left waiting in NCCL).
// Uses the MPI test executable's own main (MPI initialized once).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/sync/allreduce.hpp"

namespace dtrain {
namespace {

struct LocalInfo {
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
};

LocalInfo local_info(MPI_Comm comm) {
  LocalInfo li;
  MPI_Comm_rank(comm, &li.rank);
  MPI_Comm_size(comm, &li.size);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, li.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &li.local_rank);
  MPI_Comm_size(node, &li.local_size);
  MPI_Comm_free(&node);
  return li;
}

/// Empty when every rank of `comm` has its own GPU, else why not (same answer on every rank).
std::string collective_skip_reason(MPI_Comm comm, const LocalInfo& li) {
#if !defined(DTRAIN_HAVE_CUDA)
  (void)comm;
  (void)li;
  return "dtrain was built without CUDA";
#else
  const int gpus = cuda_device_count();
  int mine = gpus >= li.local_size ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
  if (all == 1) return {};
  return "some node has fewer GPUs than ranks (this rank sees " + std::to_string(gpus) + " for " +
         std::to_string(li.local_size) + " local ranks); NCCL needs one GPU per rank";
#endif
}

TEST(CudaAllreduce, RejectsNonCudaBackend) {
  auto cpu = make_cpu_backend();
  EXPECT_THROW(make_nccl_allreduce(MPI_COMM_WORLD, *cpu), Error);
}

TEST(CudaAllreduce, NcclMatchesMpiAndClosedForm) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const LocalInfo li = local_info(comm);
  const std::string reason = collective_skip_reason(comm, li);
  if (!reason.empty()) GTEST_SKIP() << "no CUDA device: " << reason;

  auto be = make_cuda_backend(select_gpu_for_local_rank(li.local_rank, li.local_size, false));
  const std::size_t max_n = (std::size_t(1) << 20) + 3;
  auto nccl = make_nccl_allreduce(comm, *be);
  auto mpi = make_mpi_allreduce(comm, *be, max_n);
  EXPECT_EQ(nccl->name(), "nccl");

  for (std::size_t n : {std::size_t(1), std::size_t(1000), max_n}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<float> h(n), expect(n);
    const float ranks_sum = 0.5f * float(li.size) * float(li.size + 1);  // Σ (r + 1)
    for (std::size_t i = 0; i < n; ++i) {
      const float k = 0.25f * float(i % 97);
      h[i] = float(li.rank + 1) * k;
      expect[i] = ranks_sum * k;
    }
    DeviceBuffer<float> a(*be, n), b(*be, n);
    be->copy_to_device(a.data(), h.data(), n * sizeof(float));
    be->copy_to_device(b.data(), h.data(), n * sizeof(float));
    nccl->allreduce_sum(a.data(), n);
    mpi->allreduce_sum(b.data(), n);
    std::vector<float> ra(n), rb(n);
    be->copy_to_host(ra.data(), a.data(), n * sizeof(float));
    be->copy_to_host(rb.data(), b.data(), n * sizeof(float));
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += (ra[i] != expect[i]) + (rb[i] != expect[i]);
    EXPECT_EQ(wrong, 0u) << "first values nccl " << ra[1 % n] << " mpi " << rb[1 % n]
                         << " expected " << expect[1 % n];
  }
  nccl->allreduce_sum(nullptr, 0);  // n == 0 is a no-op on every rank
}

}  // namespace
}  // namespace dtrain
