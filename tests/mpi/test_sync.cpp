// tests/mpi/test_sync.cpp — synchronous data parallelism: the MPI gradient allreduce of W workers,
// each running Model::train_step on its slice of a fixed batch with grad_scale = 1/(global batch),
// equals one model's train_step on the whole W×B batch (grad_scale 1/(W·B)) computed in the same
// process — gradients to ~1e-5 relative, loss sums and correct counts too. Also make_mpi_allreduce
// on rank-dependent closed-form data (exact sums), for small, odd and large sizes.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "dtrain/collectives/allreduce.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {
namespace {

void world(int& rank, int& size) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
}

/// make_mpi_allreduce(max_count) sums rank-dependent data of the sizes given exactly on every rank.
void check_mpi_sums(std::size_t max_count, std::initializer_list<std::size_t> sizes) {
  int rank = 0, W = 1;
  world(rank, W);
  auto cpu = make_cpu_backend();
  auto ar = make_mpi_allreduce(MPI_COMM_WORLD, *cpu, 1 << 20, max_count);
  EXPECT_EQ(ar->name(), "mpi");
  for (std::size_t n : sizes) {
    DeviceBuffer<float> buf(*cpu, n);
    std::vector<float> host(n);
    // Small integers: every partial sum is exact, whatever order MPI adds in.
    for (std::size_t i = 0; i < n; ++i)
      host[i] = static_cast<float>(rank * 1000 + static_cast<int>(i % 4096)) - 7.0f;
    cpu->copy_to_device(buf.data(), host.data(), n * sizeof(float));
    ar->allreduce_sum(buf.data(), n);
    cpu->copy_to_host(host.data(), buf.data(), n * sizeof(float));
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float want = 1000.0f * static_cast<float>(W * (W - 1) / 2) +
                         static_cast<float>(W) * (static_cast<float>(i % 4096) - 7.0f);
      if (host[i] != want && bad++ == 0)
        ADD_FAILURE() << "n " << n << " element " << i << " is " << host[i] << ", expected "
                      << want;
    }
    EXPECT_EQ(bad, 0u) << "n " << n << ", max_count " << max_count;
  }
}

TEST(MpiAllreduce, SumsRankDependentData) { check_mpi_sums(INT_MAX, {1, 7, 1000, (1 << 20) - 3}); }

// Sums past the count limit go as several MPI_Iallreduce calls (an MPI count is an int): a
// lowered limit splits 2500 floats into 1000 + 1000 + 500, every element still summed once.
TEST(MpiAllreduce, SumsPastTheCountLimitInPieces) {
  check_mpi_sums(1000, {999, 1000, 1001, 2500});
  EXPECT_THROW(make_mpi_allreduce(MPI_COMM_WORLD, *make_cpu_backend(), 16, 0), InputError);
}

const std::vector<std::string> kLayers = {"conv filters=4 kernel=3 pad=1",
                                          "relu",
                                          "maxpool kernel=2",
                                          "flatten",
                                          "dense units=16",
                                          "relu",
                                          "dense"};

TEST(SyncDataParallel, AllreducedGradientsEqualTheWholeBatch) {
  int rank = 0, W = 1;
  world(rank, W);
  constexpr int B = 6, kClasses = 5;
  const Shape sample{1, 2, 8, 8};
  const std::size_t per = sample.sample_count();
  const int N = W * B;
  // A fixed global batch, identical on every rank.
  std::vector<float> x(static_cast<std::size_t>(N) * per);
  std::vector<std::int32_t> y(static_cast<std::size_t>(N));
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(std::sin(0.113 * static_cast<double>(i)) +
                              0.3 * std::cos(0.017 * static_cast<double>(i * i % 977)));
  for (int i = 0; i < N; ++i) y[i] = (i * 7 + 3) % kClasses;

  auto cpu = make_cpu_backend();
  // This worker: its slice, gradients scaled by 1/(W·B), summed over workers.
  Model mine(*cpu, kLayers, sample, kClasses, B);
  mine.initialize(11);
  const std::size_t P = mine.param_count();
  DeviceBuffer<float> xs(*cpu, B * per), stats(*cpu, kStatsFloats);
  DeviceBuffer<std::int32_t> ys(*cpu, B);
  cpu->copy_to_device(xs.data(), x.data() + static_cast<std::size_t>(rank) * B * per,
                      B * per * sizeof(float));
  cpu->copy_to_device(ys.data(), y.data() + static_cast<std::size_t>(rank) * B,
                      B * sizeof(std::int32_t));
  cpu->fill(stats.data(), 0.0f, kStatsFloats);
  mine.train_step(xs.data(), ys.data(), B, 1.0f / static_cast<float>(N), /*step_seed=*/5,
                  stats.data());
  auto ar = make_mpi_allreduce(MPI_COMM_WORLD, *cpu, P);
  ar->allreduce_sum(mine.grads(), P);
  std::vector<float> got(P);
  cpu->copy_to_host(got.data(), mine.grads(), P * sizeof(float));
  float local_stats[2];
  cpu->copy_to_host(local_stats, stats.data(), sizeof local_stats);
  float summed_stats[2];
  MPI_Allreduce(local_stats, summed_stats, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);

  // One process, the whole batch.
  Model whole(*cpu, kLayers, sample, kClasses, N);
  whole.initialize(11);
  ASSERT_EQ(whole.param_count(), P);
  DeviceBuffer<float> xa(*cpu, x.size()), sa(*cpu, kStatsFloats);
  DeviceBuffer<std::int32_t> ya(*cpu, y.size());
  cpu->copy_to_device(xa.data(), x.data(), x.size() * sizeof(float));
  cpu->copy_to_device(ya.data(), y.data(), y.size() * sizeof(std::int32_t));
  cpu->fill(sa.data(), 0.0f, kStatsFloats);
  whole.train_step(xa.data(), ya.data(), N, 1.0f / static_cast<float>(N), 5, sa.data());
  std::vector<float> want(P);
  cpu->copy_to_host(want.data(), whole.grads(), P * sizeof(float));
  float whole_stats[2];
  cpu->copy_to_host(whole_stats, sa.data(), sizeof whole_stats);

  float scale = 0.0f;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  ASSERT_GT(scale, 0.0f) << "the reference gradient is all zero: the test would prove nothing";
  for (const auto& t : whole.param_tensors()) {
    double num = 0, den = 0;
    for (std::size_t i = t.offset; i < t.offset + t.count; ++i) {
      num += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
      den += static_cast<double>(want[i]) * want[i];
      EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(std::fabs(want[i]), 1e-2f * scale))
          << "tensor " << t.name << " element " << i - t.offset;
    }
    EXPECT_LE(std::sqrt(num), 1e-5 * std::sqrt(den) + 1e-12) << "tensor " << t.name;
  }
  EXPECT_NEAR(summed_stats[0], whole_stats[0], 1e-5 * std::fabs(whole_stats[0]));  // Σ loss
  EXPECT_EQ(summed_stats[1], whole_stats[1]);                                      // # correct
}

}  // namespace
}  // namespace dtrain
