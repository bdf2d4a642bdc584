// tests/unit/test_layout.cpp — the NHWC activation layout (Layout, dnn/backend.hpp) on the CPU
// backend: convert_layout puts every element where the layout's formula says and back; a model on
// an NHWC backend computes what the same model computes in NCHW — loss, parameter gradients,
// batchnorm running statistics, evaluation and logits, also for a partial batch — on a graph with
// every layer whose memory order matters (test::kLayoutNet). The same comparison against cuDNN's
// NHWC kernels is CudaParity.NhwcModelMatchesCpu (test_cuda_backend.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "common/layer_rig.hpp"
#include "common/model_step.hpp"
#include "common/nets.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {
namespace {

using test::max_rel;
using test::to_host;
using test::uniform_values;

TEST(Layout, ConvertPlacesEveryElementByTheFormula) {
  auto be = make_cpu_backend();
  const Shape s{2, 3, 2, 5};
  std::vector<float> nchw(s.count());
  for (std::size_t i = 0; i < nchw.size(); ++i) nchw[i] = static_cast<float>(i);
  auto x = test::to_device(*be, nchw);
  DeviceBuffer<float> y(*be, s.count()), back(*be, s.count());
  be->convert_layout(x.data(), y.data(), s, Layout::nhwc, DType::f32);
  const auto nhwc = to_host(*be, y.data(), s.count());
  for (int n = 0; n < s.n; ++n)
    for (int c = 0; c < s.c; ++c)
      for (int h = 0; h < s.h; ++h)
        for (int w = 0; w < s.w; ++w)
          ASSERT_EQ(nhwc[static_cast<std::size_t>(((n * s.h + h) * s.w + w) * s.c + c)],
                    nchw[static_cast<std::size_t>(((n * s.c + c) * s.h + h) * s.w + w)])
              << "n " << n << " c " << c << " h " << h << " w " << w;
  be->convert_layout(y.data(), back.data(), s, Layout::nchw, DType::f32);
  EXPECT_EQ(to_host(*be, back.data(), s.count()), nchw);
  // The same in bf16 (the values 0..59 are exact in bf16): through the backend's cast.
  DeviceBuffer<std::uint16_t> xh(*be, s.count()), yh(*be, s.count());
  be->cast(x.data(), DType::f32, xh.data(), DType::bf16, s.count());
  be->convert_layout(xh.data(), yh.data(), s, Layout::nhwc, DType::bf16);
  be->cast(yh.data(), DType::bf16, back.data(), DType::f32, s.count());
  EXPECT_EQ(to_host(*be, back.data(), s.count()), nhwc);
  EXPECT_TRUE(layouts_differ(s));
  EXPECT_FALSE(layouts_differ(Shape{4, 1, 5, 5}));  // one channel: the same memory
  EXPECT_FALSE(layouts_differ(Shape{4, 7, 1, 1}));  // one pixel: the same memory
}

/// The largest |v| (0 for an empty vector).
double max_abs(const std::vector<float>& v) {
  double g = 0;
  for (float x : v) g = std::max(g, static_cast<double>(std::abs(x)));
  return g;
}

/// One model per layout on its own CPU backend, the same weights and batches.
struct Pair {
  std::unique_ptr<Backend> be[2];
  std::unique_ptr<Model> m[2];
  Pair(const Shape& sample, int classes, int max_batch,
       const std::vector<std::string>& net = test::kLayoutNet) {
    for (int k = 0; k < 2; ++k) {
      be[k] = make_cpu_backend();
      be[k]->set_layout(k == 0 ? Layout::nchw : Layout::nhwc);
      m[k] = std::make_unique<Model>(*be[k], net, sample, classes, max_batch);
      m[k]->initialize(17);
    }
  }
};

TEST(Layout, NhwcModelComputesWhatNchwComputes) {
  const Shape sample{1, 3, 8, 6};
  const int classes = 4, max_batch = 5;
  Pair p(sample, classes, max_batch);
  ASSERT_EQ(p.m[0]->param_count(), p.m[1]->param_count());
  ASSERT_EQ(p.m[0]->state_count(), p.m[1]->state_count());
  for (const int n : {max_batch, 3}) {  // the full batch and a partial last batch
    SCOPED_TRACE("batch " + std::to_string(n));
    const auto x = uniform_values(sample.with_n(n).count(), 5 + n, -1.0f, 1.0f);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = (3 * i + 1) % classes;
    test::StepOutputs r[2];
    for (int k = 0; k < 2; ++k) r[k] = test::run_step(*p.m[k], x, labels);
    EXPECT_NEAR(r[1].loss[0], r[0].loss[0], 1e-5 * std::abs(r[0].loss[0]));
    EXPECT_EQ(r[1].loss[1], r[0].loss[1]);  // correct predictions
    EXPECT_LE(max_rel(r[1].grads, r[0].grads), 1e-5);
    EXPECT_LE(max_rel(r[1].state, r[0].state), 1e-5);
    EXPECT_NEAR(r[1].eval[0], r[0].eval[0], 1e-5 * std::abs(r[0].eval[0]));
    EXPECT_LE(max_rel(r[1].logits, r[0].logits), 1e-5);
    // Not vacuous: the gradients are there, and the same batch in the wrong memory order (its
    // NHWC bytes read as NCHW) gives other ones.
    EXPECT_GT(max_abs(r[0].grads), 1e-3);
    Backend& be = *p.be[0];
    auto xd = test::to_device(be, x);
    DeviceBuffer<float> swapped(be, x.size()), stats(be, kStatsFloats);
    be.convert_layout(xd.data(), swapped.data(), sample.with_n(n), Layout::nhwc, DType::f32);
    DeviceBuffer<std::int32_t> yd(be, static_cast<std::size_t>(n));
    be.copy_to_device(yd.data(), labels.data(), labels.size() * sizeof(std::int32_t));
    Model fresh(be, test::kLayoutNet, sample, classes, max_batch);  // m[0]'s state stays put
    fresh.initialize(17);
    fresh.train_step(swapped.data(), yd.data(), n, 1.0f / static_cast<float>(n), 9, stats.data());
    EXPECT_GT(max_rel(to_host(be, fresh.grads(), fresh.param_count()), r[0].grads), 1e-2);
  }
}

// Convolutions of 64 or more input and output channels run on the nhwc tensors themselves
// (no reorder, conv_pool.cpp kNxcMinChannels), narrower ones in oneDNN's blocked layouts: both
// routes, forward and both backward passes, against NCHW.
TEST(Layout, WideConvolutionsOnNhwcComputeWhatNchwComputes) {
  const std::vector<std::string> net = {
      "conv filters=64 kernel=3 pad=1",  // 3 -> 64: blocked
      "relu name=r",
      "conv filters=64 kernel=3 pad=1",  // 64 -> 64: nhwc in place
      "batchnorm",
      "conv filters=72 kernel=1 bias=false",  // 64 -> 72, 1x1: nhwc in place
      "relu",
      "conv filters=64 kernel=3 stride=2 pad=1",  // 72 -> 64, strided
      "flatten",
      "dense"};
  const Shape sample{1, 3, 6, 5};
  const int classes = 3, n = 4;
  Pair p(sample, classes, n, net);
  const auto x = uniform_values(sample.with_n(n).count(), 23, -1.0f, 1.0f);
  const std::vector<std::int32_t> labels{0, 2, 1, 2};
  test::StepOutputs r[2];
  for (int k = 0; k < 2; ++k) r[k] = test::run_step(*p.m[k], x, labels);
  EXPECT_NEAR(r[1].loss[0], r[0].loss[0], 1e-5 * std::abs(r[0].loss[0]));
  EXPECT_LE(max_rel(r[1].grads, r[0].grads), 1e-4);
  EXPECT_LE(max_rel(r[1].logits, r[0].logits), 1e-5);
  EXPECT_GT(max_abs(r[0].grads), 1e-3);  // not vacuous: the gradients are there
}

}  // namespace
}  // namespace dtrain
