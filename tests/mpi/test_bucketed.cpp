// tests/mpi/test_bucketed.cpp — the bucketed gradient allreduce (collectives/bucketed.hpp): bucket
// plans (closed form; a graph model's tensors per bucket and the layer after whose backward each
// bucket is complete, the last-ready one the small end bucket); exact sums of rank-dependent data
// for many bucket sizes and hand-over orders, the flag riding in the first bucket; a non-finite
// value on one rank seen by every rank; and a model's gradients summed bucket by bucket while
// backward runs equal the same gradients summed in one allreduce after backward (bit for bit with
// 2 ranks: a + b = b + a; with more, MPI picks its algorithm by message size and may add in
// another order, so to 1e-5 relative) and are the same on every rank — for a residual and a
// branching model, with buckets of one size and with the training's plan.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "common/mpi_world.hpp"
#include "dtrain/collectives/bucketed.hpp"
#include "dtrain/comm/network.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {
namespace {

using test::world_rank;
using test::world_size;

/// Buckets as {begin, end} pairs, for whole-plan comparisons.
std::vector<std::pair<std::size_t, std::size_t>> ranges(const std::vector<Bucket>& b) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const Bucket& x : b) out.emplace_back(x.begin, x.end);
  return out;
}

using Ranges = std::vector<std::pair<std::size_t, std::size_t>>;

TEST(BucketPlan, SmallAtBothEndsDoublingToTheCapFromTheFront) {
  // s = 4 at both ends; from the front 4, 8, 16, 32, 32, then the remainder 4 below the first.
  EXPECT_EQ(ranges(plan_buckets(100, 32, 4)),
            (Ranges{{96, 100}, {92, 96}, {60, 92}, {28, 60}, {12, 28}, {4, 12}, {0, 4}}));
  // The end size is at most the cap: s = 3, no doubling past it.
  EXPECT_EQ(ranges(plan_buckets(10, 3, 8)), (Ranges{{7, 10}, {6, 7}, {3, 6}, {0, 3}}));
  // Just above one end bucket: two.
  EXPECT_EQ(ranges(plan_buckets(5, 32, 4)), (Ranges{{1, 5}, {0, 1}}));
  // The training's end size is a 25th of the cap (at least one float): 4 for 100, 1 for 10.
  EXPECT_EQ(end_bucket_floats(100), 4u);
  EXPECT_EQ(end_bucket_floats(10), 1u);
  EXPECT_EQ(ranges(plan_buckets(100, 100)), ranges(plan_buckets(100, 100, 4)));
  EXPECT_EQ(ranges(plan_buckets(10, 10)), (Ranges{{9, 10}, {7, 9}, {3, 7}, {1, 3}, {0, 1}}));
  // DDP's numbers at 25 MiB: ResNet-50's 25,557,032 floats (97.5 MiB) end with buckets of 16, 8,
  // 4, 2, 1 MiB, the last holding its stem and first stage (0.86 MiB), and begin with 1 MiB.
  const std::size_t MiB = (1 << 20) / 4, r50 = 25557032;
  EXPECT_EQ(end_bucket_floats(25 * MiB), MiB);
  const auto big = plan_buckets(r50, 25 * MiB);
  ASSERT_EQ(big.size(), 9u);
  EXPECT_EQ(big.front().begin, r50 - MiB);
  const std::vector<std::size_t> tail = {16 * MiB, 8 * MiB, 4 * MiB, 2 * MiB, MiB};
  for (std::size_t k = 0; k < tail.size(); ++k) {
    const Bucket& x = big[big.size() - tail.size() + k];
    EXPECT_EQ(x.end - x.begin, tail[k]) << k;
  }
  for (const auto& b : {big, plan_buckets(100, 32, 4), plan_buckets(1000003, 4096)}) {
    EXPECT_EQ(b.back().begin, 0u);  // contiguous, from the end down to 0
    for (std::size_t k = 1; k < b.size(); ++k) EXPECT_EQ(b[k].end, b[k - 1].begin);
  }
  // One bucket: no cap, or nothing beyond one end bucket.
  EXPECT_EQ(ranges(plan_buckets(10, 0)), (Ranges{{0, 10}}));
  EXPECT_EQ(ranges(plan_buckets(4, 32, 4)), (Ranges{{0, 4}}));
  EXPECT_EQ(ranges(plan_buckets(1, 7)), (Ranges{{0, 1}}));
  EXPECT_EQ(ranges(plan_buckets(0, 4)), (Ranges{{0, 0}}));
}

