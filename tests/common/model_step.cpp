// tests/common/model_step.cpp — see model_step.hpp.
#include "common/model_step.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/layer_rig.hpp"

namespace dtrain::test {

StepOutputs run_step(Model& m, const std::vector<float>& x,
                     const std::vector<std::int32_t>& labels) {
  Backend& be = m.backend();
  const int n = static_cast<int>(labels.size());
  auto xd = to_device(be, x);
  DeviceBuffer<std::int32_t> yd(be, labels.size());
  be.copy_to_device(yd.data(), labels.data(), labels.size() * sizeof(std::int32_t));
  DeviceBuffer<float> stats(be, kStatsFloats);
  StepOutputs out;
  m.train_step(xd.data(), yd.data(), n, 1.0f / static_cast<float>(n), 9, stats.data());
  out.loss = to_host(be, stats.data(), kStatsFloats);
  out.grads = to_host(be, m.grads(), m.param_count());
  out.state = to_host(be, m.state(), m.state_count());
  be.fill(stats.data(), 0.0f, kStatsFloats);
  m.evaluate(xd.data(), yd.data(), n, stats.data());
  out.eval = to_host(be, stats.data(), kStatsFloats);
  out.logits.resize(labels.size() * static_cast<std::size_t>(m.num_classes()));
  m.logits(xd.data(), n, out.logits.data());
  return out;
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0, m = 1e-30;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d = std::max(d, static_cast<double>(std::abs(a[i] - b[i])));
    m = std::max(m, static_cast<double>(std::abs(b[i])));
  }
  return d / m;
}

}  // namespace dtrain::test
