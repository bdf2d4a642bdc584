// tests/unit/test_scaling_model.cpp — the scaling model of `dtrain plan` (plan/scaling_model.hpp)
// on closed-form cases: the ring allreduce 2(n−1)/n·B/β + 2(n−1)α, a shared bus, the ring across
// nodes, the hierarchical sum, the ps round, the overlap of buckets with backward, a whole
// prediction, a node's CPU work over its cores, the wait for the slowest of W workers (the
// expected maximum of W normals); the link spec parser (comm/network.hpp); the profile's JSON
// (model/profile.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "dtrain/collectives/bucketed.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/comm/network.hpp"
#include "dtrain/model/profile.hpp"
#include "dtrain/plan/scaling_model.hpp"

namespace dtrain {
namespace {

/// α in µs, β in GB/s (bytes), as a Link.
Link link(double alpha_us, double gigabytes_per_s, bool shared = false) {
  return Link{alpha_us, gigabytes_per_s * 8, shared, "test"};
}

Topology topo(int nodes, int per_node, Link inter, Link intra, int batch = 1) {
  Topology t;
  t.nodes = nodes;
  t.workers_per_node = per_node;
  t.inter = inter;
  t.intra = intra;
  t.batch = batch;
  return t;
}

TEST(ScalingModel, RingAllreduceOnOneNodeIsTheTextbookFormula) {
  const double B = 1e6, alpha = 10e-6, beta = 1e9;  // 1 MB, 10 µs, 1 GB/s
  for (int n : {2, 3, 4, 8}) {
    const Topology t = topo(1, n, link(0, 1), link(10, 1));
    EXPECT_NEAR(flat_allreduce_s(B, t), 2.0 * (n - 1) / n * B / beta + 2.0 * (n - 1) * alpha, 1e-12)
        << n;
  }
  EXPECT_EQ(flat_allreduce_s(B, topo(1, 1, link(0, 1), link(10, 1))), 0.0);
}

TEST(ScalingModel, SharedBusDividesItsBandwidthAmongTheNodesRanks) {
  // n ranks each move B/n per step through one bus of β: a step costs α + B/β.
  const double B = 4e6;
  const Topology t = topo(1, 4, link(0, 1), link(2, 2, true));
  EXPECT_NEAR(flat_allreduce_s(B, t), 2.0 * 3 * (2e-6 + B / 2e9), 1e-12);
}

TEST(ScalingModel, RingAcrossNodesIsPacedByItsSlowestHop) {
  const double B = 8e6;
  // NVLink-like inside (fast), a 1 GB/s network between: the network paces every step.
  const Topology t = topo(2, 4, link(5, 1), link(1, 100));
  EXPECT_NEAR(flat_allreduce_s(B, t), 2.0 * 7 * (5e-6 + B / 8 / 1e9), 1e-12);
  // A shared bus slower than the network: the bus paces it (4 streams on it).
  const Topology slow = topo(2, 4, link(5, 10), link(1, 1, true));
  EXPECT_NEAR(flat_allreduce_s(B, slow), 2.0 * 7 * (1e-6 + B / 8 * 4 / 1e9), 1e-12);
}

TEST(ScalingModel, HierarchicalIsTheNodesSumInPlaceAndTheLeadersRing) {
  const double B = 6e6;
  const Topology t = topo(3, 4, link(5, 10), link(1, 50));
  const double to_leader = 1e-6 + B * 3 / 4 / 50e9;        // the other 3 ranks' share, G = 4
  const double leaders = 2.0 * 2 * (5e-6 + B / 3 / 10e9);  // ring of 3 leaders
  const double out = 1e-6 + B / 50e9;                      // the leader's result copied out
  EXPECT_NEAR(hierarchical_allreduce_s(B, t), to_leader + leaders + out, 1e-12);
  // One node: the share read from the others and written back into theirs.
  const Topology node = topo(1, 4, link(5, 10), link(1, 50));
  EXPECT_NEAR(hierarchical_allreduce_s(B, node), 2 * (1e-6 + B * 3 / 4 / 50e9), 1e-12);
  // Two ranks on a shared bus: the flat ring's bytes (each rank moves the other's half both
  // ways), so a link calibrated on either prices both alike there.
  const Topology two = topo(1, 2, link(5, 10), link(1, 50, true));
  EXPECT_NEAR(hierarchical_allreduce_s(B, two), flat_allreduce_s(B, two), 1e-12);
  // Twelve: (G − 1) = 11 shares of B/12 each way over a bus shared by 12, the flat ring's bytes.
  const Topology twelve = topo(1, 12, link(5, 10), link(1, 50, true));
  EXPECT_NEAR(hierarchical_allreduce_s(B, twelve), 2 * (1e-6 + B * 11 / 12 * 12 / 50e9), 1e-12);
  // One worker per node: the leaders' ring alone, the flat ring over the same links.
  const Topology one = topo(3, 1, link(5, 10), link(1, 50));
  EXPECT_NEAR(hierarchical_allreduce_s(B, one), flat_allreduce_s(B, one), 1e-12);
}

TEST(ScalingModel, PsRoundIsBoundByTheBusierPsLinkOrItsUpdates) {
  const double S = 1e8, opt = 0.04;
  // One node, shared bus of 5 GB/s (shared rings): the bus carries 2·W·S per round whatever K
  // is (0.16 s for 4 workers); the ps's updates, W·opt/K, pace it when slower (K = 1: 0.16 s).
  const Topology one = topo(1, 4, link(0, 1), link(0, 5, true));
  for (int K : {1, 2, 4})
    EXPECT_NEAR(ps_round_s(S, opt, K, one), std::max(4 * opt / K, 2 * 4 * S / 5e9), 1e-12) << K;
  EXPECT_NEAR(ps_round_s(S, 0.1, 1, one), 0.4, 1e-12);
  // 2 nodes, 4 ps: two ps share each node's 10 GB/s NIC, each copies its share in and out.
  const Topology two = topo(2, 4, link(3, 10), link(0, 5, true));
  EXPECT_NEAR(ps_round_s(S, opt, 4, two), 8 * (opt / 4 + 2 * (3e-6 + S / 4 * 2 / 10e9)), 1e-9);
}

TEST(ScalingModel, ExposedCommunicationIsWhatEndsAfterBackward) {
  // Buckets ready at 1, 2, 3 s taking 0.5, 2, 0.5 s, one at a time: ends at 1.5, 4, 4.5.
  EXPECT_DOUBLE_EQ(exposed_after_backward_s({1, 2, 3}, {0.5, 2, 0.5}, 3), 1.5);
  // All hidden: each ends before the next is ready, the last before backward ends.
  EXPECT_DOUBLE_EQ(exposed_after_backward_s({1, 2, 3}, {0.5, 0.5, 0.5}, 4), 0.0);
  // No overlap possible: everything ready at the end.
  EXPECT_DOUBLE_EQ(exposed_after_backward_s({3, 3}, {1, 1}, 3), 2.0);
  EXPECT_THROW(exposed_after_backward_s({1}, {}, 1), Error);
}

/// Three layers: 100 floats, none, 200 floats; backward 1, 2 and 4 ms, forward 3 ms in all.
WorkerProfile three_layers() {
  WorkerProfile p;
  p.batch = 4;
  p.optimizer_ms = 2;
  p.layers = {{"0.conv", 1, 1, 0, 100}, {"1.relu", 1, 2, 0, 0}, {"2.dense", 1, 4, 100, 200}};
  return p;
}

constexpr std::size_t kMiBFloats = (1 << 20) / 4;  // floats in 1 MiB of fp32

/// three_layers() with 4 MiB of fp32 gradients: layer 0 the first 1 MiB, layer 2 the other 3.
WorkerProfile four_mib() {
  WorkerProfile p = three_layers();
  p.layers[0].param_floats = kMiBFloats;
  p.layers[2].param_offset = kMiBFloats;
  p.layers[2].param_floats = 3 * kMiBFloats;
  return p;
}

TEST(ScalingModel, GradientsAreReadyAsBackwardPassesTheirLayer) {
  const WorkerProfile p = three_layers();
  // Backward runs layer 2 (4 ms), 1 (2 ms), 0 (1 ms): floats ≥ 100 final at 4 ms, all at 7 ms.
  const std::vector<double> r = ready_times_s(p, {150, 100, 99, 0}, 1.0);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_NEAR(r[0], 0.004, 1e-12);
  EXPECT_NEAR(r[1], 0.004, 1e-12);
  EXPECT_NEAR(r[2], 0.007, 1e-12);
  EXPECT_NEAR(r[3], 0.007, 1e-12);
  EXPECT_NEAR(ready_times_s(p, {100}, 2.0)[0], 0.008, 1e-12);  // twice the batch
}

TEST(ScalingModel, OneWorkerPaysComputeAndOptimizerOnly) {
  const WorkerProfile p = three_layers();
  const Prediction r = predict(p, topo(1, 1, link(5, 1), link(1, 1), 8), {Strategy::flat, 25, 0});
  EXPECT_NEAR(r.compute_ms, 2 * (3 + 7), 1e-9);  // batch 8 = 2 × the profile's 4
  EXPECT_EQ(r.exposed_ms, 0.0);
  EXPECT_NEAR(r.step_ms, 22, 1e-9);
  EXPECT_NEAR(r.samples_per_s, 8 / 0.022, 1e-6);
  EXPECT_NEAR(r.efficiency, 1.0, 1e-12);
}

TEST(ScalingModel, SyncStepAddsTheLastBucketsExposedPart) {
  // 4 MiB of gradients: layer 0 holds the first 1 MiB, layer 2 the other 3 MiB. The training's
  // plan at 25 MiB (end buckets of 1 MiB, doubling from the front): [3, 4) MiB and [1, 3) MiB
  // ready when layer 2 is done (4 ms), [0, 1) MiB when layer 0 is (7 ms). (Cut from the end, the
  // last bucket would have been all 4 MiB.)
  constexpr std::size_t MiB = kMiBFloats;
  const WorkerProfile p = four_mib();
  const auto b = plan_buckets(4 * MiB, 25 * MiB);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1].begin, MiB);
  EXPECT_EQ(b[2].end, MiB);
  const Candidate c{Strategy::flat, 25, 0};
  // Two ranks on one node, an unshared link of 1 GB/s, α = 0: 4.2 ms for 1 MiB, 8.4 for 2. The
  // two buckets ready at 4 ms are still being summed at 7 ms: the backlog is exposed too.
  const Topology t = topo(1, 2, link(0, 1), link(0, 1), 4);
  const double one = flat_allreduce_s(4.0 * MiB, t), two = flat_allreduce_s(8.0 * MiB, t);
  const Prediction r = predict(p, t, c);
  EXPECT_NEAR(r.exposed_ms, (0.004 + one + two + one - 0.007) * 1000, 1e-9);
  EXPECT_NEAR(r.step_ms, 3 + 7 + r.exposed_ms + 2, 1e-9);
  EXPECT_NEAR(r.comm_ms, flat_allreduce_s(16.0 * MiB, t) * 1000, 1e-9);
  EXPECT_LT(r.efficiency, 1.0);
  EXPECT_EQ(r.bound, "network");
  // 10 GB/s: the first two are done before backward ends, the last 1 MiB alone is exposed.
  const Topology fast = topo(1, 2, link(0, 10), link(0, 10), 4);
  EXPECT_NEAR(predict(p, fast, c).exposed_ms, flat_allreduce_s(4.0 * MiB, fast) * 1000, 1e-9);
  // --overlap false: all three start when backward ends, one after the other.
  Topology serial = t;
  serial.overlap = false;
  EXPECT_NEAR(predict(p, serial, c).exposed_ms, (one + two + one) * 1000, 1e-9);
}

