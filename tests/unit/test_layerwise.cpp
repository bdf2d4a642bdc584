// tests/unit/test_layerwise.cpp — LARS and LAMB (Optimizer over Backend::layerwise_update on the
// CPU): the first step against closed-form numbers worked out by hand on a tiny tensor set (a conv
// weight, batchnorm γ and β, a dense weight and bias), the bias/batchnorm exclusion (no trust
// ratio, no weight decay), trust 1 for a zero tensor, further steps against a direct double-
// precision transcription of the papers' formulas, and the tensor table param_segments() builds.
#include <gtest/gtest.h>

#include <cmath>

#include "dtrain/core/error.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "common/tensor_table.hpp"

namespace dtrain {
namespace {

// offsets: conv.weight 0..4, bn.gamma 4..6, bn.beta 6..8, dense.weight 8..10, dense.bias 10..12
std::vector<TensorInfo> tensors() {
  return test::tensor_table({{"0.conv.weight", 4},
                             {"1.batchnorm.gamma", 2},
                             {"1.batchnorm.beta", 2},
                             {"2.dense.weight", 2},
                             {"2.dense.bias", 2}});
}

constexpr std::size_t kN = 12;
// conv.weight ‖p‖ = 5, ‖g‖ = 1; γ, β excluded; dense.weight zero (trust 1); dense.bias excluded.
const std::vector<float> kP0 = {3, 4, 0, 0, 1, 1, 0.5f, -0.5f, 0, 0, 0.2f, 0.1f};
const std::vector<float> kG = {0.6f, 0.8f, 0, 0, 0.5f, -0.5f, 0.25f, 0.25f, 1, -2, 0.1f, -0.1f};

Config config(OptimizerKind optimizer) {
  Config c;
  c.optimizer = optimizer;
  c.mode = Mode::sync;
  c.num_ps = 0;
  c.lr = 1.0f;
  c.momentum = 0.9f;
  c.weight_decay = 0.1f;
  c.lars_eta = 0.01f;
  c.adam_epsilon = 1e-8f;
  return c;
}

using Seg = std::vector<ParamSegment>;

TEST(Layerwise, SegmentsExcludeBiasAndBatchnorm) {
  EXPECT_EQ(param_segments(tensors(), kN),
            (Seg{{0, 4, true}, {4, 6, false}, {6, 8, false}, {8, 10, true}, {10, 12, false}}));
  // A gap and a tail not covered by any tensor: unadapted segments of their own.
  std::vector<TensorInfo> t = tensors();
  t.erase(t.begin() + 1);  // drop bn.gamma
  EXPECT_EQ(param_segments(t, 14), (Seg{{0, 4, true},
                                        {4, 6, false},
                                        {6, 8, false},
                                        {8, 10, true},
                                        {10, 12, false},
                                        {12, 14, false}}));
  t[1].offset = 3;  // overlaps the conv weight
  EXPECT_THROW(param_segments(t, 14), InputError);
  EXPECT_THROW(param_segments(tensors(), 11), InputError);  // past n
  // A ps shard of whole tensors: its segments shifted to 0; a cut inside a tensor is refused.
  EXPECT_EQ(param_segments(tensors(), kN, 4, 10),
            (Seg{{0, 2, false}, {2, 4, false}, {4, 6, true}}));
  EXPECT_EQ(param_segments(tensors(), kN, 0, kN), param_segments(tensors(), kN));
  EXPECT_THROW(param_segments(tensors(), kN, 2, 12), InputError);  // cuts the conv weight
  EXPECT_THROW(param_segments(tensors(), kN, 0, 9), InputError);   // cuts the dense weight
  EXPECT_THROW(param_segments(tensors(), kN, 4, 4), InputError);   // empty
  EXPECT_THROW(param_segments(tensors(), kN, 8, 13), InputError);  // past n
}

TEST(Layerwise, LarsFirstStepByHand) {
  auto be = make_cpu_backend();
  Optimizer opt(config(OptimizerKind::lars), *be, kN, 10, {}, param_segments(tensors(), kN));
  std::vector<float> p = kP0;
  ASSERT_TRUE(opt.apply(p.data(), kG.data(), 0));
  // conv.weight: trust = 0.01·5 / (1 + 0.1·5) = 1/30; g + wd·p = (0.9, 1.2, 0, 0); m = trust·that.
  const std::vector<float> want = {3 - 0.03f, 4 - 0.04f, 0, 0,
                                   // γ, β: plain momentum, no decay: p − g
                                   0.5f, 1.5f, 0.25f, -0.75f,
                                   // dense.weight: ‖p‖ = 0, trust 1: p − (g + 0.1·0)
                                   -1, 2,
                                   // dense.bias: p − g
                                   0.1f, 0.2f};
  for (std::size_t i = 0; i < kN; ++i) EXPECT_NEAR(p[i], want[i], 1e-6) << "float " << i;
  EXPECT_NEAR(opt.m()[0], 0.03f, 1e-7);
  EXPECT_NEAR(opt.m()[4], 0.5f, 1e-7);
}

TEST(Layerwise, LambFirstStepByHand) {
  auto be = make_cpu_backend();
  Optimizer opt(config(OptimizerKind::lamb), *be, kN, 10, {}, param_segments(tensors(), kN));
  std::vector<float> p = kP0;
  ASSERT_TRUE(opt.apply(p.data(), kG.data(), 0));
  // Step 1: m̂ = g, v̂ = g², so r = g / (|g| + ε) + wd·p = sign(g) + wd·p (0 where g = 0).
  // conv.weight: r = (1.3, 1.4, 0, 0), trust = ‖p‖/‖r‖ = 5/√3.65.
  const float t = 5.0f / std::sqrt(3.65f);
  // dense.weight: p = 0, trust 1, r = sign(g) = (1, −1).
  const std::vector<float> want = {3 - 1.3f * t, 4 - 1.4f * t, 0, 0,
                                   // γ, β, dense.bias: unadapted, no decay: p − sign(g)
                                   0, 2, -0.5f, -1.5f, -1, 1, -0.8f, 1.1f};
  for (std::size_t i = 0; i < kN; ++i) EXPECT_NEAR(p[i], want[i], 1e-5) << "float " << i;
}

/// ‖x[b, e)‖ in double.
double norm(const std::vector<double>& x, std::size_t b, std::size_t e) {
  double s = 0;
  for (std::size_t i = b; i < e; ++i) s += x[i] * x[i];
  return std::sqrt(s);
}

/// LARS and LAMB as the papers write them, in double, for the test's tensors.
void reference_step(const Config& c, bool lamb, int step, std::vector<double>& p,
                    std::vector<double>& m, std::vector<double>& v) {
  for (const ParamSegment& s : param_segments(tensors(), kN)) {
    const double wd = s.adapt ? c.weight_decay : 0.0;
    std::vector<double> g(kN), r(kN);
    for (std::size_t i = s.begin; i < s.end; ++i) g[i] = kG[i];
    const double wn = norm(p, s.begin, s.end), gn = norm(g, s.begin, s.end);
    if (!lamb) {
      const double trust = s.adapt && wn > 0 && gn > 0 ? c.lars_eta * wn / (gn + wd * wn) : 1.0;
      for (std::size_t i = s.begin; i < s.end; ++i) {
        m[i] = c.momentum * m[i] + trust * (g[i] + wd * p[i]);
        p[i] -= c.lr * m[i];
      }
      continue;
    }
    for (std::size_t i = s.begin; i < s.end; ++i) {
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * g[i];
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * g[i] * g[i];
      const double mh = m[i] / (1 - std::pow(c.beta1, step)),
                   vh = v[i] / (1 - std::pow(c.beta2, step));
      r[i] = mh / (std::sqrt(vh) + c.adam_epsilon) + wd * p[i];
    }
    const double rn = norm(r, s.begin, s.end);
    const double trust = s.adapt && wn > 0 && rn > 0 ? wn / rn : 1.0;
    for (std::size_t i = s.begin; i < s.end; ++i) p[i] -= c.lr * trust * r[i];
  }
}

TEST(Layerwise, LaterStepsFollowThePapers) {
  auto be = make_cpu_backend();
  for (const bool lamb : {false, true}) {
    SCOPED_TRACE(lamb ? "lamb" : "lars");
    Config c = config(lamb ? OptimizerKind::lamb : OptimizerKind::lars);
    c.lr = 0.05f;  // small steps, so four of them stay well inside float precision
    Optimizer opt(c, *be, kN, 10, {}, param_segments(tensors(), kN));
    std::vector<float> p = kP0;
    std::vector<double> rp(kP0.begin(), kP0.end()), rm(kN), rv(kN);
    for (int step = 0; step < 4; ++step) {
      ASSERT_TRUE(opt.apply(p.data(), kG.data(), step));
      reference_step(c, lamb, step + 1, rp, rm, rv);
      for (std::size_t i = 0; i < kN; ++i)
        EXPECT_NEAR(p[i], rp[i], 2e-6 * (1 + std::abs(rp[i]))) << "step " << step << " float " << i;
    }
    EXPECT_EQ(opt.v() != nullptr, lamb);  // checkpointed state: m, and v for LAMB
    ASSERT_NE(opt.m(), nullptr);
  }
}

TEST(Layerwise, LrScaleScalesTheStepsLearningRate) {
  // An async ps's --stale-lr inverse: lr/τ for the normalizing optimizers (LARS, LAMB, Adam),
  // which would cancel a gradient divided by τ instead.
  auto be = make_cpu_backend();
  for (const OptimizerKind kind : {OptimizerKind::lars, OptimizerKind::lamb, OptimizerKind::adam}) {
    SCOPED_TRACE(to_string(kind));
    Config c = config(kind);
    c.lr = 0.05f;
    Config third = c;
    third.lr = c.lr / 3;
    Optimizer scaled(c, *be, kN, 10, {}, param_segments(tensors(), kN));
    Optimizer slow(third, *be, kN, 10, {}, param_segments(tensors(), kN));
    std::vector<float> a = kP0, b = kP0;
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(scaled.apply(a.data(), kG.data(), step, 1.0f / 3));
      ASSERT_TRUE(slow.apply(b.data(), kG.data(), step));
    }
    for (std::size_t i = 0; i < kN; ++i) EXPECT_NEAR(a[i], b[i], 1e-6f) << i;
    std::vector<float> full = kP0;
    Optimizer unscaled(c, *be, kN, 10, {}, param_segments(tensors(), kN));
    ASSERT_TRUE(unscaled.apply(full.data(), kG.data(), 0));
    EXPECT_NE(full, kP0);  // the steps move the parameters
  }
}

TEST(Layerwise, WholeBufferOnlyAndNonFiniteReported) {
  auto be = make_cpu_backend();
  Optimizer opt(config(OptimizerKind::lars), *be, kN, 10, {}, param_segments(tensors(), kN));
  std::vector<float> p = kP0, g = kG;
  EXPECT_THROW(opt.apply(p.data(), g.data(), 0, 0, 4), InputError);  // a ps chunk
  EXPECT_THROW(opt.apply_into_grads(p.data(), g.data(), 0, 0, kN), InputError);
  g[5] = NAN;
  EXPECT_FALSE(opt.apply(p.data(), g.data(), 0));
  EXPECT_THROW(Optimizer(config(OptimizerKind::lamb), *be, kN, 10), InputError);  // no tensor table
  EXPECT_THROW(
      Optimizer(config(OptimizerKind::lamb), *be, kN + 1, 10, {}, param_segments(tensors(), kN)),
      InputError);  // the table does not cover the parameters
}

}  // namespace
}  // namespace dtrain
