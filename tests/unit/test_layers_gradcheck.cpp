// tests/unit/test_layers_gradcheck.cpp — the CPU backend and the layers: analytic gradients of
// every layer type and of the softmax cross-entropy against central finite differences, forward
// values against hand-computed cases, batchnorm running statistics, dropout masks, and optimizer
// updates against the torch.optim / Kingma & Ba formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>

#include "common/layer_rig.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/dnn/counter_rng.hpp"

namespace dtrain {
namespace {

using test::check_layer_gradients;
using test::GradCheckOptions;
using test::LayerRig;
using test::to_device;
using test::to_host;
using test::uniform_values;

class CpuLayers : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend();
};

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want,
                     float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

// The summed loss of a softmax cross-entropy op over N×K logits with fixed labels (length N), as
// a function of the logits; with dlogits (N×K on the device) it also writes their gradient.
class XentLoss {
 public:
  XentLoss(Backend& be, SoftmaxXentOp& op, const std::vector<std::int32_t>& labels, int classes)
      : be_(be), op_(op), n_(static_cast<int>(labels.size())), k_(classes), labels_(be, n_),
        stats_(be, kStatsFloats) {
    be.copy_to_device(labels_.data(), labels.data(), labels.size() * sizeof(std::int32_t));
  }
  double operator()(const std::vector<float>& logits, float* dlogits) {
    auto dlog = to_device(be_, logits);
    be_.fill(stats_.data(), 0.0f, kStatsFloats);
    op_.forward_backward(dlog.data(), labels_.data(), n_, 1.0f, dlogits, stats_.data());
    return static_cast<double>(to_host(be_, stats_.data(), kStatsFloats)[0]);
  }
  int classes() const { return k_; }

 private:
  Backend& be_;
  SoftmaxXentOp& op_;
  int n_, k_;
  DeviceBuffer<std::int32_t> labels_;
  DeviceBuffer<float> stats_;
};

// `analytic` (N×K, the op's dlogits at `logits`) against central differences of `loss` (step
// 1e-3), and each row summing to zero (softmax minus a distribution).
void expect_xent_gradients(XentLoss& loss, const std::vector<float>& logits,
                           const std::vector<float>& analytic) {
  const double h = 1e-3;
  const int k = loss.classes();
  for (std::size_t i = 0; i < logits.size(); ++i) {
    auto lp = logits, lm = logits;
    lp[i] += static_cast<float>(h);
    lm[i] -= static_cast<float>(h);
    const double numeric = (loss(lp, nullptr) - loss(lm, nullptr)) / (2 * h);
    EXPECT_TRUE(test::close_enough(analytic[i], numeric, 2e-3, 2e-2))
        << "dlogits[" << i << "] analytic " << analytic[i] << " numeric " << numeric;
  }
  for (std::size_t s = 0; s * k < analytic.size(); ++s) {
    const auto row = analytic.begin() + static_cast<std::ptrdiff_t>(s * k);
    EXPECT_NEAR(std::accumulate(row, row + k, 0.0f), 0.0f, 1e-6f) << "row " << s;
  }
}

// ---------------------------------------------------------------- gradient checks, every layer

TEST_F(CpuLayers, GradConvPadded) {
  LayerRig rig(*be_, "conv filters=3 kernel=3 stride=1 pad=1", Shape{2, 2, 5, 5});
  EXPECT_GE(check_layer_gradients(rig), 150u);
}

TEST_F(CpuLayers, GradConvStrided) {
  LayerRig rig(*be_, "conv filters=2 kernel=2 stride=2", Shape{2, 3, 6, 6});
  EXPECT_GE(check_layer_gradients(rig), 140u);
}

TEST_F(CpuLayers, GradMaxPool) {
  for (const char* line : {"maxpool kernel=2", "maxpool kernel=3 stride=2 pad=1"}) {
    LayerRig rig(*be_, line, Shape{2, 2, 5, 5});
    // Distinct values 0.01 apart: a ±1e-3 step never changes which element is the maximum.
    rig.set_input(test::distinct_values(rig.layer().input_shape().count(), 3, -1.0f, 0.01f));
    EXPECT_GT(check_layer_gradients(rig), 50u) << line;
  }
}

TEST_F(CpuLayers, GradAvgPoolExcludesPadding) {
  LayerRig rig(*be_, "avgpool kernel=3 stride=2 pad=1", Shape{2, 2, 5, 5});
  EXPECT_GT(check_layer_gradients(rig), 50u);
}

TEST_F(CpuLayers, GradRelu) {
  LayerRig rig(*be_, "relu", Shape{2, 3, 4, 4});
  // Keep inputs away from the kink at 0 so that finite differences are exact.
  std::vector<float> x = uniform_values(rig.layer().input_shape().count(), 5, 0.05f, 1.0f);
  for (std::size_t i = 0; i < x.size(); i += 2) x[i] = -x[i];
  rig.set_input(x);
  EXPECT_GT(check_layer_gradients(rig), 50u);
}

TEST_F(CpuLayers, GradSigmoid) {
  LayerRig rig(*be_, "sigmoid", Shape{2, 3, 4, 4});
  EXPECT_GT(check_layer_gradients(rig), 50u);
}

TEST_F(CpuLayers, GradBatchNormTraining) {
  LayerRig rig(*be_, "batchnorm", Shape{4, 3, 3, 3});
  GradCheckOptions opt;
  opt.atol = 4e-3;  // every output moves with every input: more float rounding in L
  EXPECT_GT(check_layer_gradients(rig, opt), 100u);
}

TEST_F(CpuLayers, GradDropoutThroughMask) {
  LayerRig rig(*be_, "dropout rate=0.4", Shape{2, 3, 4, 4});
  GradCheckOptions opt;
  opt.seed = 12345;
  EXPECT_GT(check_layer_gradients(rig, opt), 50u);
  // The check must have gone through a real mask: some inputs dropped, the rest scaled by 1/(1−p).
  const auto y = rig.forward(true, opt.seed);
  const auto x = rig.input();
  int dropped = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0.0f) {
      ++dropped;
    } else {
      EXPECT_NEAR(y[i], x[i] / 0.6f, 1e-6f);
    }
  }
  EXPECT_GT(dropped, 10);
  EXPECT_LT(dropped, 60);
}

