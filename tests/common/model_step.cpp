// tests/common/model_step.cpp — see model_step.hpp.
#include "common/model_step.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/layer_rig.hpp"

namespace dtrain::test {

StepOutputs run_step(Model& m, const std::vector<float>& x,
                     const std::vector<std::int32_t>& labels) {
  auto xd = to_device(m.backend(), x);
  return run_step_on(m, xd.data(), labels, 1);
}

StepOutputs run_step_on(Model& m, const void* x, const std::vector<std::int32_t>& labels,
                        int micro_batches) {
  Backend& be = m.backend();
  const int n = static_cast<int>(labels.size());
  DeviceBuffer<std::int32_t> yd(be, labels.size());
  be.copy_to_device(yd.data(), labels.data(), labels.size() * sizeof(std::int32_t));
  DeviceBuffer<float> stats(be, kStatsFloats);
  StepOutputs out;
  m.train_step_micro(x, yd.data(), n, micro_batches, 1.0f / static_cast<float>(n), 9, stats.data());
  out.loss = to_host(be, stats.data(), kStatsFloats);
  out.grads = to_host(be, m.grads(), m.param_count());
  out.state = to_host(be, m.state(), m.state_count());
  be.fill(stats.data(), 0.0f, kStatsFloats);
  m.evaluate(x, yd.data(), n, stats.data());
  out.eval = to_host(be, stats.data(), kStatsFloats);
  out.logits.resize(labels.size() * static_cast<std::size_t>(m.num_classes()));
  m.logits(x, n, out.logits.data());
  return out;
}

std::vector<std::byte> network_form(Backend& be, const std::vector<float>& x, const Shape& s,
                                    Layout to, DType t) {
  DeviceBuffer<float> xd = to_device(be, x), moved(be, x.size());
  const float* at = xd.data();
  if (to == Layout::nhwc && layouts_differ(s)) {
    be.convert_layout(at, moved.data(), s, Layout::nhwc, DType::f32);
    at = moved.data();
  }
  DeviceBuffer<std::byte> y(be, x.size() * dtype_size(t));
  be.cast(at, DType::f32, y.data(), t, x.size());
  std::vector<std::byte> out(y.size());
  be.synchronize();
  be.copy_to_host(out.data(), y.data(), out.size());
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