/// Contiguous from `count` down to 0, none empty (one empty bucket for count 0).
void expect_covers(const std::vector<Bucket>& b, std::size_t count) {
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.front().end, count);
  EXPECT_EQ(b.back().begin, 0u);
  for (std::size_t k = 1; k < b.size(); ++k) {
    EXPECT_EQ(b[k].end, b[k - 1].begin) << k;
    EXPECT_LT(b[k].begin, b[k].end) << k;
  }
}

/// A ring of p ranks with α µs and β GB/s, v bytes a value.
RingCost ring(int p, double alpha_us, double beta_gb_s, double v = 4) {
  RingCost r;
  r.ranks = p;
  r.alpha_s = alpha_us * 1e-6;
  r.bytes_per_s = beta_gb_s * 1e9;
  r.value_bytes = v;
  return r;
}

TEST(BucketPlan, LatencyAwareMinimumIsPAlphaBetaOverF) {
  // 2(p−1)α ≤ f·2(p−1)/p·bytes/β ⇔ bytes ≥ p·α·β/f: 512 ranks, 2 µs, 25 GB/s (HDR InfiniBand):
  // 25.6 MB, 6.4 M fp32 values or 12.8 M 16-bit ones; f = 1/10: ten times that.
  EXPECT_EQ(latency_min_bucket_floats(ring(512, 2, 25)), 6400000u);
  EXPECT_EQ(latency_min_bucket_floats(ring(512, 2, 25, 2)), 12800000u);
  RingCost strict = ring(512, 2, 25);
  strict.latency_share = 0.1;
  EXPECT_EQ(latency_min_bucket_floats(strict), 64000000u);
  EXPECT_EQ(latency_min_bucket_floats(ring(3, 1, 1e-3)), 1u);  // 3 bytes = 0.75 float: ⌈⌉
  EXPECT_EQ(latency_min_bucket_floats(ring(1, 2, 25)), 0u);    // no ring
  EXPECT_EQ(latency_min_bucket_floats(ring(8, 0, 25)), 0u);    // no latency
  // A link's ring: hdr-ib unshared (β = 25 GB/s each); shm shared by the ring's p ranks.
  const RingCost ib = ring_cost(parse_link("hdr-ib", "--bucket-link"), 64, 2);
  EXPECT_EQ(ib.ranks, 64);
  EXPECT_DOUBLE_EQ(ib.alpha_s, 2e-6);
  EXPECT_DOUBLE_EQ(ib.bytes_per_s, 25e9);
  EXPECT_EQ(ib.value_bytes, 2);
  EXPECT_DOUBLE_EQ(ring_cost(parse_link("shm", "--bucket-link"), 4, 4).bytes_per_s, 6.2e9 / 4);
  for (const RingCost& bad : {ring(0, 2, 25), ring(2, -1, 25), ring(2, 2, 0), ring(2, 2, 25, 3),
                              ring(2, std::nan(""), 25)})
    EXPECT_THROW(latency_min_bucket_floats(bad), InputError);
  RingCost zero_f = ring(2, 2, 25);
  zero_f.latency_share = 0;
  EXPECT_THROW(plan_buckets(100, 10, zero_f), InputError);
}

TEST(BucketPlan, LatencyAwareKeepsSmallRingsAndGrowsBucketsOnLargeOnes) {
  const std::size_t MiB = (1 << 20) / 4, r50 = 25557032, cap = 25 * MiB;
  const Link shm = parse_link("shm", "--bucket-link"), ib = parse_link("hdr-ib", "--bucket-link");
  // Minimum below the end size (1 MiB = 262,144 floats): exactly today's plan — 2 ranks on one
  // host (3,100 floats; caps from 4 MiB), 8 ranks on HDR InfiniBand (100,000; from 25 MiB).
  for (std::size_t c : {std::size_t{0}, 4 * MiB, cap, 256 * MiB}) {
    for (std::size_t n : {std::size_t{0}, std::size_t{100}, std::size_t{1000003}, r50}) {
      EXPECT_EQ(plan_buckets(n, c, ring_cost(shm, 2, 4)), plan_buckets(n, c)) << n << " " << c;
      if (c >= 25 * MiB)
        EXPECT_EQ(plan_buckets(n, c, ring_cost(ib, 8, 4)), plan_buckets(n, c)) << n << " " << c;
    }
  }
  // 512 ranks on HDR InfiniBand: m = 6.4 M floats > 1 MiB. plan_buckets(r50, cap, m): the first
  // [r50 − m, r50); from the front m, then the cap 6,553,600, then the remainder 6,203,432 < m,
  // joined to the first: three buckets instead of nine.
  const auto big = plan_buckets(r50, cap, ring_cost(ib, 512, 4));
  EXPECT_EQ(ranges(big), (Ranges{{12953600, r50}, {6400000, 12953600}, {0, 6400000}}));
  // A cap below the minimum rises to it: from the front m, m, then 6,357,032 joined to the first.
  EXPECT_EQ(ranges(plan_buckets(r50, MiB, ring_cost(ib, 512, 4))),
            (Ranges{{12800000, r50}, {6400000, 12800000}, {0, 6400000}}));
  // Fewer than two minimums: one bucket.
  EXPECT_EQ(ranges(plan_buckets(12799999, cap, ring_cost(ib, 512, 4))), (Ranges{{0, 12799999}}));
}