TEST_F(CpuLayers, GradFlatten) {
  LayerRig rig(*be_, "flatten", Shape{2, 3, 2, 2});
  EXPECT_EQ(rig.layer().output_shape(), (Shape{2, 12, 1, 1}));
  EXPECT_EQ(rig.forward(), rig.input());
  EXPECT_GT(check_layer_gradients(rig), 20u);
}

TEST_F(CpuLayers, GradDenseFlattensImplicitly) {
  LayerRig rig(*be_, "dense units=5", Shape{3, 3, 2, 2});
  EXPECT_EQ(rig.layer().output_shape(), (Shape{3, 5, 1, 1}));
  EXPECT_GT(check_layer_gradients(rig), 80u);
}

TEST_F(CpuLayers, GradSoftmaxCrossEntropy) {
  const int n = 4, k = 5;
  auto op = be_->make_softmax_xent(n, k);
  std::vector<float> logits = uniform_values(n * k, 11, -2.0f, 2.0f);
  const std::vector<std::int32_t> labels{0, 3, 4, 1};
  XentLoss loss_at(*be_, *op, labels, k);
  DeviceBuffer<float> dl(*be_, n * k);
  loss_at(logits, dl.data());
  expect_xent_gradients(loss_at, logits, to_host(*be_, dl.data(), n * k));  // softmax − onehot
}

