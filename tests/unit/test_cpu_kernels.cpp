// tests/unit/test_cpu_kernels.cpp — the CPU backend's element-wise host passes (the optimizer
// update, the finiteness scan) and DANA's blocked update, which run as AVX2 or baseline copies
// (core/simd.hpp), in chunks and blocks over OpenMP threads: each equals a plain scalar loop
// written here, bit for bit, over lengths that cover vector bodies, tails and several chunks.
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <limits>
#include <optional>
#include <vector>

#include "common/gradient_check.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/optim/dana.hpp"
#include "dtrain/optim/optimizer.hpp"

namespace dtrain {
namespace {

/// 3 of the backend's 64 Ki-float chunks and a tail that is no multiple of any vector width.
constexpr std::size_t kLong = 3 * 65536 + 13;

std::vector<float> ramp(std::size_t n, float scale, int salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = scale * static_cast<float>(static_cast<int>((i * 7919 + salt * 104729) % 2001) - 1000);
  return v;
}

/// The update of OptimizerUpdate's documented formulas, one element at a time.
void reference_update(const OptimizerUpdate& u, std::vector<float>& p, const std::vector<float>& g,
                      std::vector<float>& m, std::vector<float>& v) {
  const float bc1 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(u.beta1), static_cast<double>(u.step)));
  const float inv_sqrt_bc2 = static_cast<float>(
      1.0 / std::sqrt(1.0 - std::pow(static_cast<double>(u.beta2), static_cast<double>(u.step))));
  for (std::size_t i = 0; i < p.size(); ++i) {
    const float gi = g[i] + u.weight_decay * p[i];
    switch (u.kind) {
      case OptimizerKind::sgd:
        p[i] -= u.lr * gi;
        break;
      case OptimizerKind::momentum: {
        const float vi = u.momentum * m[i] + gi;
        m[i] = vi;
        p[i] -= u.nesterov ? u.lr * (gi + u.momentum * vi) : u.lr * vi;
        break;
      }
      case OptimizerKind::adam: {
        const float mi = u.beta1 * m[i] + (1.0f - u.beta1) * gi;
        const float vi = u.beta2 * v[i] + (1.0f - u.beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= u.lr / bc1 * mi / (std::sqrt(vi) * inv_sqrt_bc2 + u.epsilon);
        break;
      }
      case OptimizerKind::lars:  // layerwise: tests/unit/test_layerwise.cpp has their reference
      case OptimizerKind::lamb:
        FAIL() << "reference_update: " << u.kind << " is a layerwise update";
    }
  }
}

TEST(CpuKernels, OptimizerUpdatesEqualTheScalarLoopBitForBit) {
  auto be = make_cpu_backend();
  omp_set_num_threads(2);
  for (const auto& [kind, nesterov] :
       std::vector<std::pair<OptimizerKind, bool>>{{OptimizerKind::sgd, false},
                                                   {OptimizerKind::momentum, false},
                                                   {OptimizerKind::momentum, true},
                                                   {OptimizerKind::adam, false}}) {
    OptimizerUpdate u;
    u.kind = kind;
    u.nesterov = nesterov;
    u.lr = 0.01f;
    u.weight_decay = 1e-3f;
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, kLong}) {
      std::vector<float> p = ramp(n, 1e-3f, 1), m = ramp(n, 1e-4f, 2), v(n), want_p = p, want_m = m;
      for (std::size_t i = 0; i < n; ++i) v[i] = std::abs(m[i]);
      std::vector<float> want_v = v;
      // The same updates through optimizer_update_into_grad (an async ps's reply).
      std::vector<float> p2 = p, m2 = m, v2 = v;
      const std::string what = "kind " + std::to_string(static_cast<int>(kind)) + " nesterov " +
                               std::to_string(nesterov) + " n " + std::to_string(n);
      for (u.step = 1; u.step <= 3; ++u.step) {  // Adam's bias correction changes per step
        const std::vector<float> g = ramp(n, 1e-2f, static_cast<int>(u.step) + 3);
        EXPECT_TRUE(be->optimizer_update(u, p.data(), g.data(), m.data(), v.data(), n));
        std::vector<float> g2 = g;
        EXPECT_TRUE(
            be->optimizer_update_into_grad(u, p2.data(), g2.data(), m2.data(), v2.data(), n));
        EXPECT_EQ(g2, p2) << what << " step " << u.step << ": the gradient's buffer holds p";
        reference_update(u, want_p, g, want_m, want_v);
      }
      EXPECT_EQ(p, want_p) << what;
      EXPECT_EQ(p2, want_p) << what;
      if (kind != OptimizerKind::sgd) EXPECT_EQ(m, want_m) << what;
      if (kind != OptimizerKind::sgd) EXPECT_EQ(m2, want_m) << what;
      if (kind == OptimizerKind::adam) EXPECT_EQ(v, want_v) << what;
      if (kind == OptimizerKind::adam) EXPECT_EQ(v2, want_v) << what;
    }
  }
}

TEST(CpuKernels, NonFiniteValuesAreFoundInVectorBodiesAndTails) {
  auto be = make_cpu_backend();
  omp_set_num_threads(2);
  OptimizerUpdate u;
  const std::vector<float> bad = {std::numeric_limits<float>::quiet_NaN(),
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity()};
  for (std::size_t at : {std::size_t{0}, std::size_t{5}, std::size_t{65536 + 17}, kLong - 1}) {
    for (float x : bad) {
      std::vector<float> g = ramp(kLong, 1e-2f, 9), p(kLong, 1.0f);
      EXPECT_TRUE(be->all_finite(g.data(), kLong));
      g[at] = x;
      EXPECT_FALSE(be->all_finite(g.data(), kLong)) << "at " << at << " value " << x;
      EXPECT_FALSE(be->optimizer_update(u, p.data(), g.data(), nullptr, nullptr, kLong))
          << "at " << at << " value " << x;
      EXPECT_FALSE(be->optimizer_update_into_grad(u, p.data(), g.data(), nullptr, nullptr, kLong))
          << "into the gradient, at " << at << " value " << x;
    }
  }
  const float largest = std::numeric_limits<float>::max();
  const std::vector<float> edge = {largest, -largest, std::numeric_limits<float>::denorm_min(),
                                   -0.0f};
  EXPECT_TRUE(be->all_finite(edge.data(), edge.size()));
}

