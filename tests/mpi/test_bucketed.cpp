// tests/mpi/test_bucketed.cpp — the bucketed gradient allreduce (collectives/bucketed.hpp): bucket
// plans; exact sums of rank-dependent data for many bucket sizes and hand-over orders, the flag
// riding in the first bucket; a non-finite value on one rank seen by every rank; and a model's
// gradients summed bucket by bucket while backward runs equal the same gradients summed in one
// allreduce after backward (bit for bit with 2 ranks: a + b = b + a; with more, MPI picks its
// algorithm by message size and may add in another order, so to 1e-5 relative) and are the same on
// every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/mpi_world.hpp"
#include "dtrain/collectives/bucketed.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {
namespace {

using test::world_rank;
using test::world_size;

TEST(BucketPlan, CutsFromTheEndAndCoversEverything) {
  const auto b = plan_buckets(10, 3);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].begin, 7u);
  EXPECT_EQ(b[0].end, 10u);
  EXPECT_EQ(b[1].begin, 4u);
  EXPECT_EQ(b[2].begin, 1u);
  EXPECT_EQ(b[3].begin, 0u);
  EXPECT_EQ(b[3].end, 1u);
  for (std::size_t k = 1; k < b.size(); ++k) EXPECT_EQ(b[k].end, b[k - 1].begin);
  EXPECT_EQ(plan_buckets(10, 0).size(), 1u);
  EXPECT_EQ(plan_buckets(10, 10).size(), 1u);
  EXPECT_EQ(plan_buckets(10, 9).size(), 2u);
  const auto empty = plan_buckets(0, 4);
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].end, 0u);
}

TEST(BucketedAllreduce, SumsEveryBucketAndTheFlag) {
  const int rank = world_rank(), W = world_size();
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{100003}}) {
    for (std::size_t bucket : {std::size_t{0}, std::size_t{7}, std::size_t{4096}}) {
      for (bool overlap : {true, false}) {
        BucketedAllreduce ar(MPI_COMM_WORLD, n, bucket, overlap);
        EXPECT_EQ(ar.buckets().size(), plan_buckets(n, bucket).size());
        for (int step = 0; step < 2; ++step) {  // the object is reused step after step
          std::vector<float> data(n + 1);
          // Small integers: every partial sum is exact, whatever order MPI adds in.
          for (std::size_t i = 0; i < n; ++i)
            data[i] = static_cast<float>(rank * 100 + static_cast<int>(i % 97) + step);
          ar.begin(data.data(), rank == W - 1 ? 1.0f : 0.0f);
          // Backward reports ever smaller offsets, some of them repeated.
          for (std::size_t from = n; from > 0; from = from > 333 ? from - 333 : 0) {
            ar.ready(from);
            ar.ready(from);
          }
          const BucketedOutcome o = ar.finish(60);
          EXPECT_EQ(o.flag, 1.0f) << "n " << n << " bucket " << bucket;
          EXPECT_GE(o.wait_seconds, 0.0);
          std::size_t bad = 0;
          for (std::size_t i = 0; i < n; ++i) {
            const float want = 100.0f * static_cast<float>(W * (W - 1) / 2) +
                               static_cast<float>(W * (static_cast<int>(i % 97) + step));
            if (data[i] != want && bad++ == 0)
              ADD_FAILURE() << "n " << n << " bucket " << bucket << " element " << i << " is "
                            << data[i] << ", expected " << want;
          }
          EXPECT_EQ(bad, 0u);
        }
      }
    }
  }
}