TEST(ScalingModel, ExpectedMaximumOfNormalsHasItsClosedForms) {
  // E[max] of 1..5 standard normals: 0, 1/√π, 3/(2√π), and the tabulated 1.029375, 1.162964.
  EXPECT_EQ(expected_max_normal(1), 0.0);
  EXPECT_NEAR(expected_max_normal(2), 1 / std::sqrt(M_PI), 1e-7);
  EXPECT_NEAR(expected_max_normal(3), 1.5 / std::sqrt(M_PI), 1e-7);
  EXPECT_NEAR(expected_max_normal(4), 1.0293754, 1e-6);
  EXPECT_NEAR(expected_max_normal(5), 1.1629645, 1e-6);
  // Tabulated (Harter 1961): 8 → 1.423600, 100 → 2.507594; growing like √(2 ln n).
  EXPECT_NEAR(expected_max_normal(8), 1.4236003, 1e-6);
  EXPECT_NEAR(expected_max_normal(100), 2.5075937, 1e-6);
  EXPECT_GT(expected_max_normal(4096), expected_max_normal(512));
  EXPECT_THROW((void)expected_max_normal(0), InputError);
}

TEST(ScalingModel, SyncWaitsForTheSlowestWorkerAsyncDoesNot) {
  const WorkerProfile p = three_layers();
  Topology t = topo(1, 4, link(0, 1e6), link(0, 1e6), 8);  // links too fast to matter
  const Candidate sync{Strategy::flat, 25, 0};
  const Prediction calm = predict(p, t, sync);
  EXPECT_EQ(calm.straggler_ms, 0.0);
  t.step_cv = 0.05;
  const Prediction r = predict(p, t, sync);
  // compute 20 ms (batch 8), 4 workers: 20 × 0.05 × 1.0293754 ms more per step.
  EXPECT_NEAR(r.straggler_ms, 20 * 0.05 * 1.0293754, 1e-5);
  EXPECT_NEAR(r.step_ms, calm.step_ms + r.straggler_ms, 1e-9);
  // One worker alone waits for no one: the efficiency's denominator is unchanged.
  EXPECT_NEAR(r.efficiency, calm.efficiency * calm.step_ms / r.step_ms, 1e-12);
  // Async: no term.
  const Candidate async{Strategy::ps, 0, 1};
  EXPECT_EQ(predict(p, t, async).straggler_ms, 0.0);
  EXPECT_NEAR(
      predict(p, t, async).step_ms,
      [&] {
        Topology u = t;
        u.step_cv = 0;
        return predict(p, u, async).step_ms;
      }(),
      1e-12);
  // A large σ paces the step: bound "stragglers".
  t.step_cv = 0.2;
  EXPECT_EQ(predict(p, t, sync).bound, "stragglers");
  t.step_cv = -0.1;
  EXPECT_THROW((void)predict(p, t, sync), InputError);
}

