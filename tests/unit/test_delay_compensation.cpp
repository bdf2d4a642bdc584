// tests/unit/test_delay_compensation.cpp — optim/delay_compensation (DC-ASGD-a, Zheng et al. 2017):
// the corrected gradient in closed form, the mean square's first-push start and decay, per-worker
// θ_w, chunk-by-chunk equals whole-shard, and bad arguments refused.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/optim/delay_compensation.hpp"

namespace dtrain {
namespace {

TEST(DelayCompensation, CorrectsByTheClosedForm) {
  const float lambda = 0.5f, d = 0.9f;
  DelayCompensation dc(3, 2, lambda, d);
  const std::vector<float> theta_1 = {1.0f, -2.0f, 0.5f};  // what worker 1 computed at
  const std::vector<float> theta = {1.5f, -2.0f, 0.0f};    // the ps's parameters now
  std::vector<float> g0 = {0.2f, -0.4f, 1.0f};
  // Worker 0 was never sent parameters: no correction, the mean square starts at g².
  std::vector<float> g = g0;
  dc.compensate(0, g.data(), theta.data(), 0, 3);
  EXPECT_EQ(g, g0);
  dc.sent(1, theta_1.data(), 0, 3);
  const std::vector<float> g1 = {-0.3f, 0.1f, 2.0f};
  g = g1;
  dc.compensate(1, g.data(), theta.data(), 0, 3);
  for (int i = 0; i < 3; ++i) {
    const double ms = d * g0[i] * g0[i] + (1 - d) * g1[i] * g1[i];
    const double want =
        g1[i] + lambda / std::sqrt(ms + 1e-7) * g1[i] * g1[i] * (theta[i] - theta_1[i]);
    EXPECT_NEAR(g[i], want, 1e-6) << "float " << i;
  }
  EXPECT_NE(g[0], g1[0]);  // θ moved: corrected
  EXPECT_EQ(g[1], g1[1]);  // θ did not move there: unchanged
}

TEST(DelayCompensation, ChunksEqualTheWholeShardAndWorkersAreSeparate) {
  const std::size_t n = 10;
  DelayCompensation whole(n, 2, 1.0f), chunked(n, 2, 1.0f);
  std::vector<float> t0(n), t1(n), now(n), g(n);
  for (std::size_t i = 0; i < n; ++i) {
    t0[i] = 0.1f * static_cast<float>(i);
    t1[i] = -0.2f * static_cast<float>(i);
    now[i] = 0.05f * static_cast<float>(i * i);
    g[i] = std::sin(static_cast<float>(i) + 0.3f);
  }
  whole.sent(0, t0.data(), 0, n);
  whole.sent(1, t1.data(), 0, n);
  for (std::size_t at = 0; at < n; at += 3) {
    chunked.sent(0, t0.data(), at, std::min(n, at + 3));
    chunked.sent(1, t1.data(), at, std::min(n, at + 3));
  }
  for (int w : {0, 1, 1}) {
    std::vector<float> a = g, b = g;
    whole.compensate(w, a.data(), now.data(), 0, n);
    for (std::size_t at = 0; at < n;
         at += 4) {  // each chunk in a buffer of its own, as a ps receives it
      const std::size_t e = std::min(n, at + 4);
      std::vector<float> piece(b.begin() + static_cast<std::ptrdiff_t>(at),
                               b.begin() + static_cast<std::ptrdiff_t>(e));
      chunked.compensate(w, piece.data(), now.data(), at, e);
      std::copy(piece.begin(), piece.end(), b.begin() + static_cast<std::ptrdiff_t>(at));
    }
    EXPECT_EQ(a, b) << "worker " << w;
  }
  // Worker 0's and worker 1's θ_w differ, so the same gradient is corrected differently.
  std::vector<float> a = g, b = g;
  whole.compensate(0, a.data(), now.data(), 0, n);
  whole.compensate(1, b.data(), now.data(), 0, n);
  EXPECT_NE(a, b);
}

TEST(DelayCompensation, RefusesBadArguments) {
  EXPECT_THROW(DelayCompensation(4, 2, 0.0f), Error);
  EXPECT_THROW(DelayCompensation(4, 2, -1.0f), Error);
  EXPECT_THROW(DelayCompensation(4, 0, 1.0f), Error);
  EXPECT_THROW(DelayCompensation(4, 2, 1.0f, 1.0f), Error);
  DelayCompensation dc(4, 2, 1.0f);
  std::vector<float> p(4, 0.0f);
  EXPECT_THROW(dc.sent(0, p.data(), 2, 5), Error);
  EXPECT_THROW(dc.compensate(1, p.data(), p.data(), 3, 2), Error);
  EXPECT_THROW(dc.sent(2, p.data(), 0, 4), std::out_of_range);
}

}  // namespace
}  // namespace dtrain
