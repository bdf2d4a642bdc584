// tests/common/gradient_check.cpp — see gradient_check.hpp.
#include "common/gradient_check.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "dtrain/core/error.hpp"

namespace dtrain::test {

void expect_gradient_checks_guard_updates(Backend& be) {
  constexpr std::size_t n = 3 * 65536 + 13, bad = 70001;
  std::vector<float> p0(n), g0(n);
  for (std::size_t i = 0; i < n; ++i) {
    p0[i] = 0.001f * static_cast<float>(i % 997);
    g0[i] = 0.01f * static_cast<float>(static_cast<int>(i % 13) - 6);
  }
  DeviceBuffer<float> p(be, n), g(be, n), m(be, n);
  be.copy_to_device(p.data(), p0.data(), n * sizeof(float));
  be.fill(m.data(), 0.0f, n);
  auto host = [&](const DeviceBuffer<float>& b) {
    be.synchronize();
    std::vector<float> v(n);
    be.copy_to_host(v.data(), b.data(), n * sizeof(float));
    return v;
  };
  OptimizerUpdate u;
  u.kind = OptimizerKind::momentum;
  u.lr = 0.5f;
  auto update = [&] { (void)be.optimizer_update(u, p.data(), g.data(), m.data(), nullptr, n); };

  // A non-finite gradient: NaN at `bad`, +Inf later — the first one is named; nothing moves.
  std::vector<float> g1 = g0;
  g1[bad] = std::numeric_limits<float>::quiet_NaN();
  g1[n - 2] = std::numeric_limits<float>::infinity();
  be.copy_to_device(g.data(), g1.data(), n * sizeof(float));
  be.check_gradient(g.data(), n);
  update();
  EXPECT_EQ(host(p), p0);
  EXPECT_EQ(host(m), std::vector<float>(n, 0.0f));
  // A finite one: the update goes through (and the first answer is still the oldest).
  be.copy_to_device(g.data(), g0.data(), n * sizeof(float));
  be.check_gradient(g.data(), n);
  update();
  EXPECT_THROW(be.check_gradient(g.data(), n), Error);  // two answers unread already
  const std::optional<std::size_t> first = be.take_gradient_check();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, bad);
  EXPECT_EQ(be.take_gradient_check(), std::nullopt);
  const std::vector<float> p1 = host(p);
  for (std::size_t i : {std::size_t{0}, bad, n - 2, n - 1})
    EXPECT_FLOAT_EQ(p1[i], p0[i] - u.lr * g0[i]) << "element " << i;
  EXPECT_THROW((void)be.take_gradient_check(), Error);
  // Only an Inf, in the last element: found too.
  std::vector<float> g2 = g0;
  g2[n - 1] = -std::numeric_limits<float>::infinity();
  be.copy_to_device(g.data(), g2.data(), n * sizeof(float));
  be.check_gradient(g.data(), n);
  update();
  EXPECT_EQ(host(p), p1);
  EXPECT_EQ(be.take_gradient_check(), std::optional<std::size_t>(n - 1));
}

void expect_stopwatch_times(Backend& be, double at_least, const std::function<void()>& work) {
  EXPECT_THROW(be.mark(Backend::kMarks), Error);
  EXPECT_THROW(be.mark(-1), Error);
  EXPECT_THROW((void)be.seconds_between(2, 3), Error);  // never recorded
  for (int round = 0; round < 2; ++round) {             // the second round reuses the points
    be.mark(2);
    work();
    be.mark(3);
    const double s = be.seconds_between(2, 3);
    EXPECT_GE(s, at_least * 0.9) << "round " << round;
    EXPECT_LT(s, 10.0) << "round " << round;
  }
}

}  // namespace dtrain::test