TEST(ScalingModel, LatencyAwareBucketsPriceTheTrainingsLatencyAwarePlan) {
  // 4 MiB of gradients (layer 0: [0, 1) MiB, layer 2: [1, 4) MiB) on 4 ranks of one node over an
  // unshared 1 GB/s link with α = 524.2879 µs: the minimum bucket ⌈p·α·β⌉ = 2 MiB, twice the end
  // size at 25 MiB, so the latency-aware plan is two buckets of 2 MiB: [2, 4) MiB ready when
  // layer 2 is done (4 ms), [0, 2) MiB when layer 0 is (7 ms).
  constexpr std::size_t MiB = kMiBFloats;
  const WorkerProfile p = four_mib();
  const Topology t = topo(1, 4, link(0, 1), link(524.2879, 1), 4);
  EXPECT_EQ(bucket_ring(t).ranks, 4);
  EXPECT_EQ(latency_min_bucket_floats(bucket_ring(t)), 2 * MiB);
  const Candidate fixed{Strategy::flat, 25, 0}, aware{Strategy::flat, 25, 0, true};
  EXPECT_EQ(candidate_buckets(p, t, fixed), plan_buckets(4 * MiB, 25 * MiB));
  const std::vector<Bucket> two = {{2 * MiB, 4 * MiB}, {0, 2 * MiB}};
  EXPECT_EQ(candidate_buckets(p, t, aware), two);
  const double c = flat_allreduce_s(8.0 * MiB, t);  // the bytes of 2 MiB of fp32
  const Prediction r = predict(p, t, aware);
  EXPECT_EQ(r.buckets, 2u);
  EXPECT_DOUBLE_EQ(r.end_mib, 2.0);
  EXPECT_NEAR(r.exposed_ms, (std::max(0.004 + c, 0.007) + c - 0.007) * 1000, 1e-9);
  EXPECT_EQ(predict(p, t, fixed).buckets, 3u);
  EXPECT_EQ(describe(aware), "sync, flat allreduce, latency-aware");
  // The plan lists a latency-aware row only where its buckets differ: not for one bucket (0),
  // nor from 64 MiB on (end buckets of 2.56 MiB and more, above the minimum), nor hierarchical.
  std::vector<double> aware_sizes;
  for (const Candidate& k : candidates(p, t, true, false, 25, 1))
    if (k.latency_aware) aware_sizes.push_back(k.bucket_mb);
  EXPECT_EQ(aware_sizes, (std::vector<double>{1, 4, 16, 25}));
}