TEST_F(CpuLayers, GradSoftmaxCrossEntropyLabelSmoothing) {
  const int n = 4, k = 5;
  const double eps = 0.1;
  be_->set_label_smoothing(static_cast<float>(eps));
  auto op = be_->make_softmax_xent(n, k);
  be_->set_label_smoothing(0.0f);  // ops made later are plain again; this one keeps ε
  std::vector<float> logits = uniform_values(n * k, 12, -3.0f, 3.0f);
  const std::vector<std::int32_t> labels{2, 0, 4, 2};
  XentLoss loss_at(*be_, *op, labels, k);
  DeviceBuffer<float> dl(*be_, n * k);
  // The loss is −Σ q log softmax with q = (1 − ε)·onehot + ε/K, computed here directly; with
  // ε = 0 (want_plain) −Σ log softmax of the label, whose dlogits are softmax − onehot.
  double want = 0.0, want_plain = 0.0;
  std::vector<double> softmax(static_cast<std::size_t>(n * k));
  for (int s = 0; s < n; ++s) {
    double z = 0.0;
    for (int j = 0; j < k; ++j) z += std::exp(static_cast<double>(logits[s * k + j]));
    for (int j = 0; j < k; ++j) {
      const double q = (j == labels[s] ? 1.0 - eps : 0.0) + eps / k;
      want -= q * (static_cast<double>(logits[s * k + j]) - std::log(z));
      softmax[static_cast<std::size_t>(s * k + j)] =
          std::exp(static_cast<double>(logits[s * k + j])) / z;
    }
    want_plain -= static_cast<double>(logits[s * k + labels[s]]) - std::log(z);
  }
  EXPECT_NEAR(loss_at(logits, dl.data()), want, 1e-4);
  expect_xent_gradients(loss_at, logits, to_host(*be_, dl.data(), n * k));  // softmax − q
  // An op made after set_label_smoothing(0) is the plain loss (want_plain, softmax above).
  auto plain = be_->make_softmax_xent(n, k);
  XentLoss plain_loss(*be_, *plain, labels, k);
  DeviceBuffer<float> dplain(*be_, n * k);
  EXPECT_NEAR(plain_loss(logits, dplain.data()), want_plain, 1e-4);
  const auto got = to_host(*be_, dplain.data(), n * k);
  for (int i = 0; i < n * k; ++i) {
    const double onehot = i % k == labels[i / k] ? 1.0 : 0.0;
    EXPECT_NEAR(got[i], softmax[static_cast<std::size_t>(i)] - onehot, 1e-5)
        << "dlogits[" << i << "]";
  }
  // Smoothing raises the loss of a confident right answer (label 0).
  be_->set_label_smoothing(0.2f);
  auto smooth1 = be_->make_softmax_xent(1, k);
  be_->set_label_smoothing(0.0f);
  auto plain1 = be_->make_softmax_xent(1, k);
  const std::vector<float> sure{20, 0, 0, 0, 0};
  EXPECT_GT(XentLoss(*be_, *smooth1, {0}, k)(sure, nullptr),
            XentLoss(*be_, *plain1, {0}, k)(sure, nullptr) + 1.0);
}

TEST_F(CpuLayers, SoftmaxCrossEntropyRejectsBadArgumentsNamingThem) {
  auto message = [&](int batch, int classes, float eps) -> std::string {
    be_->set_label_smoothing(eps);
    try {
      (void)be_->make_softmax_xent(batch, classes);
    } catch (const InputError& e) {
      be_->set_label_smoothing(0.0f);
      return e.what();
    }
    be_->set_label_smoothing(0.0f);
    return "no error";
  };
  EXPECT_NE(message(0, 10, 0.0f).find("batch and classes must be >= 1, got 0 and 10"),
            std::string::npos);
  EXPECT_NE(message(4, 0, 0.0f).find("got 4 and 0"), std::string::npos);
  EXPECT_NE(message(4, 10, 1.0f).find("label smoothing must be in [0, 1), got 1.0"),
            std::string::npos);
  EXPECT_NE(message(4, 10, -0.1f).find("label smoothing must be in [0, 1)"), std::string::npos);
  EXPECT_EQ(message(4, 10, 0.5f), "no error");
}

// ---------------------------------------------------------------- forward values by hand