TEST(BucketPlan, LatencyAwareIsMonotoneInAlphaRanksAndValueBytes) {
  const std::size_t MiB = (1 << 20) / 4, r50 = 25557032;
  // Larger α or p: never more buckets, never a smaller smallest bucket; every float once,
  // contiguous, from the last layers down to the first.
  const auto smallest = [](const std::vector<Bucket>& b) {
    std::size_t m = b.front().end - b.front().begin;
    for (const Bucket& x : b) m = std::min(m, x.end - x.begin);
    return m;
  };
  for (std::size_t cap : {MiB, 25 * MiB, 256 * MiB}) {
    std::vector<Bucket> prev = plan_buckets(r50, cap);
    for (double alpha : {0.1, 1.0, 2.0, 5.0, 25.0, 100.0}) {
      const auto b = plan_buckets(r50, cap, ring(64, alpha, 25));
      expect_covers(b, r50);
      EXPECT_LE(b.size(), prev.size()) << alpha;
      EXPECT_GE(smallest(b), smallest(prev)) << alpha;
      prev = b;
    }
    prev = plan_buckets(r50, cap);
    for (int p : {2, 8, 64, 128, 512, 4096}) {
      const auto b = plan_buckets(r50, cap, ring(p, 2, 25));
      expect_covers(b, r50);
      EXPECT_LE(b.size(), prev.size()) << p;
      EXPECT_GE(smallest(b), smallest(prev)) << p;
      const std::size_t m = latency_min_bucket_floats(ring(p, 2, 25));
      if (m > end_bucket_floats(cap) && b.size() > 1) {
        EXPECT_GE(smallest(b), m) << p;
        EXPECT_EQ(b.back().end, m) << p;  // the end bucket is the minimum
        EXPECT_LE(b.size(), r50 / m) << p;
      }
      prev = b;
    }
    // 16-bit values: the same bytes are twice the floats, so never more buckets than fp32.
    for (int p : {64, 512})
      EXPECT_LE(plan_buckets(r50, cap, ring(p, 2, 25, 2)).size(),
                plan_buckets(r50, cap, ring(p, 2, 25, 4)).size());
  }
  // 64 ranks, 2 µs, 25 GB/s: m = 800,000 fp32 floats, 1,600,000 16-bit ones (the end buckets).
  EXPECT_EQ(plan_buckets(r50, 25 * MiB, ring(64, 2, 25)).back().end, 800000u);
  EXPECT_EQ(plan_buckets(r50, 25 * MiB, ring(64, 2, 25, 2)).back().end, 1600000u);
}