TEST(ScalingModel, SixteenBitWireHalvesTheSyncAllreduceBytes) {
  // 4 MiB of fp32 gradients, --wire-dtype bf16|fp16: both levels of the hierarchical sum (and the
  // flat ring) carry 2 bytes a value. 2 nodes × 2 workers, unshared links (k = 1), the whole
  // exchange after backward (--overlap false): every bucket's cost adds up.
  constexpr std::size_t MiB = kMiBFloats;
  const WorkerProfile p = four_mib();
  Topology t = topo(2, 2, link(5, 10), link(1, 50), 4);
  t.overlap = false;
  Topology t16 = t;
  t16.value_bytes = 2;
  const double S16 = 2.0 * 4 * MiB;                          // 2^20 values at 2 bytes: 2 MiB
  const double to_leader = 1e-6 + S16 / 2 / 50e9;            // the other rank's half, G = 2
  const double leaders = 2.0 * 1 * (5e-6 + S16 / 2 / 10e9);  // ring of 2 leaders
  const double out = 1e-6 + S16 / 50e9;                      // the result copied out
  const Candidate h{Strategy::hierarchical, 25, 0};
  EXPECT_NEAR(predict(p, t16, h).comm_ms, (to_leader + leaders + out) * 1000, 1e-9);
  EXPECT_NEAR(predict(p, t, h).comm_ms, hierarchical_allreduce_s(2 * S16, t) * 1000, 1e-9);
  // Exposed: the three buckets (1, 2, 1 MiB of values) one after the other, at half the bytes.
  double serial = 0;
  for (double values : {1.0 * MiB, 2.0 * MiB, 1.0 * MiB}) {
    serial += hierarchical_allreduce_s(2 * values, t);
    EXPECT_LT(hierarchical_allreduce_s(2 * values, t), hierarchical_allreduce_s(4 * values, t));
  }
  EXPECT_NEAR(predict(p, t16, h).exposed_ms, serial * 1000, 1e-9);
  const Candidate f{Strategy::flat, 25, 0};
  EXPECT_NEAR(predict(p, t16, f).comm_ms, flat_allreduce_s(S16, t) * 1000, 1e-9);
  // ps pushes stay priced in fp32 (not modelled): the same prediction.
  const Candidate ps{Strategy::ps, 0, 1};
  EXPECT_EQ(predict(p, t16, ps).step_ms, predict(p, t, ps).step_ms);
}