TEST_F(CpuLayers, ConvForwardHandComputed) {
  LayerRig rig(*be_, "conv filters=1 kernel=2", Shape{1, 1, 3, 3});
  rig.set_input({1, 2, 3, 4, 5, 6, 7, 8, 9});
  rig.set_param(0, {1, 2, 3, 4});
  rig.set_param(1, {0.5f});
  // y[i][j] = Σ w[a][b]·x[i+a][j+b] + b (cross-correlation).
  expect_near_all(rig.forward(), {37.5f, 47.5f, 67.5f, 77.5f});

  LayerRig padded(*be_, "conv filters=1 kernel=3 pad=1", Shape{1, 1, 3, 3});
  padded.set_input({1, 2, 3, 4, 5, 6, 7, 8, 9});
  padded.set_param(0, std::vector<float>(9, 1.0f));
  padded.set_param(1, {0.0f});
  expect_near_all(padded.forward(), {12, 21, 16, 27, 45, 33, 24, 39, 28});
}

TEST_F(CpuLayers, PoolForwardHandComputed) {
  LayerRig avg(*be_, "avgpool kernel=2 stride=1 pad=1", Shape{1, 1, 3, 3});
  avg.set_input({1, 2, 3, 4, 5, 6, 7, 8, 9});
  ASSERT_EQ(avg.layer().output_shape(), (Shape{1, 1, 4, 4}));
  const auto y = avg.forward();
  EXPECT_NEAR(y[0], 1.0f, 1e-6f);  // corner window holds one real element: padding excluded
  EXPECT_NEAR(y[1], 1.5f, 1e-6f);  // (1 + 2) / 2
  EXPECT_NEAR(y[5], 3.0f, 1e-6f);  // (1 + 2 + 4 + 5) / 4
  EXPECT_NEAR(y[15], 9.0f, 1e-6f);

  LayerRig mx(*be_, "maxpool", Shape{1, 1, 4, 4});
  mx.set_input({1, 9, 2, 3, 4, 5, 8, 6, 0, -1, -5, -6, 7, 2, -7, -3});
  expect_near_all(mx.forward(), {9, 8, 7, -3});
  // Backward routes each gradient to its window's maximum only.
  expect_near_all(mx.backward({1, 2, 3, 4}), {0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0, 4});
}

TEST_F(CpuLayers, DenseForwardHandComputed) {
  LayerRig rig(*be_, "dense units=2", Shape{2, 3, 1, 1});
  rig.set_input({1, 2, 3, 4, 5, 6});
  rig.set_param(0, {1, 0, -1, 0.5f, 0.5f, 0.5f});  // W is O×I
  rig.set_param(1, {0.1f, -0.1f});
  expect_near_all(rig.forward(), {-1.9f, 2.9f, -1.9f, 7.4f});
  // dW = dyᵀ·x, db = Σₙ dy, dx = dy·W.
  expect_near_all(rig.backward({1, 0, 0, 1}), {1, 0, -1, 0.5f, 0.5f, 0.5f});
  expect_near_all(rig.grad(0), {1, 2, 3, 4, 5, 6});
  expect_near_all(rig.grad(1), {1, 1});
}

TEST_F(CpuLayers, ActivationsForward) {
  LayerRig relu(*be_, "relu", Shape{1, 1, 1, 4});
  relu.set_input({-2, -0.5f, 0.5f, 3});
  expect_near_all(relu.forward(), {0, 0, 0.5f, 3});
  LayerRig sig(*be_, "sigmoid", Shape{1, 1, 1, 3});
  sig.set_input({0, 2, -2});
  expect_near_all(sig.forward(), {0.5f, 0.880797078f, 0.119202922f}, 1e-6f);
}

