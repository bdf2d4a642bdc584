// tests/unit/test_dana.cpp — optim/dana (DANA-Zero, Hakimi et al. 2019): per-worker momentum and
// the look-ahead position in closed form, chunk by chunk equal to the whole shard, load() sharing a
// checkpoint's momentum sum, and the optimizer check.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/optim/dana.hpp"

namespace dtrain {
namespace {

Config dana_config() {
  Config c;
  c.optimizer = OptimizerKind::momentum;
  c.momentum = 0.5f;
  c.lr = 0.1f;
  c.weight_decay = 0.0f;
  c.mode = Mode::async;
  c.async_momentum = AsyncMomentum::dana;
  return c;
}

TEST(Dana, PerWorkerMomentumAndLookAheadInClosedForm) {
  auto be = make_cpu_backend();
  const Config c = dana_config();
  const float eta = c.lr, mu = c.momentum;
  DanaMomentum dana(c, *be, 2, 2, 100);
  std::vector<float> theta = {1.0f, -1.0f};
  dana.load(std::vector<float>(2, 0.0f).data(), theta.data(), 0);
  EXPECT_EQ(std::vector<float>(dana.look_ahead(), dana.look_ahead() + 2), theta);
  const std::vector<float> g1 = {0.2f, 0.4f}, g2 = {-0.6f, 0.8f}, g3 = {1.0f, -0.2f};
  dana.apply(0, theta.data(), g1.data(), 0, 0, 2);  // v0 = g1
  dana.apply(1, theta.data(), g2.data(), 1, 0, 2);  // v1 = g2
  dana.apply(0, theta.data(), g3.data(), 2, 0, 2);  // v0 = mu g1 + g3
  for (int i = 0; i < 2; ++i) {
    const float v0 = mu * g1[i] + g3[i], v1 = g2[i];
    const float want = (i == 0 ? 1.0f : -1.0f) - eta * g1[i] - eta * v1 - eta * v0;
    EXPECT_NEAR(theta[i], want, 1e-6f) << i;
    EXPECT_NEAR(dana.momentum_sum()[i], v0 + v1, 1e-6f) << i;
    EXPECT_NEAR(dana.look_ahead()[i], want - eta * mu * (v0 + v1), 1e-6f) << i;
  }
}

TEST(Dana, NesterovAddsNoSecondLookAhead) {
  // DANA's look-ahead is its Nesterov step: --nesterov leaves every worker's update plain
  // momentum (it took the look-ahead twice).
  auto be = make_cpu_backend();
  Config c = dana_config();
  Config nag = c;
  nag.nesterov = true;
  DanaMomentum plain(c, *be, 2, 2, 100), with(nag, *be, 2, 2, 100);
  std::vector<float> a = {1.0f, -1.0f}, b = a;
  plain.load(std::vector<float>(2, 0.0f).data(), a.data(), 0);
  with.load(std::vector<float>(2, 0.0f).data(), b.data(), 0);
  const std::vector<float> g[] = {{0.2f, 0.4f}, {-0.6f, 0.8f}, {1.0f, -0.2f}};
  for (int t = 0; t < 3; ++t) {
    plain.apply(t % 2, a.data(), g[t].data(), t, 0, 2);
    with.apply(t % 2, b.data(), g[t].data(), t, 0, 2);
  }
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::vector<float>(plain.look_ahead(), plain.look_ahead() + 2),
            std::vector<float>(with.look_ahead(), with.look_ahead() + 2));
}

TEST(Dana, ChunksEqualTheWholeShardAndLoadSharesTheSum) {
  auto be = make_cpu_backend();
  Config c = dana_config();
  c.weight_decay = 0.01f;
  c.lr_schedule = LrSchedule::cosine;
  c.warmup_steps = 2;
  const std::size_t n = 11;
  DanaMomentum whole(c, *be, n, 3, 20), chunked(c, *be, n, 3, 20);
  std::vector<float> a(n), b(n), g(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = b[i] = 0.1f * static_cast<float>(i) - 0.4f;
  for (std::int64_t t = 0; t < 7; ++t) {
    for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>((i * 7 + t * 3) % 5) - 2.0f;
    const int w = static_cast<int>(t % 3);
    whole.apply(w, a.data(), g.data(), t, 0, n);
    for (std::size_t at = 0; at < n; at += 4) {  // each chunk's gradient in a buffer of its own
      const std::size_t e = std::min(n, at + 4);
      const std::vector<float> piece(g.begin() + static_cast<std::ptrdiff_t>(at),
                                     g.begin() + static_cast<std::ptrdiff_t>(e));
      chunked.apply(w, b.data(), piece.data(), t, at, e);
    }
  }
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::vector<float>(whole.look_ahead(), whole.look_ahead() + n),
            std::vector<float>(chunked.look_ahead(), chunked.look_ahead() + n));
  // A resumed ps: the checkpoint's sum shared over 3 workers keeps the sum and the look-ahead.
  DanaMomentum resumed(c, *be, n, 3, 20);
  resumed.load(whole.momentum_sum(), a.data(), 6);  // the rate of the last update
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(resumed.momentum_sum()[i], whole.momentum_sum()[i], 1e-6f);
    EXPECT_NEAR(resumed.look_ahead()[i], whole.look_ahead()[i], 1e-6f) << "same step rate";
  }
}

TEST(Dana, NeedsTheMomentumOptimizer) {
  auto be = make_cpu_backend();
  Config c = dana_config();
  c.optimizer = OptimizerKind::adam;
  EXPECT_THROW(DanaMomentum(c, *be, 4, 2, 10), Error);
  c.optimizer = OptimizerKind::momentum;
  EXPECT_THROW(DanaMomentum(c, *be, 4, 0, 10), Error);
}

}  // namespace
}  // namespace dtrain
