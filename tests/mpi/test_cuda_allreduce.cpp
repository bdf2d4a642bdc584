// tests/mpi/test_cuda_allreduce.cpp — the NCCL gradient allreduce
// (src/collectives/nccl_allreduce.cpp) against the MPI one (src/collectives/mpi_allreduce.cpp,
// staged through pinned memory) and against the closed-form sum, on device buffers of several
// sizes. Inputs are rank-seeded multiples of 0.25 so every partial sum is exact in fp32 and the
// comparison can be exact whatever the reduction order. NCCL needs one GPU per rank on every node
// (it rejects two ranks on one GPU), the MPI staging path any GPU; otherwise every rank skips
// together (the decision is collective, so no rank is left waiting in NCCL). ctest also runs these
// with one rank (mpi_tests_np1_cuda), so that a one-GPU machine exercises NCCL.
// Uses the MPI test executable's own main (MPI initialized once).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "dtrain/collectives/allreduce.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"

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

/// Empty when every rank of `comm` can run the test, else why not (the same answer on every
/// rank: the decision is collective). `own_gpu`: NCCL needs a distinct GPU per rank; the MPI path
/// may share one. No GPU at all fails instead of skipping under DTRAIN_REQUIRE_GPU=1 (see
/// common/gpu.hpp); too few GPUs for NCCL with more ranks than GPUs stays a skip.
std::string collective_skip_reason(MPI_Comm comm, const LocalInfo& li, bool own_gpu) {
  const int gpus = cuda_device_count();
  int mine = gpus == 0 ? 0 : (own_gpu && gpus < li.local_size ? 1 : 2), all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
  if (all == 2) return {};
  if (all == 0)
    return "a rank sees no GPU (" + (gpus == 0 ? cuda_unavailable_reason() : "another rank") + ")";
  return "some node has fewer GPUs than ranks (this rank sees " + std::to_string(gpus) + " for " +
         std::to_string(li.local_size) + " local ranks); NCCL needs one GPU per rank";
}

/// Skips the test (fails it with DTRAIN_REQUIRE_GPU=1 when a rank has no GPU at all).
#define DT_COLLECTIVE_SKIP(comm, li, own_gpu)                                     \
  do {                                                                            \
    const std::string reason_ = collective_skip_reason(comm, li, own_gpu);        \
    if (!reason_.empty()) {                                                       \
      if (testing::gpu_required() && reason_.rfind("a rank sees no GPU", 0) == 0) \
        FAIL() << "DTRAIN_REQUIRE_GPU=1 but " << reason_;                         \
      GTEST_SKIP() << "no CUDA device: " << reason_;                              \
    }                                                                             \
  } while (0)

/// Fills `h` with rank-seeded multiples of 0.25 and `expect` with their sum over `size` ranks.
void exact_inputs(int rank, int size, std::size_t n, std::vector<float>& h,
                  std::vector<float>& expect) {
  h.resize(n);
  expect.resize(n);
  const float ranks_sum = 0.5f * float(size) * float(size + 1);  // Σ (r + 1)
  for (std::size_t i = 0; i < n; ++i) {
    const float k = 0.25f * float(i % 97);
    h[i] = float(rank + 1) * k;
    expect[i] = ranks_sum * k;
  }
}

/// Runs `reduce` on device copies of the exact inputs; a failure names the wrong elements.
template <typename Reduce>
void expect_exact_sum(Backend& be, const LocalInfo& li, std::size_t n, Reduce reduce) {
  std::vector<float> h, expect;
  exact_inputs(li.rank, li.size, n, h, expect);
  DeviceBuffer<float> a(be, n);
  be.copy_to_device(a.data(), h.data(), n * sizeof(float));
  reduce(a.data(), n);
  std::vector<float> r(n);
  be.copy_to_host(r.data(), a.data(), n * sizeof(float));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += r[i] != expect[i];
  EXPECT_EQ(wrong, 0u) << "n=" << n << ": r[1]=" << r[1 % n] << " expected " << expect[1 % n];
}

TEST(CudaAllreduce, RejectsNonCudaBackend) {
  auto cpu = make_cpu_backend();
  EXPECT_THROW(make_nccl_allreduce(MPI_COMM_WORLD, *cpu), Error);
}

TEST(CudaAllreduce, MpiStagingMatchesClosedForm) {
  // The MPI allreduce of device buffers, staged through pinned host memory; ranks may share a GPU.
  const MPI_Comm comm = MPI_COMM_WORLD;
  const LocalInfo li = local_info(comm);
  DT_COLLECTIVE_SKIP(comm, li, false);
  auto be = make_cuda_backend(select_gpu_for_local_rank(li.local_rank, li.local_size, true));
  const std::size_t max_n = (std::size_t(1) << 20) + 3;
  auto mpi = make_mpi_allreduce(comm, *be, max_n);
  EXPECT_FALSE(mpi->asynchronous());  // sums in start_sum: the exchange sums it after backward
  for (std::size_t n : {std::size_t(1), std::size_t(1000), max_n})
    expect_exact_sum(*be, li, n, [&](float* p, std::size_t k) { mpi->allreduce_sum(p, k); });
}

TEST(CudaAllreduce, NcclMatchesClosedForm) {
  // ncclAllReduce on the backend's GPU, whole and in buckets; one rank per GPU (a one-rank
  // communicator on one GPU too).
  const MPI_Comm comm = MPI_COMM_WORLD;
  const LocalInfo li = local_info(comm);
  DT_COLLECTIVE_SKIP(comm, li, true);
  auto be = make_cuda_backend(select_gpu_for_local_rank(li.local_rank, li.local_size, false));
  auto nccl = make_nccl_allreduce(comm, *be);
  EXPECT_EQ(nccl->name(), "nccl");
  for (std::size_t n : {std::size_t(1), std::size_t(1000), (std::size_t(1) << 20) + 3})
    expect_exact_sum(*be, li, n, [&](float* p, std::size_t k) { nccl->allreduce_sum(p, k); });
  nccl->allreduce_sum(nullptr, 0);  // n == 0 is a no-op on every rank
  // The sync exchange's buckets (train/allreduce_exchange.cpp): started from the end of the
  // buffer while the backend's stream still computes, each must sum what the kernels queued
  // before it wrote — here a scale by 2, queued and not waited for (undone after the wait: the
  // inputs are multiples of 0.25, so both scales are exact).
  EXPECT_TRUE(nccl->asynchronous());
  expect_exact_sum(*be, li, (std::size_t(1) << 22) + 5, [&](float* p, std::size_t k) {
    be->scale(p, 2.0f, k);
    nccl->start_sum(p + k / 2, k - k / 2);
    nccl->start_sum(p + 1, k / 2 - 1);
    nccl->start_sum(p, 1);
    nccl->wait();
    nccl->wait();  // nothing pending: returns at once
    be->scale(p, 0.5f, k);
  });
}

}  // namespace
}  // namespace dtrain