TEST(ScalingModel, AsyncIsPacedByTheSlowerOfWorkerAndPs) {
  WorkerProfile p = three_layers();
  p.optimizer_ms = 1000;  // a ps update of 1 s: the ps paces 2 workers with 1 ps
  const Topology t = topo(2, 1, link(0, 1000), link(0, 1000), 4);
  const Prediction one = predict(p, t, {Strategy::ps, 0, 1});
  EXPECT_EQ(one.bound, "ps");
  EXPECT_NEAR(one.step_ms, ps_round_s(1200, 1.0, 1, t) * 1000, 1e-9);
  EXPECT_NEAR(one.samples_per_s, 2 * 4 / (one.step_ms / 1000), 1e-9);
  const Prediction two = predict(p, t, {Strategy::ps, 0, 2});  // half the update per ps
  EXPECT_NEAR(two.step_ms, ps_round_s(1200, 1.0, 2, t) * 1000, 1e-9);
  EXPECT_NEAR(two.step_ms, one.step_ms / 2, 0.01);
  // A fast ps: the worker paces it, its exposed part the last layer's (layer 0: 100 floats)
  // push-pull and update after backward ends at 7 ms.
  p.optimizer_ms = 0;
  const Prediction fast = predict(p, t, {Strategy::ps, 0, 1});
  EXPECT_EQ(fast.bound, "compute");
  const double last = 2 * (400 / 1e12);  // 1000 GB/s, α = 0
  const double big = 2 * (800 / 1e12);
  EXPECT_NEAR(fast.exposed_ms, (std::max(0.004 + big, 0.007) + last - 0.007) * 1000, 1e-9);
  EXPECT_THROW(predict(p, t, {Strategy::ps, 0, 0}), InputError);
}

