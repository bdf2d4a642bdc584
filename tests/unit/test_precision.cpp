// tests/unit/test_precision.cpp — --precision bf16 (Precision, dnn/backend.hpp) on the CPU backend:
// bf16 rounding (nearest even, NaN and overflow), the backend's cast and bf16 add, and a model in
// bf16 against the same model in fp32 (both layouts, full and partial batch, on test::kLayoutNet):
// every number stays within bf16's precision of fp32's, yet differs from it (the rounding really
// happens), the logits are bf16 values, and the activation memory halves. oneDNN's native bf16
// kernels against the emulation (CpuBf16), where the CPU has them. The same model on
// cuDNN/cuBLAS bf16 against this CPU emulation is CudaParity.Bf16ModelMatchesCpu.
#include <gtest/gtest.h>

#include <array>
#include <cfloat>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "common/layer_rig.hpp"
#include "common/model_step.hpp"
#include "common/nets.hpp"
#include "dtrain/dnn/bf16.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {
namespace {

using test::max_rel;
using test::to_host;
using test::uniform_values;

std::uint32_t bits(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

TEST(Bf16, RoundsToNearestEven) {
  const float ulp = std::ldexp(1.0f, -7);  // bf16's spacing in [1, 2)
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(round_to_bf16(1.0f + ulp), 1.0f + ulp);                              // exact
  EXPECT_EQ(round_to_bf16(1.0f + ulp / 2), 1.0f);                                // tie: to even
  EXPECT_EQ(round_to_bf16(1.0f + 3 * ulp / 2), 1.0f + 2 * ulp);                  // tie: to even
  EXPECT_EQ(round_to_bf16(1.0f + ulp / 2 + std::ldexp(1.0f, -20)), 1.0f + ulp);  // above the tie
  EXPECT_EQ(round_to_bf16(-1.0f - ulp / 4), -1.0f);
  EXPECT_EQ(bits(round_to_bf16(-0.0f)), 0x80000000u);
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(round_to_bf16(-std::numeric_limits<float>::signaling_NaN())));
  EXPECT_EQ(round_to_bf16(FLT_MAX), std::numeric_limits<float>::infinity());  // beyond bf16's max
  EXPECT_EQ(round_to_bf16(-std::numeric_limits<float>::infinity()),
            -std::numeric_limits<float>::infinity());
  // Subnormals are kept, not flushed: bf16's smallest step is 2^-133 (≈ 9.18e-41), the nearest
  // to 1e-40.
  EXPECT_EQ(round_to_bf16(1e-40f), std::ldexp(1.0f, -133));
  EXPECT_EQ(round_to_bf16(std::ldexp(3.0f, -134)), std::ldexp(1.0f, -132));  // tie: to even (2)
}

TEST(Bf16, BackendCastAndAddRoundTheSameWay) {
  auto be = make_cpu_backend();
  const std::size_t n = 1000;
  const auto a = uniform_values(n, 3, -50.0f, 50.0f), b = uniform_values(n, 4, -1.0f, 1.0f);
  auto ad = test::to_device(*be, a), bd = test::to_device(*be, b);
  DeviceBuffer<std::uint16_t> ah(*be, n), bh(*be, n);
  be->cast(ad.data(), DType::f32, ah.data(), DType::bf16, n);
  be->cast(bd.data(), DType::f32, bh.data(), DType::bf16, n);
  std::vector<std::uint16_t> host(n);
  be->copy_to_host(host.data(), ah.data(), n * 2);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(host[i], float_to_bf16(a[i])) << i;
  be->add(ah.data(), bh.data(), n, DType::bf16);  // y = bf16(y + x), summed in fp32
  DeviceBuffer<float> back(*be, n);
  be->cast(ah.data(), DType::bf16, back.data(), DType::f32, n);
  const auto sum = to_host(*be, back.data(), n);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(sum[i], round_to_bf16(round_to_bf16(a[i]) + round_to_bf16(b[i]))) << i;
}

/// The same model on two CPU backends of one layout, the same weights: by default in fp32 and in
/// bf16 (oneDNN's bf16 kernels where it has them for this CPU); `second` picks the second
/// backend's bf16 kernels, `first` the first's precision.
struct Pair {
  std::unique_ptr<Backend> be[2];
  std::unique_ptr<Model> m[2];
  Pair(const std::vector<std::string>& net, Layout layout, const Shape& sample, int classes,
       int max_batch, Precision first = Precision::fp32, CpuBf16 second = CpuBf16::native) {
    for (int k = 0; k < 2; ++k) {
      be[k] = make_cpu_backend(k == 0 ? CpuBf16::native : second);
      be[k]->set_layout(layout);
      be[k]->set_precision(k == 0 ? first : Precision::bf16);
      m[k] = std::make_unique<Model>(*be[k], net, sample, classes, max_batch);
      m[k]->initialize(17);
    }
  }
};

/// One training step of each of p's models on the same batch of n samples of `sample`'s shape
/// (uniform in [-1, 1), seed 7 + n; labels (3i + 2) mod classes).
std::array<test::StepOutputs, 2> step_both(Pair& p, const Shape& sample, int classes, int n) {
  const auto x = uniform_values(sample.with_n(n).count(), 7 + n, -1.0f, 1.0f);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = (3 * i + 2) % classes;
  return {test::run_step(*p.m[0], x, labels), test::run_step(*p.m[1], x, labels)};
}

TEST(Precision, Bf16ModelStaysWithinBf16OfFp32) {
  const Shape sample{1, 3, 8, 6};
  const int classes = 4, max_batch = 6;
  for (const Layout layout : {Layout::nchw, Layout::nhwc}) {
    SCOPED_TRACE(layout_name(layout));
    Pair p(test::kLayoutNet, layout, sample, classes, max_batch);
    EXPECT_EQ(p.be[1]->act_dtype(), DType::bf16);
    EXPECT_EQ(2 * p.m[1]->activation_bytes(), p.m[0]->activation_bytes());
    for (const int n : {max_batch, 4}) {  // the full batch and a partial last batch
      SCOPED_TRACE("batch " + std::to_string(n));
      const auto [f, h] = step_both(p, sample, classes, n);
      // bf16 keeps 8 significant bits (relative rounding error ≤ 2^-9 ≈ 0.2 %) at every layer's
      // output and every activation gradient; across the 18 layers that compounds to about 1 %.
      EXPECT_NEAR(h.loss[0], f.loss[0], 2e-2 * std::abs(f.loss[0]));
      EXPECT_LE(max_rel(h.grads, f.grads), 5e-2);
      EXPECT_LE(max_rel(h.state, f.state), 2e-2);
      EXPECT_NEAR(h.eval[0], f.eval[0], 2e-2 * std::abs(f.eval[0]));
      EXPECT_LE(max_rel(h.logits, f.logits), 3e-2);
      // ... but the rounding is there: the gradients differ, and every logit is a bf16 value.
      EXPECT_GT(max_rel(h.grads, f.grads), 1e-4);
      for (float v : h.logits) ASSERT_EQ(v, round_to_bf16(v));
      std::size_t inexact = 0;
      for (float v : f.logits) inexact += v != round_to_bf16(v) ? 1 : 0;
      EXPECT_GT(inexact, f.logits.size() / 2);  // fp32 logits are not (the check can fail)
    }
  }
}

/// The (native, emulated) bf16 op counts a CPU backend's name() reports; (-1, -1) without them.
std::pair<int, int> bf16_ops(const std::string& name) {
  int native = -1, emulated = -1;
  const auto at = name.find("; bf16: ");
  if (at == std::string::npos ||
      std::sscanf(name.c_str() + at, "; bf16: %d ops on oneDNN's bf16 kernels, %d emulated",
                  &native, &emulated) != 2)
    return {-1, -1};
  return {native, emulated};
}

// oneDNN's bf16 kernels (CpuBf16::native, on an AVX-512 CPU; fast with AVX512_BF16 or AMX)
// against the emulation (fp32 kernels on the same bf16-rounded tensors): both round the same
// tensors at the same places and accumulate in fp32, so they differ only where a different
// summation order moves a sum across a bf16 rounding boundary — a few bf16 ulps at most, well
// inside bf16-vs-fp32's distance.
TEST(Precision, NativeBf16KernelsComputeWhatTheEmulationComputes) {
  const Shape sample{1, 3, 8, 6};
  const int classes = 4, max_batch = 6;
  for (const Layout layout : {Layout::nchw, Layout::nhwc}) {
    SCOPED_TRACE(layout_name(layout));
    Pair p(test::kLayoutNet, layout, sample, classes, max_batch, Precision::bf16,
           CpuBf16::emulated);
    const auto [native, native_emulated] = bf16_ops(p.be[0]->name());
    const auto [none, emulated] = bf16_ops(p.be[1]->name());
    ASSERT_GE(native, 0) << p.be[0]->name();
    if (native == 0)  // e.g. no AVX-512 (ONEDNN_MAX_CPU_ISA=AVX2: unit_tests_precision_avx2)
      GTEST_SKIP() << "oneDNN has no bf16 kernels on this CPU: " << p.be[0]->name();
    // The same ops either way; the native backend runs most of them natively (here every conv,
    // pooling, activation and dense; the loss, and batchnorm on C = 4 channels, are emulated).
    EXPECT_EQ(none, 0) << p.be[1]->name();
    EXPECT_EQ(native + native_emulated, emulated);
    EXPECT_GT(native, native_emulated) << p.be[0]->name();
    for (const int n : {max_batch, 4}) {
      SCOPED_TRACE("batch " + std::to_string(n));
      const auto [a, e] = step_both(p, sample, classes, n);
      // One bf16 ulp is 2^-8 ≈ 3.9e-3 of a value (measured on an AVX512_BF16 host: the weight
      // gradients 5e-4 apart, the rest equal); bf16 against fp32 is 1e-2 .. 5e-2 apart (above).
      EXPECT_NEAR(a.loss[0], e.loss[0], 1e-3 * std::abs(e.loss[0]));
      EXPECT_NEAR(a.loss[1], e.loss[1], 1.0f);  // right predictions: at most a near-tie flips
      EXPECT_LE(max_rel(a.grads, e.grads), 4e-3);
      EXPECT_LE(max_rel(a.state, e.state), 4e-3);
      EXPECT_LE(max_rel(a.logits, e.logits), 4e-3);
      for (float v : a.logits) ASSERT_EQ(v, round_to_bf16(v));
    }
  }
}

TEST(Precision, Bf16TrainingFollowsFp32) {
  // 60 SGD steps on one fixed batch: the loss falls the same way in both precisions.
  const Shape sample{1, 3, 8, 6};
  const int classes = 4, n = 8;
  Pair p(test::kBranchyNet, Layout::nchw, sample, classes, n);
  const auto x = uniform_values(sample.with_n(n).count(), 11, -1.0f, 1.0f);
  std::vector<std::int32_t> labels(n);
  for (int i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = i % classes;
  float first[2] = {0, 0}, last[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    Backend& be = *p.be[k];
    Model& m = *p.m[k];
    auto xd = test::to_device(be, x);
    DeviceBuffer<std::int32_t> yd(be, labels.size());
    be.copy_to_device(yd.data(), labels.data(), labels.size() * sizeof(std::int32_t));
    DeviceBuffer<float> stats(be, kStatsFloats);
    OptimizerUpdate u;
    u.lr = 0.3f;
    for (int step = 0; step < 60; ++step) {
      be.fill(stats.data(), 0.0f, kStatsFloats);
      m.train_step(xd.data(), yd.data(), n, 1.0f / n, 5, stats.data());
      const float loss = to_host(be, stats.data(), 1)[0] / n;
      (step == 0 ? first[k] : last[k]) = loss;
      be.optimizer_update(u, m.params(), m.grads(), nullptr, nullptr, m.param_count());
    }
  }
  EXPECT_LT(last[0], 0.5f * first[0]);
  EXPECT_LT(last[1], 0.5f * first[1]);
  EXPECT_NEAR(last[1], last[0], 0.05f * first[0])
      << "fp32 " << first[0] << " -> " << last[0] << ", bf16 " << first[1] << " -> " << last[1];
}

}  // namespace
}  // namespace dtrain