TEST_F(CpuLayers, BatchNormStatisticsAndInference) {
  const Shape s{2, 2, 1, 2};  // 4 values per channel
  LayerRig rig(*be_, "batchnorm momentum=0.1", s);
  // nchw: channel 0 = {1, 2, 3, 6}, channel 1 = {0, 0, 4, 4}.
  rig.set_input({1, 2, 0, 0, 3, 6, 4, 4});
  rig.set_param(0, {1, 2});   // gamma
  rig.set_param(1, {0, 10});  // beta
  const auto y = rig.forward(true);
  // Channel 0: mean 3, biased var 3.5; channel 1: mean 2, var 4.
  const float s0 = 1.0f / std::sqrt(3.5f + 1e-5f), s1 = 2.0f / std::sqrt(4.0f + 1e-5f);
  expect_near_all(
      y, {-2 * s0, -1 * s0, 10 - 2 * s1, 10 - 2 * s1, 0, 3 * s0, 10 + 2 * s1, 10 + 2 * s1});
  // Running stats: 0.9·old + 0.1·batch, variance unbiased (×4/3).
  expect_near_all(rig.state(0), {0.3f, 0.2f});
  expect_near_all(rig.state(1), {0.9f + 0.1f * 3.5f * 4 / 3, 0.9f + 0.1f * 4.0f * 4 / 3});
  // Inference normalizes with the running statistics and leaves them alone.
  rig.set_state(0, {1, -1});
  rig.set_state(1, {4, 0.25f});
  const auto yi = rig.forward(false);
  const float i0 = 1.0f / std::sqrt(4 + 1e-5f), i1 = 2.0f / std::sqrt(0.25f + 1e-5f);
  EXPECT_NEAR(yi[0], (1 - 1) * i0, 1e-5f);
  EXPECT_NEAR(yi[4], (3 - 1) * i0, 1e-5f);
  EXPECT_NEAR(yi[2], (0 + 1) * i1 + 10, 1e-4f);
  expect_near_all(rig.state(0), {1, -1});
}

TEST_F(CpuLayers, DropoutMaskFollowsCounterRng) {
  const Shape s{4, 8, 8, 8};
  LayerRig rig(*be_, "dropout rate=0.25", s);
  rig.set_input(std::vector<float>(s.count(), 1.0f));
  const std::uint64_t seed = 42;
  const auto y = rig.forward(true, seed);
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const bool drop = counter_uniform(seed, i) < 0.25f;
    dropped += drop ? 1 : 0;
    ASSERT_FLOAT_EQ(y[i], drop ? 0.0f : 1.0f / 0.75f) << "at " << i;
  }
  EXPECT_NEAR(static_cast<double>(dropped) / y.size(), 0.25, 0.03);
  // A different seed gives a different mask; inference is the identity.
  EXPECT_NE(rig.forward(true, seed + 1), y);
  EXPECT_EQ(rig.forward(false, seed), std::vector<float>(s.count(), 1.0f));
}

TEST_F(CpuLayers, SoftmaxXentValuesStatsAndPartialBatch) {
  auto op = be_->make_softmax_xent(3, 3);
  auto logits = to_device(*be_, {1, 2, 3, /**/ 1000, 0, 0, /**/ 5, 5, 5});
  const std::vector<std::int32_t> labels{2, 1, 0};
  DeviceBuffer<std::int32_t> dlab(*be_, 3);
  be_->copy_to_device(dlab.data(), labels.data(), sizeof(std::int32_t) * 3);
  DeviceBuffer<float> dl(*be_, 9), stats(*be_, kStatsFloats);
  be_->fill(stats.data(), 0.0f, kStatsFloats);
  op->forward_backward(logits.data(), dlab.data(), 3, 0.5f, dl.data(), stats.data());
  const auto st = to_host(*be_, stats.data(), kStatsFloats);
  const double l0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0;
  EXPECT_NEAR(st[0], l0 + 1000.0 + std::log(3.0), 1e-3);  // large logits stay finite
  EXPECT_EQ(st[1], 2.0f);  // sample 0 right, sample 1 wrong, sample 2 tie → index 0 = label
  const auto d = to_host(*be_, dl.data(), 9);
  EXPECT_NEAR(d[2], 0.5 * (std::exp(3.0 - 3.0 - l0) - 1.0), 1e-6);
  EXPECT_NEAR(d[4], -0.5f, 1e-6f);
  EXPECT_NEAR(d[6], 0.5f * (1.0f / 3 - 1), 1e-6f);
  // A partial batch touches only its n rows and accumulates into stats.
  be_->fill(dl.data(), 7.0f, 9);
  op->forward_backward(logits.data(), dlab.data(), 1, 1.0f, dl.data(), stats.data());
  const auto st2 = to_host(*be_, stats.data(), kStatsFloats);
  EXPECT_NEAR(st2[0], st[0] + l0, 1e-3);
  EXPECT_EQ(st2[1], 3.0f);
  EXPECT_EQ(st[2], 3.0f);  // 3 classes ≤ 5: every sample is a top-5 hit
  EXPECT_EQ(st2[2], 4.0f);
  EXPECT_EQ(to_host(*be_, dl.data() + 3, 6), std::vector<float>(6, 7.0f));
}