TEST(ScalingModel, AsyncAcrossNodesIsNoMoreEfficientThanOneWorker) {
  // A network faster than the node's own link: the one-worker baseline's ps traffic went over
  // the slower node link, and 2 workers across nodes came out above 1.
  WorkerProfile p = three_layers();
  p.optimizer_ms = 0;
  const Topology t = topo(2, 1, link(0, 1000), link(50, 0.001, true), 4);
  for (int k : {1, 2, 8}) {
    const Prediction r = predict(p, t, {Strategy::ps, 0, k});
    EXPECT_LE(r.efficiency, 1.0 + 1e-12) << k << " ps";
    EXPECT_GT(r.efficiency, 0.5) << k << " ps";
  }
  // A shared network and a node's cores (one 4-thread worker a node, 1 core): the one-worker
  // baseline was priced on a shared bus, charged ring copies of 2·S/β, and came out at 1.455.
  WorkerProfile big;
  big.batch = 1;
  big.threads = 4;
  big.layers = {{"0.dense", 10, 100, 0, 25000000}};  // S = 100 MB
  Topology shared = topo(4, 1, link(0, 1, true), link(0, 1000), 1);
  shared.cores_per_node = 1;
  const Prediction r = predict(big, shared, {Strategy::ps, 0, 4});
  EXPECT_EQ(r.bound, "cores");
  EXPECT_NEAR(r.efficiency, 1.0, 1e-12);  // each node's floor is one worker's 4 × 110 ms
}

TEST(ScalingModel, ASaturatedNodeTakesItsCpuWorkOverItsCores) {
  // 4 MiB of fp32 gradients, forward + backward 10 ms at batch 4, optimizer 2 ms, 1 thread; two
  // workers on one node over a shared bus of 1 GB/s (α = 0).
  constexpr std::size_t MiB = kMiBFloats;
  const WorkerProfile p = four_mib();
  const double S = 16.0 * MiB;  // bytes
  Topology t = topo(1, 2, link(0, 1), link(0, 1, true), 4);
  const Candidate flat{Strategy::flat, 25, 0}, hier{Strategy::hierarchical, 25, 0};
  const Candidate ps{Strategy::ps, 0, 1};
  // Sync, flat: each worker 10 + 2 ms and its 2(W−1) = 2 hops of S/2 at 2 streams (S/1e9 s each).
  const double flat_cpu = 2 * (0.010 + 0.002 + 2 * (S / 2 * 2 / 1e9));
  EXPECT_NEAR(node_cpu_s(p, t, flat), flat_cpu, 1e-12);
  // Hierarchical: each worker's half of the sum read from the other and written back, S/2 each
  // way at 2 streams.
  EXPECT_NEAR(node_cpu_s(p, t, hier), 2 * (0.012 + 2 * (S / 2 * 2 / 1e9)), 1e-12);
  // Async, 1 ps: each worker's compute and 2·S through the rings, the ps's W·optimizer.
  EXPECT_NEAR(node_cpu_s(p, t, ps), 2 * (0.010 + 2 * S / 1e9) + 2 * 0.002, 1e-12);
  // Two threads a worker: twice the compute and optimizer, the same copies.
  WorkerProfile two = p;
  two.threads = 2;
  EXPECT_NEAR(node_cpu_s(two, t, flat), flat_cpu + 2 * 0.012, 1e-12);
  // Not priced without cores: the step of the overlap model alone.
  const Prediction free = predict(p, t, flat);
  EXPECT_EQ(free.node_cpu_ms, 0.0);
  EXPECT_NE(free.bound, "cores");
  // 2 cores: the floor flat_cpu / 2 is above that step and paces it.
  t.cores_per_node = 2;
  const Prediction busy = predict(p, t, flat);
  ASSERT_GT(flat_cpu / 2, free.step_ms / 1000);
  EXPECT_EQ(busy.bound, "cores");
  EXPECT_NEAR(busy.step_ms, flat_cpu / 2 * 1000, 1e-9);
  EXPECT_NEAR(busy.node_cpu_ms, busy.step_ms, 1e-9);
  EXPECT_NEAR(busy.samples_per_s, 2 * 4 / (flat_cpu / 2), 1e-6);
  // 16 cores: the floor is far below the step, which stays the overlap model's.
  t.cores_per_node = 16;
  const Prediction spare = predict(p, t, flat);
  EXPECT_NEAR(spare.step_ms, free.step_ms, 1e-9);
  EXPECT_EQ(spare.bound, free.bound);
  EXPECT_NEAR(spare.node_cpu_ms, flat_cpu / 16 * 1000, 1e-9);
  // A GPU profile's compute is not CPU work: not priced. A calibrated CPU profile is.
  WorkerProfile gpu = p;
  gpu.device = "cuda";
  t.cores_per_node = 2;
  EXPECT_EQ(predict(gpu, t, flat).node_cpu_ms, 0.0);
  WorkerProfile host = p;
  host.device = "cpu (a 2-core host, calibrated)";
  EXPECT_NEAR(predict(host, t, flat).node_cpu_ms, busy.node_cpu_ms, 1e-9);
  // Across nodes only the hops inside a node are copies: (G−1)/G of them with 2 per node.
  const Topology nodes = topo(2, 2, link(0, 1), link(0, 1, true), 4);
  EXPECT_NEAR(node_cpu_s(p, nodes, flat), 2 * (0.012 + 2.0 * 3 / 2 * (S / 4 * 2 / 1e9)), 1e-12);
}