TEST(BucketedAllreduce, NonFiniteOnOneRankReachesEveryRanksOptimizer) {
  // No flag is needed for finiteness: the non-finite value is in every rank's sum, and the CPU
  // optimizer reports it in its own pass (Backend::optimizer_update).
  const int rank = world_rank();
  const std::size_t n = 5000;
  auto cpu = make_cpu_backend();
  BucketedAllreduce ar(MPI_COMM_WORLD, n, 1000, true);
  OptimizerUpdate u;
  u.kind = OptimizerKind::momentum;
  u.lr = 0.1f;
  u.momentum = 0.9f;
  std::vector<float> p(n, 1.0f), m(n, 0.0f);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (std::size_t where : {std::size_t{0}, std::size_t{2500}, n - 1}) {
      std::vector<float> data(n + 1, 0.5f);
      if (rank == 0) data[where] = bad;
      ar.begin(data.data(), 0.0f);
      EXPECT_EQ(ar.finish(60).flag, 0.0f);
      EXPECT_FALSE(std::isfinite(data[where])) << "value " << bad << " at " << where;
      EXPECT_FALSE(cpu->optimizer_update(u, p.data(), data.data(), m.data(), nullptr, n));
    }
  }
  std::vector<float> clean(n + 1, 0.5f);
  ar.begin(clean.data(), 0.0f);
  (void)ar.finish(60);
  std::fill(p.begin(), p.end(), 1.0f);
  std::fill(m.begin(), m.end(), 0.0f);
  EXPECT_TRUE(cpu->optimizer_update(u, p.data(), clean.data(), m.data(), nullptr, n));
}

TEST(BucketedAllreduce, GradientsSummedDuringBackwardEqualOneAllreduceAfterIt) {
  const int rank = world_rank();
  auto cpu = make_cpu_backend();
  const std::vector<std::string> layers = {"conv filters=4 kernel=3 pad=1 name=c1",
                                           "batchnorm",
                                           "relu",
                                           "conv filters=4 kernel=3 pad=1 name=c2",
                                           "add input=c1,c2",
                                           "maxpool kernel=2",
                                           "flatten",
                                           "dense units=16",
                                           "relu",
                                           "dense"};
  constexpr int B = 4, kClasses = 5;
  const Shape sample{1, 2, 8, 8};
  Model model(*cpu, layers, sample, kClasses, B);
  model.initialize(7);
  const std::size_t P = model.param_count();
  std::vector<float> x(B * sample.sample_count());
  std::vector<std::int32_t> y(B);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(0.37f * static_cast<float>(i + 101 * rank));
  for (int i = 0; i < B; ++i) y[i] = (i + rank) % kClasses;
  DeviceBuffer<float> dx(*cpu, x.size()), stats(*cpu, kStatsFloats);
  DeviceBuffer<std::int32_t> dy(*cpu, B);
  cpu->copy_to_device(dx.data(), x.data(), x.size() * sizeof(float));
  cpu->copy_to_device(dy.data(), y.data(), y.size() * sizeof(std::int32_t));

  // After backward: one allreduce of the whole gradient.
  model.train_step(dx.data(), dy.data(), B, 0.125f, 3, stats.data());
  std::vector<float> after(model.grads(), model.grads() + P);
  ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, after.data(), static_cast<int>(P), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD),
            MPI_SUCCESS);

  // During backward: small buckets handed over as the model reports final gradients.
  BucketedAllreduce ar(MPI_COMM_WORLD, P, 64, true);
  ASSERT_GT(ar.buckets().size(), 3u);
  std::vector<std::size_t> reported;
  ar.begin(model.grads(), 0.0f);
  model.train_step(dx.data(), dy.data(), B, 0.125f, 3, stats.data(), [&](std::size_t from) {
    reported.push_back(from);
    ar.ready(from);
  });
  (void)ar.finish(60);
  ASSERT_FALSE(reported.empty());
  EXPECT_EQ(reported.back(), 0u);
  for (std::size_t k = 1; k < reported.size(); ++k) EXPECT_LE(reported[k], reported[k - 1]);
  EXPECT_LT(reported.front(), P) << "the last layer has parameters: final before the first layer's";
  const bool exact = world_size() == 2;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < P; ++i) {
    const float g = model.grads()[i], want = after[i];
    const bool ok = exact ? g == want : std::fabs(g - want) <= 1e-5f * (std::fabs(want) + 1e-6f);
    if (!ok && bad++ == 0) ADD_FAILURE() << "gradient " << i << ": " << g << " vs " << want;
  }
  EXPECT_EQ(bad, 0u);
  // Every rank holds the same sums (the replicas stay identical).
  std::vector<float> lo(model.grads(), model.grads() + P), hi = lo;
  MPI_Allreduce(MPI_IN_PLACE, lo.data(), static_cast<int>(P), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, hi.data(), static_cast<int>(P), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi);
}

}  // namespace
}  // namespace dtrain