TEST_F(CpuLayers, SoftmaxXentTop5CountsRanksWithTheArgmaxTieRule) {
  constexpr int kClasses = 7, kN = 5;
  auto op = be_->make_softmax_xent(kN, kClasses);
  auto logits = to_device(*be_, {7, 6, 5, 4, 3, 2, 1,    // label 4: 4 classes before it, a hit
                                 7, 6, 5, 4, 3, 2, 1,    // label 5: 5 before it, a miss
                                 0, 0, 0, 0, 0, 0, 0,    // label 4: ties, the 4 lower classes first
                                 0, 0, 0, 0, 0, 0, 0,    // label 5: 5 lower classes first, a miss
                                 0, 0, 0, 0, 0, 0, 9});  // label 6: the argmax, top-1 and top-5
  const std::vector<std::int32_t> labels{4, 5, 4, 5, 6};
  DeviceBuffer<std::int32_t> dlab(*be_, kN);
  be_->copy_to_device(dlab.data(), labels.data(), sizeof(std::int32_t) * kN);
  DeviceBuffer<float> stats(*be_, kStatsFloats);
  be_->fill(stats.data(), 0.0f, kStatsFloats);
  op->forward_backward(logits.data(), dlab.data(), kN, 1.0f, nullptr, stats.data());
  const auto st = to_host(*be_, stats.data(), kStatsFloats);
  EXPECT_EQ(st[1], 1.0f);
  EXPECT_EQ(st[2], 3.0f);
}

// ---------------------------------------------------------------- optimizer updates

struct OptCase {
  std::vector<float> p{1.0f, -2.0f, 0.5f};
  std::vector<float> g{0.5f, 0.25f, -1.0f};
};

TEST_F(CpuLayers, OptimizerSgdWithWeightDecay) {
  OptCase c;
  OptimizerUpdate u;
  u.kind = OptimizerKind::sgd;
  u.lr = 0.1f;
  u.weight_decay = 0.01f;
  auto p = c.p;
  be_->optimizer_update(u, p.data(), c.g.data(), nullptr, nullptr, p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    EXPECT_NEAR(p[i], c.p[i] - 0.1f * (c.g[i] + 0.01f * c.p[i]), 1e-7f);
  }
}

TEST_F(CpuLayers, OptimizerMomentumAndNesterov) {
  for (bool nesterov : {false, true}) {
    OptCase c;
    OptimizerUpdate u;
    u.kind = OptimizerKind::momentum;
    u.lr = 0.1f;
    u.momentum = 0.9f;
    u.nesterov = nesterov;
    u.weight_decay = 0.05f;
    auto p = c.p;
    std::vector<float> m(3, 0.0f);
    std::vector<double> ep(c.p.begin(), c.p.end()), ev(3, 0.0);
    for (int step = 0; step < 3; ++step) {
      be_->optimizer_update(u, p.data(), c.g.data(), m.data(), nullptr, p.size());
      for (int i = 0; i < 3; ++i) {
        const double g = c.g[i] + 0.05 * ep[i];
        ev[i] = 0.9 * ev[i] + g;
        ep[i] -= 0.1 * (nesterov ? g + 0.9 * ev[i] : ev[i]);
      }
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(p[i], ep[i], 1e-5) << "nesterov=" << nesterov;
      EXPECT_NEAR(m[i], ev[i], 1e-5) << "nesterov=" << nesterov;
    }
  }
}

TEST_F(CpuLayers, OptimizerAdamBiasCorrected) {
  OptCase c;
  OptimizerUpdate u;
  u.kind = OptimizerKind::adam;
  u.lr = 0.01f;
  u.weight_decay = 0.1f;
  auto p = c.p;
  std::vector<float> m(3, 0.0f), v(3, 0.0f);
  std::vector<double> ep(c.p.begin(), c.p.end()), em(3, 0.0), ev(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    u.step = t;
    be_->optimizer_update(u, p.data(), c.g.data(), m.data(), v.data(), p.size());
    for (int i = 0; i < 3; ++i) {
      const double g = c.g[i] + 0.1 * ep[i];
      em[i] = 0.9 * em[i] + 0.1 * g;
      ev[i] = 0.999 * ev[i] + 0.001 * g * g;
      const double mhat = em[i] / (1 - std::pow(0.9, t));
      const double vhat = ev[i] / (1 - std::pow(0.999, t));
      ep[i] -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
    }
  }
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(p[i], ep[i], 1e-6);
  // First Adam step moves each parameter by ≈ lr against the sign of its gradient.
  std::vector<float> q{0.0f}, g{-3.0f}, m1{0.0f}, v1{0.0f};
  u.step = 1;
  u.weight_decay = 0.0f;
  be_->optimizer_update(u, q.data(), g.data(), m1.data(), v1.data(), 1);
  EXPECT_NEAR(q[0], 0.01f, 1e-6f);
}

// ---------------------------------------------------------------- backend utilities and shapes

TEST_F(CpuLayers, MemoryUtilities) {
  EXPECT_EQ(be_->device(), Device::cpu);
  EXPECT_NE(be_->name().find("oneDNN"), std::string::npos);
  DeviceBuffer<float> a(*be_, 37);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 64, 0u);
  EXPECT_EQ(to_host(*be_, a.data(), 37), std::vector<float>(37, 0.0f));
  be_->fill(a.data(), 2.0f, 37);
  be_->scale(a.data(), -1.5f, 36);
  const auto h = to_host(*be_, a.data(), 37);
  EXPECT_EQ(h[0], -3.0f);
  EXPECT_EQ(h[36], 2.0f);
  EXPECT_TRUE(be_->all_finite(a.data(), 37));
  a.data()[20] = std::nanf("");
  EXPECT_FALSE(be_->all_finite(a.data(), 37));
  a.data()[20] = -INFINITY;
  EXPECT_FALSE(be_->all_finite(a.data(), 37));
  EXPECT_TRUE(be_->all_finite(a.data(), 20));
}

TEST(Descriptors, OutputShapesAndErrors) {
  EXPECT_EQ((ConvDesc{Shape{8, 3, 32, 32}, 16, 3, 1, 1}.output()), (Shape{8, 16, 32, 32}));
  EXPECT_EQ((ConvDesc{Shape{8, 3, 32, 32}, 16, 5, 2, 0}.output()), (Shape{8, 16, 14, 14}));
  EXPECT_EQ((PoolDesc{Shape{2, 4, 7, 7}, PoolKind::max, 2, 2, 0}.output()), (Shape{2, 4, 3, 3}));
  try {
    (void)ConvDesc{Shape{1, 1, 4, 4}, 2, 7, 1, 1}.output();
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel 7 is larger"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)(ConvDesc{Shape{1, 1, 4, 4}, 2, 3, 0, 0}.output()), InputError);
  EXPECT_THROW((void)(ConvDesc{Shape{1, 1, 4, 4}, 0, 3, 1, 0}.output()), InputError);
  EXPECT_THROW((void)(PoolDesc{Shape{1, 1, 4, 4}, PoolKind::avg, 2, 2, 2}.output()), InputError);
  EXPECT_THROW((void)(PoolDesc{Shape{1, 1, 4, 4}, PoolKind::max, 5, 1, 0}.output()), InputError);
}

#if !defined(DTRAIN_HAVE_CUDA)
TEST(Descriptors, CudaStubsWithoutCuda) {
  EXPECT_FALSE(cuda_available());
  EXPECT_EQ(cuda_device_count(), 0);
  try {
    (void)make_cuda_backend(0);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos);
  }
}
#endif

}  // namespace
}  // namespace dtrain