TEST(ScalingModel, CandidatesCoverBucketSizesAndPsCounts) {
  const Topology t = topo(1, 6, link(0, 1), link(0, 1));
  const std::vector<Candidate> all = candidates(WorkerProfile{}, t, true, true, 10, 3);
  std::size_t sync = 0;
  std::vector<int> ps;
  for (const Candidate& c : all) {
    if (c.strategy == Strategy::ps) ps.push_back(c.num_ps);
    else ++sync;
  }
  EXPECT_EQ(sync, 2u * 8);  // {0, 1, 4, 10, 16, 25, 64, 256} × flat, hierarchical
  EXPECT_EQ(ps, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(candidates(WorkerProfile{}, t, false, true, 25, 1).size(), 3u);  // 1, 2, 4 ps
}

TEST(LinkSpec, PresetsAndCustomSpecs) {
  const Link ib = parse_link("hdr-ib", "--network");
  EXPECT_EQ(ib.beta_gbps, 200);
  EXPECT_FALSE(ib.shared);
  EXPECT_NEAR(ib.seconds(25e9), 2e-6 + 1.0, 1e-12);  // 200 Gb/s = 25 GB/s
  EXPECT_EQ(parse_link("25gbe", "--network").beta_gbps, 25);
  EXPECT_GT(parse_link("nvlink", "--network").beta_gbps, 1000);
  EXPECT_TRUE(parse_link("shm", "--intra-node").shared);
  const Link custom = parse_link("alpha_us=1.5,beta_gbps=80,shared=1", "--network");
  EXPECT_EQ(custom.alpha_us, 1.5);
  EXPECT_EQ(custom.beta_gbps, 80);
  EXPECT_TRUE(custom.shared);
  EXPECT_NEAR(custom.seconds(1e7, 2), 1.5e-6 + 2e7 / 1e10, 1e-12);
}

TEST(LinkSpec, BadSpecsNameTheOption) {
  for (const char* bad :
       {"hdr", "alpha_us=1", "beta_gbps=10", "alpha_us=x,beta_gbps=1", "alpha_us=1,beta_gbps=0",
        "alpha_us=-1,beta_gbps=1", "alpha_us=1,beta_gbps=1,speed=2", "alpha_us=1,beta_gbps=inf", "",
        "alpha_us=1,beta_gbps=2,alpha_us=3", "alpha_us=1,beta_gbps=2,", "alpha_us=1,,beta_gbps=2",
        // beyond any link: β overflowed to inf B/s in the bucket planner (an error naming no
        // option), α of 1e300 µs printed 63-digit step times
        "alpha_us=1,beta_gbps=1e308", "alpha_us=1e300,beta_gbps=1",
        "alpha_us=1,beta_gbps=1e-300"}) {
    try {
      (void)parse_link(bad, "--network");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("option --network '" + std::string(bad) + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("hdr-ib"), std::string::npos) << msg;  // the accepted forms
    }
  }
}

TEST(WorkerProfileJson, RoundTripsAndRejectsBadFiles) {
  const std::string dir = ::testing::TempDir() + "/profile_json";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  WorkerProfile p = three_layers();
  p.job = "job.ini";
  p.steps = 3;
  save_profile(p, dir + "/p.json", "--save-profile");
  // Written whole or not at all, never over a file: a second save is refused, the first kept.
  p.batch = 99;
  EXPECT_THROW(save_profile(p, dir + "/p.json", "--save-profile"), InputError);
  EXPECT_FALSE(std::filesystem::exists(dir + "/p.json.tmp"));
  const WorkerProfile q = load_profile(dir + "/p.json", "--profile");
  EXPECT_EQ(q.batch, 4);
  EXPECT_EQ(q.layers.size(), 3u);
  EXPECT_EQ(q.param_floats(), 300u);
  EXPECT_DOUBLE_EQ(q.backward_ms(), 7);
  EXPECT_DOUBLE_EQ(q.gradient_bytes(), 1200);
  const auto expect_error = [&](const std::string& text, const std::string& want) {
    std::ofstream(dir + "/bad.json") << text;
    try {
      (void)load_profile(dir + "/bad.json", "--profile");
      ADD_FAILURE() << "accepted " << text;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("option --profile '" + dir + "/bad.json'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(want), std::string::npos) << msg;
    }
  };
  expect_error("{", "parse");
  expect_error(R"({"format": "other"})", "not a dtrain profile");
  expect_error(R"({"format": "dtrain-profile-1", "batch": 2, "optimizer_ms": 1})", "layers");
  expect_error(R"({"format": "dtrain-profile-1", "batch": 2, "optimizer_ms": 1, "layers": [
      {"name": "a", "forward_ms": 1, "backward_ms": 1, "param_offset": 5, "param_floats": 3}]})",
               "expected 0");
  // Finite times whose sum is not (1e308 + 1e308) would break the pipeline cut: refused.
  expect_error(R"({"format": "dtrain-profile-1", "batch": 2, "optimizer_ms": 1, "layers": [
      {"name": "a", "forward_ms": 1e308, "backward_ms": 1e308, "param_offset": 0,
       "param_floats": 3}]})",
               "layer 'a' has a negative, non-finite or implausible time");
  // A negative count wrapped as std::size_t (a wrong parameter sum); a huge one exhausted memory
  // (std::bad_alloc); an implausible optimizer time printed 63-digit figures.
  for (const char* floats : {"-5", "1e15", "2.5", "1099511627777"})
    expect_error(std::string(R"({"format": "dtrain-profile-1", "batch": 2, "optimizer_ms": 1,
      "layers": [{"name": "a", "forward_ms": 1, "backward_ms": 1, "param_offset": 0,
      "param_floats": )") +
                     floats + "}]}",
                 "layer 'a' has param_floats");
  expect_error(R"({"format": "dtrain-profile-1", "batch": 2, "optimizer_ms": 1e300, "layers": [
      {"name": "a", "forward_ms": 1, "backward_ms": 1, "param_offset": 0, "param_floats": 3}]})",
               "optimizer_ms must be from 0 to 1e9 ms");
  // A fraction, or a count an int would wrap or cut short (2^32 + 1 read as batch 1, 2^32 + 4 as
  // 4 threads, 1e12 threads as negative), changed the plan without a word.
  const std::string one_layer = R"("optimizer_ms": 1, "layers": [{"name": "a", "forward_ms": 1,
      "backward_ms": 1, "param_offset": 0, "param_floats": 3}]})";
  for (const char* batch : {"1.5", "4294967297", "2147483656", "0", "-3", "true"})
    expect_error(std::string(R"({"format": "dtrain-profile-1", "batch": )") + batch + ", " +
                     one_layer,
                 std::string("batch is ") + batch + ", expected an integer from 1 to 2147483647");
  for (const char* threads : {"4294967300", "1e12", "-5", "0", "65537"})
    expect_error(std::string(R"({"format": "dtrain-profile-1", "batch": 2, "threads": )") +
                     threads + ", " + one_layer,
                 "threads is ");
  expect_error(R"({"format": "dtrain-profile-1", "batch": 2, "threads": 0, )" + one_layer,
               "threads is 0, expected an integer from 1 to 65536");
  expect_error(R"({"format": "dtrain-profile-1", "batch": 2, "steps": -1, )" + one_layer,
               "steps is -1, expected an integer from 0 to 2147483647");
  // No time at all: the plan's samples/s divided by it (inf, and an efficiency of 0).
  expect_error(R"({"format": "dtrain-profile-1", "batch": 2, "optimizer_ms": 0, "layers": [
      {"name": "a", "forward_ms": 0, "backward_ms": 0, "param_offset": 0, "param_floats": 3}]})",
               "every layer's forward_ms and backward_ms is 0");
  EXPECT_THROW(load_profile(dir + "/missing.json", "--profile"), InputError);
  try {
    (void)load_profile(dir, "--profile");  // a directory: an InputError, not a stream failure
    ADD_FAILURE() << "a directory was read as a profile";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain
