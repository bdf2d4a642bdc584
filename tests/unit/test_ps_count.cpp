// tests/unit/test_ps_count.cpp — the `--num-ps auto` rule (train/ps_count.hpp) against its closed
// form K = clamp(⌈N·ρ / (1 + ρ)⌉, 1, N − 1) with a fixed batch per worker, the smallest K with
// K ≥ (N − K)·ρ(N − K) under a global batch, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "dtrain/core/error.hpp"
#include "dtrain/train/ps_count.hpp"

namespace dtrain {
namespace {

/// Inputs whose ρ = β·(push + reply) / (F·b) is `rho` at batch b = 8 (F = 1000, β = 40).
PsCountInput with_rho(int world, double rho) {
  PsCountInput in;
  in.world = world;
  in.flops_per_sample = 1000;
  in.batch = 8;
  in.push_bytes = in.reply_bytes = rho * in.flops_per_sample * in.batch / in.beta / 2;
  return in;
}

TEST(PsCount, FixedBatchFollowsTheClosedForm) {
  for (int world : {2, 3, 5, 9, 13, 64}) {
    for (double rho : {0.0, 0.01, 0.082, 0.25, 0.5, 0.9, 1.0, 2.0, 7.5, 100.0}) {
      const PsCountChoice k = choose_num_ps(with_rho(world, rho));
      const int closed =
          std::clamp(static_cast<int>(std::ceil(world * rho / (1 + rho) - 1e-9)), 1, world - 1);
      EXPECT_EQ(k.num_ps, closed) << "N " << world << ", rho " << rho;
      EXPECT_NEAR(k.rho, rho, 1e-12);
    }
  }
  // Hand-checked: ρ = 0.5, N = 9: K = 2 leaves 7 workers (7·0.5 = 3.5 > 2), K = 3 six (3 ≤ 3).
  EXPECT_EQ(choose_num_ps(with_rho(9, 0.5)).num_ps, 3);
  // ρ = 1 (a ps serves what a worker computes): half the ranks, rounded up.
  EXPECT_EQ(choose_num_ps(with_rho(8, 1.0)).num_ps, 4);
  EXPECT_EQ(choose_num_ps(with_rho(9, 1.0)).num_ps, 5);
}

TEST(PsCount, GlobalBatchSplitsOverTheWorkersOfEachSplit) {
  // Global batch 96: b = 96 / W. With push + reply = 2·F·96/β·0.05, ρ(W) = 0.05·W, so K needs
  // K ≥ (N − K)²·0.05. N = 13: K = 3 (10² · 0.05 = 5 > 3), K = 4 (81 · 0.05 = 4.05 > 4),
  // K = 5 (64 · 0.05 = 3.2 ≤ 5).
  PsCountInput in = with_rho(13, 0.0);
  in.global_batch = 96;
  in.push_bytes = in.reply_bytes = 0.05 * in.flops_per_sample * 96 / in.beta / 2;
  const PsCountChoice k = choose_num_ps(in);
  EXPECT_EQ(k.num_ps, 5);
  EXPECT_NEAR(k.rho, 0.05 * 8, 1e-12);  // at W = 8
  for (int K = 1; K < k.num_ps; ++K) EXPECT_LT(K, 0.05 * (13 - K) * (13 - K)) << K;
}

// --optimizer lars | lamb: a ps holds whole tensors, so K stops at the tensor count, and the line
// says so when the rule wanted more.
TEST(PsCount, ALayerwiseOptimizerGetsAtMostAPsPerTensor) {
  PsCountInput in = with_rho(9, 1.0);  // 5 by the rule
  in.max_ps = 3;
  const PsCountChoice capped = choose_num_ps(in);
  EXPECT_EQ(capped.num_ps, 3);
  EXPECT_NE(capped.why.find("at most 3 (one ps per parameter tensor)"), std::string::npos)
      << capped.why;
  in.max_ps = 6;  // above the rule's 5: no effect
  const PsCountChoice free = choose_num_ps(in);
  EXPECT_EQ(free.num_ps, 5);
  EXPECT_EQ(free.why.find("at most"), std::string::npos) << free.why;
  in = with_rho(9, 100.0);  // N − 1 = 8 by the rule
  in.max_ps = 20;
  EXPECT_EQ(choose_num_ps(in).num_ps, 8);
}

// --replicas-to-aggregate R: K leaves R workers at least (3 ranks, R = 2: one ps, where the rule
// wanted 2 and the job then failed for want of workers), and the line says why.
TEST(PsCount, BackupWorkersKeepReplicasToAggregateWorkers) {
  PsCountInput in = with_rho(3, 1.0);  // 2 by the rule
  EXPECT_EQ(choose_num_ps(in).num_ps, 2);
  in.min_workers = 2;
  const PsCountChoice k = choose_num_ps(in);
  EXPECT_EQ(k.num_ps, 1);
  EXPECT_NE(k.why.find("at most 1 (--replicas-to-aggregate 2 needs as many workers)"),
            std::string::npos)
      << k.why;
  in.min_workers = 3;  // no ps left at all
  try {
    (void)choose_num_ps(in);
    ADD_FAILURE() << "3 workers and a ps from 3 ranks";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the 3 workers --replicas-to-aggregate needs"),
              std::string::npos)
        << e.what();
  }
}

TEST(PsCount, APipelineGetsAPsPerStageAtLeast) {
  PsCountInput in = with_rho(9, 0.082);  // 1 ps by the rule
  in.min_ps = 3;
  EXPECT_EQ(choose_num_ps(in).num_ps, 3);
  in = with_rho(9, 1.0);  // 5 by the rule, more than the minimum
  in.min_ps = 3;
  EXPECT_EQ(choose_num_ps(in).num_ps, 5);
}

TEST(PsCount, APipelineKeepsWholePipelinesOfWorkers) {
  // 9 ranks in 3-stage pipelines: K = 3 (6 workers) or 6 (3 workers). ρ = 1 asks K ≥ W: 6, not
  // the 5 a world without stages gets (4 workers: no whole pipeline, refused by the split).
  PsCountInput in = with_rho(9, 1.0);
  in.min_ps = in.stages = 3;
  const PsCountChoice k = choose_num_ps(in);
  EXPECT_EQ(k.num_ps, 6);
  EXPECT_EQ((9 - k.num_ps) % 3, 0);
  in = with_rho(9, 0.082);  // few ps needed: the minimum, 3, which leaves 6 workers
  in.min_ps = in.stages = 3;
  EXPECT_EQ(choose_num_ps(in).num_ps, 3);
  // A global batch splits over the replicas: 96 over 6 / 3 = 2 replicas is 48 per step.
  in.global_batch = 96;
  EXPECT_NE(choose_num_ps(in).why.find("batch 48"), std::string::npos) << choose_num_ps(in).why;
  // 5 ranks, 3 stages: 3 or 4 ps leave 2 or 1 workers, no whole pipeline.
  in = with_rho(5, 0.5);
  in.min_ps = in.stages = 3;
  try {
    (void)choose_num_ps(in);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("a multiple of the 3 pipeline stages"), std::string::npos)
        << e.what();
  }
}

TEST(PsCount, NamesKAndItsInputs) {
  const PsCountChoice k = choose_num_ps(with_rho(5, 0.5));
  EXPECT_EQ(k.num_ps, 2);
  EXPECT_NE(k.why.find("--num-ps auto: 2 ps for 3 workers"), std::string::npos) << k.why;
  EXPECT_NE(k.why.find("rho"), std::string::npos) << k.why;
}

TEST(PsCount, RefusesWhatHasNoSplit) {
  EXPECT_THROW((void)choose_num_ps(with_rho(1, 0.5)), InputError);
  PsCountInput in = with_rho(4, 0.5);
  in.flops_per_sample = 0;
  EXPECT_THROW((void)choose_num_ps(in), InputError);
}

}  // namespace
}  // namespace dtrain