TEST(BucketPlan, ProbedRingIsTheChiefsOnEveryRank) {
  // Every rank plans with the chief's measurement, so their buckets agree (a plan that differs
  // between ranks would sum different ranges); one rank: no ring, today's plan.
  const RingCost r = probe_ring(MPI_COMM_WORLD, 2);
  EXPECT_EQ(r.ranks, world_size());
  EXPECT_EQ(r.value_bytes, 2);
  if (world_size() == 1) {
    EXPECT_EQ(r.alpha_s, 0);
    return;
  }
  EXPECT_TRUE(std::isfinite(r.alpha_s) && r.alpha_s > 0) << r.alpha_s;
  EXPECT_TRUE(std::isfinite(r.bytes_per_s) && r.bytes_per_s > 0) << r.bytes_per_s;
  double mine[2] = {r.alpha_s, r.bytes_per_s}, chief[2] = {r.alpha_s, r.bytes_per_s};
  MPI_Bcast(chief, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  EXPECT_EQ(mine[0], chief[0]);
  EXPECT_EQ(mine[1], chief[1]);
  const std::size_t n = 100003, bucket = 64;
  const std::vector<Bucket> plan = plan_buckets(n, bucket, r);
  expect_covers(plan, n);
  unsigned long long count = plan.size(), most = 0;
  MPI_Allreduce(&count, &most, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(count, most);
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

/// The bucketed sums `got` against the one allreduce after backward: bit for bit with 2 ranks
/// (a + b = b + a), to 1e-5 relative with more (MPI picks its algorithm by message size and may
/// add in another order); backward reported ever smaller offsets ending at 0; every rank holds
/// the same sums (the replicas stay identical).
void expect_sums_match(const float* got, const std::vector<float>& want,
                       const std::vector<std::size_t>& reported) {
  const std::size_t P = want.size();
  ASSERT_FALSE(reported.empty());
  EXPECT_EQ(reported.back(), 0u);
  for (std::size_t k = 1; k < reported.size(); ++k) EXPECT_LE(reported[k], reported[k - 1]);
  EXPECT_LT(reported.front(), P) << "the last layer has parameters: final before the first layer's";
  const bool exact = world_size() == 2;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < P; ++i) {
    const float g = got[i], w = want[i];
    const bool ok = exact ? g == w : std::fabs(g - w) <= 1e-5f * (std::fabs(w) + 1e-6f);
    if (!ok && bad++ == 0) ADD_FAILURE() << "gradient " << i << ": " << g << " vs " << w;
  }
  EXPECT_EQ(bad, 0u);
  std::vector<float> lo(got, got + P), hi = lo;
  MPI_Allreduce(MPI_IN_PLACE, lo.data(), static_cast<int>(P), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, hi.data(), static_cast<int>(P), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi);
}

/// A residual chain (an add) and an Inception-like block (two branches, a concat).
const std::vector<std::string> kResidual = {"conv filters=4 kernel=3 pad=1 name=c1",
                                            "batchnorm",
                                            "relu",
                                            "conv filters=4 kernel=3 pad=1 name=c2",
                                            "add input=c1,c2",
                                            "maxpool kernel=2",
                                            "flatten",
                                            "dense units=16",
                                            "relu",
                                            "dense"};
const std::vector<std::string> kBranches = {"conv filters=4 kernel=3 pad=1 name=stem",
                                            "relu name=r",
                                            "conv filters=2 kernel=1 input=r name=b1",
                                            "conv filters=3 kernel=3 pad=1 input=r name=b2",
                                            "concat input=b1,b2",
                                            "batchnorm",
                                            "relu",
                                            "maxpool kernel=2",
                                            "flatten",
                                            "dense"};

/// A model on this rank's batch (rank-seeded inputs and labels), the same initial parameters on
/// every rank; step() runs one training step, telling `on_final` what backward makes final.
struct RankStep {
  static constexpr int B = 4;
  RankStep(const std::vector<std::string>& layers, const Shape& sample, int classes)
      : cpu(make_cpu_backend()), model(*cpu, layers, sample, classes, B),
        x(*cpu, B * sample.sample_count()), y(*cpu, B), stats(*cpu, kStatsFloats) {
    model.initialize(7);
    const int rank = world_rank();
    std::vector<float> hx(B * sample.sample_count());
    std::vector<std::int32_t> hy(B);
    for (std::size_t i = 0; i < hx.size(); ++i)
      hx[i] = std::sin(0.37f * static_cast<float>(i + 101 * rank));
    for (int i = 0; i < B; ++i) hy[i] = (i + rank) % classes;
    cpu->copy_to_device(x.data(), hx.data(), hx.size() * sizeof(float));
    cpu->copy_to_device(y.data(), hy.data(), hy.size() * sizeof(std::int32_t));
  }
  void step(const GradsFinal& on_final = {}) {
    model.train_step(x.data(), y.data(), B, 0.125f, 3, stats.data(), on_final);
  }
  std::unique_ptr<Backend> cpu;
  Model model;
  DeviceBuffer<float> x;
  DeviceBuffer<std::int32_t> y;
  DeviceBuffer<float> stats;
};

TEST(BucketPlan, BranchesOfAGraphModelFillTheBucketsInBackwardOrder) {
  RankStep r(kBranches, Shape{1, 2, 4, 4}, 3);
  // Parameters in line order: stem 4·2·3·3 + 4 = 76, b1 2·4 + 2 = 10, b2 3·4·3·3 + 3 = 111,
  // batchnorm γ, β 5 + 5, dense 3·(5·2·2) + 3 = 63: 270 floats.
  std::vector<std::pair<std::string, std::size_t>> offsets;
  for (const TensorInfo& t : r.model.param_tensors()) offsets.emplace_back(t.key, t.offset);
  using Offsets = std::vector<std::pair<std::string, std::size_t>>;
  ASSERT_EQ(offsets, (Offsets{{"stem.weight", 0},
                              {"stem.bias", 72},
                              {"b1.weight", 76},
                              {"b1.bias", 84},
                              {"b2.weight", 86},
                              {"b2.bias", 194},
                              {"5.batchnorm.weight", 197},
                              {"5.batchnorm.bias", 202},
                              {"9.dense.weight", 207},
                              {"9.dense.bias", 267}}));
  ASSERT_EQ(r.model.param_count(), 270u);
  // Backward runs the lines in reverse — the dense, the batchnorm, then branch b2 (line 3)
  // before b1 (line 2), the stem last — and after each line reports its first parameter.
  std::vector<std::size_t> from;
  r.step([&](std::size_t f) { from.push_back(f); });
  EXPECT_EQ(from, (std::vector<std::size_t>{207, 207, 207, 207, 197, 197, 86, 76, 76, 0}));
  // Buckets of at most 64 floats, 16 at both ends: which tensors share which bucket.
  const auto b = plan_buckets(270, 64, 16);
  ASSERT_EQ(ranges(b),
            (Ranges{{254, 270}, {240, 254}, {176, 240}, {112, 176}, {48, 112}, {16, 48}, {0, 16}}));
  std::vector<std::vector<std::string>> held(b.size());
  for (std::size_t k = 0; k < b.size(); ++k)
    for (const TensorInfo& t : r.model.param_tensors())
      if (t.offset < b[k].end && t.offset + t.count > b[k].begin) held[k].push_back(t.key);
  using Held = std::vector<std::vector<std::string>>;
  EXPECT_EQ(held, (Held{{"9.dense.weight", "9.dense.bias"},
                        {"9.dense.weight"},
                        {"b2.weight", "b2.bias", "5.batchnorm.weight", "5.batchnorm.bias",
                         "9.dense.weight"},
                        {"b2.weight"},
                        {"stem.weight", "stem.bias", "b1.weight", "b1.bias", "b2.weight"},
                        {"stem.weight"},
                        {"stem.weight"}}));
  // A bucket is complete once a report reaches its begin: after line 9 (the dense), line 3 (b2),
  // line 0 (the stem) — the last-ready bucket the small one, the first layers' 16 floats.
  const std::vector<std::size_t> after_line = {9, 9, 3, 3, 0, 0, 0};
  for (std::size_t k = 0; k < b.size(); ++k) {
    std::size_t i = 0;
    while (from[i] > b[k].begin) ++i;
    EXPECT_EQ(from.size() - 1 - i, after_line[k]) << "bucket " << k;
  }
  EXPECT_EQ(b.back().end - b.back().begin, 16u);
}

TEST(BucketedAllreduce, GradientsSummedDuringBackwardEqualOneAllreduceAfterIt) {
  struct Net {
    const std::vector<std::string>* layers;
    Shape sample;
    int classes;
  };
  for (const Net& net : {Net{&kResidual, Shape{1, 2, 8, 8}, 5}, Net{&kBranches, {1, 2, 4, 4}, 3}}) {
    RankStep r(*net.layers, net.sample, net.classes);
    const std::size_t P = r.model.param_count();
    // After backward: one allreduce of the whole gradient.
    r.step();
    std::vector<float> after(r.model.grads(), r.model.grads() + P);
    ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, after.data(), static_cast<int>(P), MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD),
              MPI_SUCCESS);
    // During backward, as the model reports final gradients: buckets of 64 floats (64 at both
    // ends too), and the training's plan at 64: 2 floats at both ends, doubling up to 64.
    for (const std::vector<Bucket>& plan : {plan_buckets(P, 64, 64), plan_buckets(P, 64)}) {
      BucketedAllreduce ar(MPI_COMM_WORLD, P, plan, true);
      ASSERT_GT(ar.buckets().size(), 3u);
      std::vector<std::size_t> reported;
      ar.begin(r.model.grads(), 0.0f);
      r.step([&](std::size_t from) {
        reported.push_back(from);
        ar.ready(from);
      });
      (void)ar.finish(60);
      expect_sums_match(r.model.grads(), after, reported);
    }
  }
}

}  // namespace
}  // namespace dtrain
