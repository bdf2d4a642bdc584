// tests/unit/test_cuda_graph.cpp — the training step as one CUDA graph (--cuda-graph, model/
// step_graphs.hpp) against eager launches on the GPU, as --deterministic true --math fp32 set the
// backend: two identical models on two backends train the same batches, one through step graphs
// (required: a failed capture is an error), one eagerly; a net with dropout (its seed read from
// the device at every replay) and batchnorm (running statistics updated inside the graph); full
// batches, then a run of partial batches (a second graph), then full ones again (the first graph
// replayed), an evaluation with another batch size in between (new ops, possibly a larger
// convolution workspace: graphs of the old one dropped). Parameters, batchnorm state and the
// correct / top-5 counts must be bit-identical after every step; the loss sum within 1e-5 (the
// loss kernel adds its samples with atomicAdd, in no fixed order, on either path). NCHW fp32,
// NHWC fp32 (cuDNN's fused batchnorm calls) and NHWC bf16. Then dropout's device-word key against
// its by-value key, and a capture that fails (a synchronization) leaving the stream usable while a
// capturable one replays. Skips without a GPU (fails with DTRAIN_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/dnn/counter_rng.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/model/step_graphs.hpp"

namespace dtrain {
namespace {

const std::vector<std::string> kDropoutBnNet = {
    "conv filters=6 kernel=3 pad=1 bias=false",
    "batchnorm",
    "relu",
    "maxpool kernel=2",
    "dropout rate=0.25",
    "conv filters=4 kernel=3 pad=1",
    "relu",
    "flatten",
    "dense units=12",
    "dropout rate=0.5",
    "dense",
};
constexpr int kBatch = 16, kClasses = 5;
const Shape kSample{1, 3, 8, 8};

struct GraphCase {
  Layout layout;
  Precision precision;
};

/// One model on its own deterministic GPU backend, with fixed batch buffers (a graph holds them).
struct Trainee {
  std::unique_ptr<Backend> be;
  std::unique_ptr<Model> model;
  std::unique_ptr<DeviceBuffer<float>> x, m, stats;
  std::unique_ptr<DeviceBuffer<std::int32_t>> y;

  Trainee(const GraphCase& g, bool graphs) : be(make_cuda_backend(0)) {
    be->set_math(MathMode::fp32);
    be->set_deterministic(true);
    be->set_layout(g.layout);
    be->set_precision(g.precision);
    model = std::make_unique<Model>(*be, kDropoutBnNet, kSample, kClasses, kBatch);
    model->initialize(11);
    x = std::make_unique<DeviceBuffer<float>>(*be, kSample.count() * kBatch);
    m = std::make_unique<DeviceBuffer<float>>(*be, model->param_count());
    stats = std::make_unique<DeviceBuffer<float>>(*be, kStatsFloats);
    y = std::make_unique<DeviceBuffer<std::int32_t>>(*be, kBatch);
    if (graphs)
      model->set_step_graphs(
          std::make_unique<StepGraphs>([this] { return be->make_step_graph(); }, true, nullptr));
  }

  /// One step on n samples: upload, train_step, momentum update; returns the stats.
  std::vector<float> step(int global, int n, const std::vector<float>& hx,
                          const std::vector<std::int32_t>& hy) {
    be->copy_to_device(x->data(), hx.data(), hx.size() * sizeof(float));
    be->copy_to_device(y->data(), hy.data(), hy.size() * sizeof(std::int32_t));
    be->fill(stats->data(), 0.0f, kStatsFloats);
    model->train_step(x->data(), y->data(), n, 1.0f / static_cast<float>(n),
                      mix_seed(5, static_cast<std::uint64_t>(global)), stats->data());
    OptimizerUpdate u;
    u.kind = OptimizerKind::momentum;
    u.lr = 0.05f;
    u.momentum = 0.9f;
    u.step = global;
    (void)be->optimizer_update(u, model->params(), model->grads(), m->data(), nullptr,
                               model->param_count());
    std::vector<float> s(kStatsFloats);
    be->copy_to_host(s.data(), stats->data(), sizeof(float) * kStatsFloats);
    return s;
  }