// The guard of the one-step-late gradient check (Backend::check_gradient): see gradient_check.hpp.
TEST(CpuKernels, GradientChecksGuardTheUpdateAndAnswerInOrder) {
  auto be = make_cpu_backend();
  test::expect_gradient_checks_guard_updates(*be);
}

// A guarded update changes nothing, and the gradient's buffer still receives p (the reply).
TEST(CpuKernels, GuardedUpdateIntoTheGradientLeavesItHoldingTheUnchangedParameters) {
  auto be = make_cpu_backend();
  OptimizerUpdate u;
  const std::size_t n = 1000;
  std::vector<float> p = ramp(n, 1e-3f, 5), g = ramp(n, 1e-2f, 6);
  const std::vector<float> p0 = p;
  g[17] = std::numeric_limits<float>::infinity();
  be->check_gradient(g.data(), n);
  EXPECT_FALSE(be->optimizer_update_into_grad(u, p.data(), g.data(), nullptr, nullptr, n));
  EXPECT_EQ(p, p0);
  EXPECT_EQ(g, p0);
  EXPECT_EQ(be->take_gradient_check(), std::optional<std::size_t>(17));
}

TEST(CpuKernels, StopwatchTakesTheHostClock) {
  auto be = make_cpu_backend();
  test::expect_stopwatch_times(*be, 0.02,
                               [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
}

TEST(CpuKernels, DanaInBlocksOnThreadsEqualsTheElementwiseUpdate) {
  auto be = make_cpu_backend();
  Config c;
  c.optimizer = OptimizerKind::momentum;
  c.momentum = 0.9f;
  c.lr = 0.05f;
  c.weight_decay = 1e-3f;
  c.lr_schedule = LrSchedule::cosine;
  const std::size_t n = 3 * 65536 + 77;
  const int workers = 3;
  const std::int64_t total = 50;
  omp_set_num_threads(2);
  DanaMomentum dana(c, *be, n, workers, total), replied(c, *be, n, workers, total);
  std::vector<float> p = ramp(n, 1e-3f, 4);
  std::vector<float> want_p = p, sum(n, 0.0f), look(n), pr = p;
  std::vector<std::vector<float>> vel(workers, std::vector<float>(n, 0.0f));
  dana.load(sum.data(), p.data(), 0);
  replied.load(sum.data(), pr.data(), 0);
  for (std::int64_t t = 0; t < 6; ++t) {
    const int w = static_cast<int>(t % workers);
    const std::vector<float> g = ramp(n, 1e-2f, static_cast<int>(t) + 11);
    // The ps's ranges: the whole shard on even steps, uneven pieces that cut blocks on odd ones.
    if (t % 2 == 0) {
      EXPECT_TRUE(dana.apply(w, p.data(), g.data(), t, 0, n));
    } else {
      for (std::size_t b = 0; b < n; b += 70001)
        EXPECT_TRUE(dana.apply(w, p.data(), g.data() + b, t, b, std::min(n, b + 70001)));
    }
    // As an async ps applies it: chunk by chunk, each gradient chunk in a buffer that then holds
    // the chunk's θ̂ (the reply).
    for (std::size_t b = 0; b < n; b += 70001) {
      const std::size_t e = std::min(n, b + 70001);
      std::vector<float> slot(g.begin() + static_cast<std::ptrdiff_t>(b),
                              g.begin() + static_cast<std::ptrdiff_t>(e));
      EXPECT_TRUE(replied.apply_into_grads(w, pr.data(), slot.data(), t, b, e));
      EXPECT_EQ(slot, std::vector<float>(replied.look_ahead() + b, replied.look_ahead() + e))
          << "step " << t << " chunk at " << b;
    }
    const float lr = learning_rate(c, t, total), f = lr * c.momentum;
    for (std::size_t i = 0; i < n; ++i) {
      const float old = vel[w][i];
      const float vi = c.momentum * old + (g[i] + c.weight_decay * want_p[i]);
      vel[w][i] = vi;
      want_p[i] -= lr * vi;
      sum[i] = sum[i] + (vi - old);
      look[i] = want_p[i] - f * sum[i];
    }
  }
  EXPECT_EQ(p, want_p);
  EXPECT_EQ(std::vector<float>(dana.momentum_sum(), dana.momentum_sum() + n), sum);
  EXPECT_EQ(std::vector<float>(dana.look_ahead(), dana.look_ahead() + n), look);
  EXPECT_EQ(pr, want_p);
  EXPECT_EQ(std::vector<float>(replied.momentum_sum(), replied.momentum_sum() + n), sum);
  EXPECT_EQ(std::vector<float>(replied.look_ahead(), replied.look_ahead() + n), look);
  std::vector<float> g(n, 0.0f);
  g[n - 1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(dana.apply(0, p.data(), g.data(), 6, 0, n)) << "a NaN in the last block";
  EXPECT_THROW(dana.apply(0, p.data(), g.data(), 6, 0, n + 1), Error);
}

}  // namespace
}  // namespace dtrain
