// tests/unit/test_fusion.cpp — layer fusion (Backend::set_fuse, --fuse): the memory plan of an
// absorbed relu (one buffer for the producer's output and the relu's, one for their gradients)
// and of a layer that adds its input gradient in place (no scratch); on the CPU backend a ResNet
// graph trained fused and unfused gives the same bits (the default add_relu and
// relu_backward_fanout are the unfused ops in one call), and so do conv → relu stacks (VGG, a
// CNN) with the relu inside oneDNN's convolution. The CUDA kernels and cuDNN's fused
// batchnorm are compared with their unfused paths in test_cuda_backend.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common/layer_rig.hpp"
#include "common/model_step.hpp"
#include "common/nets.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/model/model.hpp"
#include "model/memory_plan.hpp"

namespace dtrain {
namespace {

/// conv (1) → add (2) with the conv and the input's conv (0) → relu (3, absorbed) → dense (4):
/// tensor 1 (conv 0's output) feeds conv 1 and the add.
std::vector<PlanNode> residual_nodes(bool fuse) {
  std::vector<PlanNode> n = {
      {{0}, 100, {true, false, false}},     // conv 0
      {{1}, 100, {true, false, false}},     // conv 1
      {{2, 1}, 100, {false, fuse, false}},  // add: reads its output when the relu is inside
      {{3}, 100, {false, true, true}},      // relu
      {{4}, 10, {true, false, false}},      // dense
  };
  n[3].absorbed = fuse;
  if (fuse) n[3].needs = {false, false, false};
  n[1].can_accumulate = fuse;
  return n;
}

TEST(Fusion, PlanSharesTheAbsorbedReluBuffersAndSumsInPlace) {
  const MemoryPlan fused = plan_memory(residual_nodes(true));
  // The add writes the relu's output: one buffer, and one gradient buffer.
  EXPECT_EQ(fused.act[3], fused.act[4]);
  EXPECT_EQ(fused.grad[3], fused.grad[4]);
  // Tensor 1's gradient: the add writes it first, conv 1 adds into it — no scratch, no add.
  ASSERT_EQ(fused.backward[1].dx.size(), 1u);
  EXPECT_EQ(fused.backward[1].dx[0], fused.grad[1]);
  EXPECT_FALSE(fused.backward[1].accumulate[0]);
  EXPECT_TRUE(fused.backward[1].adds_in_place[0]);
  EXPECT_EQ(fused.backward[2].dx[1], fused.grad[1]);
  EXPECT_FALSE(fused.backward[2].adds_in_place[1]);

  const MemoryPlan plain = plan_memory(residual_nodes(false));
  EXPECT_NE(plain.backward[1].dx[0], plain.grad[1]);  // a scratch buffer, then an add
  EXPECT_TRUE(plain.backward[1].accumulate[0]);
  EXPECT_FALSE(plain.backward[1].adds_in_place[0]);
  // Nothing live at once overlaps: the fused add's output buffer is not reused before the
  // relu's readers are done (the dense layer reads it in backward).
  EXPECT_NE(fused.act[4], fused.act[5]);
}

TEST(Fusion, AnAbsorbedReluMustBeTheOnlyReaderOfItsInput) {
  std::vector<PlanNode> n = residual_nodes(true);
  n[4].inputs = {4, 3};  // the dense layer also reads the add's output
  EXPECT_THROW(plan_memory(n), Error);
}

/// A training step (test::run_step; 4 classes) of two models initialized alike, on a batch of
/// max_batch() and one of 5 samples: the same bits in every output (gradients, state, loss,
/// evaluation, logits), and gradients that are not all zero.
void expect_same_bits(Model& fused, Model& plain, const Shape& sample) {
  fused.initialize(5);
  plain.initialize(5);
  for (const int n : {fused.max_batch(), 5}) {
    SCOPED_TRACE("batch " + std::to_string(n));
    const auto x = test::uniform_values(sample.with_n(n).count(), 31 + n, -1.0f, 1.0f);
    std::vector<std::int32_t> y(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) y[static_cast<std::size_t>(i)] = (3 * i + 1) % 4;
    const test::StepOutputs a = test::run_step(fused, x, y), b = test::run_step(plain, x, y);
    EXPECT_EQ(a.grads, b.grads);
    EXPECT_EQ(a.state, b.state);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.eval, b.eval);
    EXPECT_EQ(a.logits, b.logits);
    EXPECT_GT(*std::max_element(a.grads.begin(), a.grads.end()), 0.0f);
  }
}

/// The same ResNet graph on the CPU backend, fused and unfused: identical bits in every output
/// of a training step, and the fused model really fused (both add → relu pairs; the CPU backend's
/// batchnorm has no fused relu, and oneDNN's convolution cannot add into dx).
TEST(Fusion, CpuResidualNetFusedEqualsUnfusedBitForBit) {
  const Shape sample{1, 3, 8, 8};
  auto fused_be = make_cpu_backend(), plain_be = make_cpu_backend();
  plain_be->set_fuse(false);
  Model fused(*fused_be, test::kResidualNet, sample, 4, 12);
  Model plain(*plain_be, test::kResidualNet, sample, 4, 12);
  EXPECT_EQ(fused.fused_layers(), 2u);
  EXPECT_EQ(plain.fused_layers(), 0u);
  EXPECT_EQ(fused.in_place_gradient_sums(), 0u);
  EXPECT_EQ(fused.signature(), plain.signature());  // checkpoints do not see fusion
  EXPECT_NE(fused.summary().find("(runs inside #12)"), std::string::npos) << fused.summary();
  expect_same_bits(fused, plain, sample);
}

/// `layers` (classes 4, batch 8) on two CPU backends in `layout` and `precision`, --fuse auto and
/// off: expect_same_bits. Returns the fused model's fused_layers().
std::size_t expect_fused_equals_unfused(const std::vector<std::string>& layers, const Shape& sample,
                                        Layout layout, Precision precision) {
  auto fused_be = make_cpu_backend(), plain_be = make_cpu_backend();
  for (Backend* be : {fused_be.get(), plain_be.get()}) {
    be->set_layout(layout);
    be->set_precision(precision);
  }
  plain_be->set_fuse(false);
  Model fused(*fused_be, layers, sample, 4, 8);
  Model plain(*plain_be, layers, sample, 4, 8);
  EXPECT_EQ(plain.fused_layers(), 0u);
  EXPECT_EQ(fused.signature(), plain.signature());
  expect_same_bits(fused, plain, sample);
  return fused.fused_layers();
}

/// conv → relu with the relu inside the convolution (oneDNN's eltwise_relu post-op; backward masks
/// dy from the fused output in place): bit for bit the unfused run, in both layouts (in NHWC the
/// 64-channel convolutions take oneDNN's nxc route) and in bf16 (oneDNN rounds the output once,
/// after the relu: the same bits, as rounding keeps signs). Where oneDNN has no bf16 kernels on
/// this CPU the backend emulates bf16 and fuses no convolution; fp32 fuses every sole-reader pair.
TEST(Fusion, CpuConvReluFusedEqualsUnfusedBitForBit) {
  for (const Layout layout : {Layout::nchw, Layout::nhwc}) {
    for (const Precision precision : {Precision::fp32, Precision::bf16}) {
      const bool f32 = precision == Precision::fp32;
      SCOPED_TRACE(std::string(layout_name(layout)) + (f32 ? " fp32" : " bf16"));
      const std::size_t vgg =
          expect_fused_equals_unfused(test::kVggNet, Shape{1, 3, 8, 8}, layout, precision);
      const std::size_t cnn =
          expect_fused_equals_unfused(test::kConvReluCnn, Shape{1, 1, 12, 12}, layout, precision);
      const std::size_t odd =
          expect_fused_equals_unfused(test::kOddConvReluNet, Shape{1, 3, 5, 7}, layout, precision);
      if (f32) {
        EXPECT_EQ(vgg, 4u);  // not the conv that an add also reads, not the dense's relu
        EXPECT_EQ(cnn, 2u);
        EXPECT_EQ(odd, 4u);
      }
      std::printf(
          "[ fusion   ] %s %s: layers run inside another: VGG-style %zu, CNN %zu, odd %zu\n",
          layout_name(layout), f32 ? "fp32" : "bf16", vgg, cnn, odd);
    }
  }
}

/// Gradient accumulation (Model::train_step_micro): M micro-batches give the sum of M separate
/// train_step calls on the slices, bit for bit (the same batch-norm updates in the same order),
/// with on_final reporting every range once, the last time from 0.
TEST(MicroBatches, AccumulateTheSlicesGradientsBitForBit) {
  const Shape sample{1, 3, 8, 8};
  const int n = 10, M = 4;  // slices of 2, 3, 2, 3 samples
  auto be_a = make_cpu_backend(), be_b = make_cpu_backend();
  Model a(*be_a, test::kResidualNet, sample, 4, n);
  Model b(*be_b, test::kResidualNet, sample, 4, n);
  a.initialize(3);
  b.initialize(3);
  const auto x = test::uniform_values(sample.with_n(n).count(), 77, -1.0f, 1.0f);
  std::vector<std::int32_t> y(n);
  for (int i = 0; i < n; ++i) y[static_cast<std::size_t>(i)] = (7 * i + 3) % 4;
  auto xa = test::to_device(*be_a, x), xb = test::to_device(*be_b, x);
  DeviceBuffer<std::int32_t> ya(*be_a, n), yb(*be_b, n);
  be_a->copy_to_device(ya.data(), y.data(), y.size() * sizeof(std::int32_t));
  be_b->copy_to_device(yb.data(), y.data(), y.size() * sizeof(std::int32_t));
  DeviceBuffer<float> sa(*be_a, kStatsFloats), sb(*be_b, kStatsFloats);
  be_a->fill(sa.data(), 0.0f, kStatsFloats);
  be_b->fill(sb.data(), 0.0f, kStatsFloats);
  std::vector<std::size_t> seen;
  a.train_step_micro(xa.data(), ya.data(), n, M, 1.0f / n, 5, sa.data(),
                     [&](std::size_t from) { seen.push_back(from); });
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), 0u);
  // The same slices by hand, summed in the same order.
  std::vector<float> sum;
  const std::size_t per = sample.count();
  for (int m = 0; m < M; ++m) {
    const int lo = n * m / M, hi = n * (m + 1) / M;
    b.train_step(xb.data() + lo * per, yb.data() + lo, hi - lo, 1.0f / n, 0, sb.data());
    const auto g = test::to_host(*be_b, b.grads(), b.param_count());
    if (m == 0) {
      sum = g;
    } else if (m + 1 < M) {
      for (std::size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
    } else {
      for (std::size_t i = 0; i < g.size(); ++i) sum[i] = g[i] + sum[i];
    }
  }
  EXPECT_EQ(test::to_host(*be_a, a.grads(), a.param_count()), sum);
  EXPECT_EQ(test::to_host(*be_a, a.state(), a.state_count()),
            test::to_host(*be_b, b.state(), b.state_count()));
  EXPECT_EQ(test::to_host(*be_a, sa.data(), kStatsFloats),
            test::to_host(*be_b, sb.data(), kStatsFloats));
}

}  // namespace
}  // namespace dtrain