  std::vector<float> read(const float* p, std::size_t n) const {
    std::vector<float> h(n);
    be->copy_to_host(h.data(), p, n * sizeof(float));
    return h;
  }
};

void make_batch(int global, std::vector<float>& hx, std::vector<std::int32_t>& hy) {
  hx.resize(kSample.count() * kBatch);
  hy.resize(kBatch);
  const std::uint64_t key = mix_seed(77, static_cast<std::uint64_t>(global));
  for (std::size_t i = 0; i < hx.size(); ++i)
    hx[i] = static_cast<float>(2.0 * counter_uniform(key, i) - 1.0);
  for (std::size_t i = 0; i < hy.size(); ++i)
    hy[i] = static_cast<std::int32_t>(counter_hash(key + 1, i) % kClasses);
}

class CudaGraphParity : public ::testing::TestWithParam<GraphCase> {
 protected:
  void SetUp() override { DT_SKIP_WITHOUT_CUDA(); }
};

TEST_P(CudaGraphParity, ReplayedStepsTrainAsEagerOnes) {
  Trainee graphed(GetParam(), true), eager(GetParam(), false);
  // Full batches, the epoch's last partial batch three times (warm-up, capture, replay), full
  // again: the first graph replayed.
  const std::vector<int> sizes = {16, 16, 16, 16, 11, 11, 11, 16, 16, 16};
  std::vector<float> hx;
  std::vector<std::int32_t> hy;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const int global = static_cast<int>(k) + 1;
    SCOPED_TRACE("step " + std::to_string(global) + ", batch " + std::to_string(sizes[k]));
    make_batch(global, hx, hy);
    const std::vector<float> a = graphed.step(global, sizes[k], hx, hy);
    const std::vector<float> b = eager.step(global, sizes[k], hx, hy);
    ASSERT_TRUE(std::isfinite(a[0]));
    EXPECT_NEAR(a[0], b[0], 1e-5 * std::abs(b[0]));
    EXPECT_EQ(a[1], b[1]);  // correct
    EXPECT_EQ(a[2], b[2]);  // top-5
    const Model& mg = *graphed.model;
    ASSERT_EQ(graphed.read(mg.params(), mg.param_count()),
              eager.read(eager.model->params(), mg.param_count()));
    ASSERT_EQ(graphed.read(mg.state(), mg.state_count()),
              eager.read(eager.model->state(), mg.state_count()));
    if (global == 6) {  // another batch size: new ops between the steps
      for (Trainee* t : {&graphed, &eager}) {
        t->be->fill(t->stats->data(), 0.0f, kStatsFloats);
        t->model->evaluate(t->x->data(), t->y->data(), 7, t->stats->data());
      }
      EXPECT_EQ(graphed.read(graphed.stats->data(), kStatsFloats)[1],
                eager.read(eager.stats->data(), kStatsFloats)[1]);
    }
  }
  const StepGraphs* g = graphed.model->step_graphs();
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(g->off());
  EXPECT_GE(g->captures(), 2);  // the full and the partial batch
  EXPECT_GE(g->replays(), 5);
}

INSTANTIATE_TEST_SUITE_P(CudaGraph, CudaGraphParity,
                         ::testing::Values(GraphCase{Layout::nchw, Precision::fp32},
                                           GraphCase{Layout::nhwc, Precision::fp32},
                                           GraphCase{Layout::nhwc, Precision::bf16}),
                         [](const auto& info) {
                           return std::string(info.param.layout == Layout::nhwc ? "Nhwc" : "Nchw") +
                                  (info.param.precision == Precision::bf16 ? "Bf16" : "Fp32");
                         });

TEST(CudaGraphSeed, DropoutReadsTheStepSeedFromTheDevice) {
  DT_SKIP_WITHOUT_CUDA();
  auto be = make_cuda_backend(0);
  const Shape s{4, 3, 5, 5};
  auto op = be->make_dropout(s, 0.4f);
  const std::vector<float> ones(s.count(), 1.0f);
  DeviceBuffer<float> x(*be, s.count()), by_value(*be, s.count()), by_word(*be, s.count());
  be->copy_to_device(x.data(), ones.data(), ones.size() * sizeof(float));
  const std::uint64_t step_seed = 0x1234'5678'9abcull, salt = 7;
  op->forward(x.data(), by_value.data(), true, mix_seed(step_seed, salt));
  const std::uint64_t* word = be->set_step_seed(step_seed);
  ASSERT_NE(word, nullptr);
  // The by-value key is a decoy: the kernel must read the word.
  op->forward_keyed(x.data(), by_word.data(), true, DropoutKey{0, word, salt});
  std::vector<float> a(s.count()), b(s.count());
  be->copy_to_host(a.data(), by_value.data(), a.size() * sizeof(float));
  be->copy_to_host(b.data(), by_word.data(), b.size() * sizeof(float));
  EXPECT_EQ(a, b);
  (void)be->set_step_seed(step_seed + 1);  // the next step's seed: another mask
  op->forward_keyed(x.data(), by_word.data(), true, DropoutKey{0, word, salt});
  be->copy_to_host(b.data(), by_word.data(), b.size() * sizeof(float));
  EXPECT_NE(a, b);
}

TEST(CudaGraphCapture, AFailedCaptureEndsCleanlyAndTheStreamWorksOn) {
  DT_SKIP_WITHOUT_CUDA();
  auto be = make_cuda_backend(0);
  DeviceBuffer<float> p(*be, 256);
  std::unique_ptr<StepGraph> g = be->make_step_graph();
  ASSERT_NE(g, nullptr);
  EXPECT_THROW(g->replay(), InputError);  // nothing captured yet
  // A synchronization cannot be captured: capture() reports it and leaves capture mode.
  const std::string why = g->capture([&] {
    be->fill(p.data(), 1.0f, 256);
    be->synchronize();
  });
  EXPECT_FALSE(why.empty());
  be->fill(p.data(), 2.0f, 256);  // eager work after the failed capture
  std::vector<float> h(256);
  be->copy_to_host(h.data(), p.data(), h.size() * sizeof(float));
  EXPECT_EQ(h, std::vector<float>(256, 2.0f));
  // A capturable body: recorded without running, then each replay runs it.
  ASSERT_EQ(g->capture([&] { be->scale(p.data(), 3.0f, 256); }), "");
  be->copy_to_host(h.data(), p.data(), h.size() * sizeof(float));
  EXPECT_EQ(h, std::vector<float>(256, 2.0f));  // capture ran nothing
  g->replay();
  g->replay();
  be->copy_to_host(h.data(), p.data(), h.size() * sizeof(float));
  EXPECT_EQ(h, std::vector<float>(256, 18.0f));
}

}  // namespace
}  // namespace dtrain
