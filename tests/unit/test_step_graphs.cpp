// tests/unit/test_step_graphs.cpp — StepGraphs (model/step_graphs.hpp), the decision of when a
// training step runs eagerly, is captured or replayed, on the CPU with a recording StepGraph: one
// eager warm-up per key, one capture, then replays only; a second key (the last partial batch)
// captured beside the first; a buffer move dropping every graph; a failed capture running that
// step eagerly and turning the graphs off (auto) or raising an error naming --cuda-graph (on); the
// least recently used graph freed beyond kMaxGraphs. A Model on the CPU backend with step graphs
// installed trains bit for bit as one without (the CPU backend has no graphs: auto goes off); and
// allocates its fp32 NCHW input conversion buffers on the first such step, eagerly, never inside a
// capture.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/layer_rig.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/model/step_graphs.hpp"

namespace dtrain {
namespace {

/// What the fake graphs and the step body saw.
struct Trace {
  int eager = 0;     ///< body ran outside a capture
  int recorded = 0;  ///< body ran inside capture()
  int replays = 0;
  bool recording = false;
  std::string capture_error;  ///< what capture() returns ("": success)
  std::vector<std::string> log;
  std::function<std::size_t()> bytes;  ///< if set: measured before and after each capture
  std::vector<std::pair<std::size_t, std::size_t>> capture_bytes;
};

/// Records like a CUDA graph: capture() calls the body (which queues work, not run), replay()
/// counts.
class RecordingGraph final : public StepGraph {
 public:
  explicit RecordingGraph(Trace& t) : t_(t) {}
  std::string capture(const std::function<void()>& body) override {
    const std::size_t before = t_.bytes ? t_.bytes() : 0;
    t_.recording = true;
    body();
    t_.recording = false;
    if (t_.bytes) t_.capture_bytes.emplace_back(before, t_.bytes());
    if (t_.capture_error.empty()) captured_ = true;
    return t_.capture_error;
  }
  void replay() override {
    if (!captured_) throw InputError("replay before capture");
    ++t_.replays;
  }

 private:
  Trace& t_;
  bool captured_ = false;
};

class StepGraphsTest : public ::testing::Test {
 protected:
  StepGraphs make(bool required) {
    return StepGraphs([this] { return std::make_unique<RecordingGraph>(t_); }, required,
                      [this](const std::string& line) { t_.log.push_back(line); });
  }
  std::function<void()> body() {
    return [this] { ++(t_.recording ? t_.recorded : t_.eager); };
  }
  static StepGraphKey key(int n, std::uint64_t generation = 0) {
    StepGraphKey k;
    k.n = n;
    k.grad_scale = 1.0f / static_cast<float>(n);
    k.generation = generation;
    return k;
  }
  Trace t_;
};

TEST_F(StepGraphsTest, WarmsUpOnceThenCapturesOnceThenReplays) {
  StepGraphs g = make(false);
  g.run(key(8), "8x1x2x2 f32", body());
  EXPECT_EQ(t_.eager, 1);  // warm-up: eager, nothing captured yet
  EXPECT_EQ(g.held(), 0u);
  for (int step = 2; step <= 6; ++step) g.run(key(8), "8x1x2x2 f32", body());
  EXPECT_EQ(t_.eager, 1);
  EXPECT_EQ(t_.recorded, 1);  // captured once, at step 2
  EXPECT_EQ(t_.replays, 5);   // steps 2..6, the captured step included (capture runs nothing)
  EXPECT_EQ(g.captures(), 1);
  EXPECT_EQ(g.replays(), 5);
  ASSERT_EQ(t_.log.size(), 1u);
  EXPECT_NE(t_.log[0].find("captured for 8x1x2x2 f32"), std::string::npos) << t_.log[0];
  EXPECT_FALSE(g.off());
}

TEST_F(StepGraphsTest, AnotherShapeOrScaleIsAnotherGraph) {
  StepGraphs g = make(false);
  for (int i = 0; i < 3; ++i) g.run(key(8), "full", body());
  for (int i = 0; i < 3; ++i) g.run(key(5), "partial", body());  // the epoch's last batch
  EXPECT_EQ(g.captures(), 2);
  EXPECT_EQ(g.held(), 2u);
  g.run(key(8), "full", body());  // the first graph is still there: replayed, not re-captured
  EXPECT_EQ(g.captures(), 2);
  EXPECT_EQ(t_.eager, 2);
  StepGraphKey scaled = key(8);
  scaled.grad_scale = 0.5f;  // held by value in the loss kernel
  g.run(scaled, "full", body());
  EXPECT_EQ(t_.eager, 3);
  EXPECT_EQ(t_.replays, 2 + 2 + 1);
}

TEST_F(StepGraphsTest, MovedBuffersDropEveryGraph) {
  StepGraphs g = make(false);
  for (int i = 0; i < 3; ++i) g.run(key(8, 0), "full", body());
  EXPECT_EQ(g.held(), 1u);
  g.run(key(8, 1), "full", body());  // the workspace moved: warm up and capture again
  EXPECT_EQ(g.held(), 0u);
  EXPECT_EQ(t_.eager, 2);
  g.run(key(8, 1), "full", body());
  EXPECT_EQ(g.captures(), 2);
  EXPECT_EQ(t_.replays, 3);
}

TEST_F(StepGraphsTest, AutoFallsBackToEagerStepsAfterAFailedCapture) {
  StepGraphs g = make(false);
  t_.capture_error = "cudaStreamEndCapture: cudaErrorStreamCaptureInvalidated";
  g.run(key(8), "8x3x4x4 bf16", body());
  g.run(key(8), "8x3x4x4 bf16", body());  // capture fails: this step runs eagerly
  EXPECT_TRUE(g.off());
  EXPECT_EQ(t_.eager, 2);
  EXPECT_EQ(t_.recorded, 1);
  t_.capture_error.clear();
  for (int i = 0; i < 3; ++i) g.run(key(8), "8x3x4x4 bf16", body());
  EXPECT_EQ(t_.eager, 5);  // off for good: no second try
  EXPECT_EQ(t_.recorded, 1);
  EXPECT_EQ(t_.replays, 0);
  ASSERT_EQ(t_.log.size(), 1u);
  EXPECT_NE(t_.log[0].find("cuda graph: off"), std::string::npos) << t_.log[0];
  EXPECT_NE(t_.log[0].find("cudaErrorStreamCaptureInvalidated"), std::string::npos) << t_.log[0];
}

TEST_F(StepGraphsTest, OnMakesAFailedCaptureAnErrorNamingTheOption) {
  StepGraphs g = make(true);
  t_.capture_error = "cudaErrorStreamCaptureUnsupported";
  g.run(key(8), "full", body());
  try {
    g.run(key(8), "full", body());
    ADD_FAILURE() << "a failed capture under --cuda-graph on was accepted";
  } catch (const LibraryError& e) {
    EXPECT_NE(std::string(e.what()).find("--cuda-graph"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cudaErrorStreamCaptureUnsupported"), std::string::npos);
  }
  EXPECT_THROW(g.run_eagerly("NCCL buckets", body()), LibraryError);
}

TEST_F(StepGraphsTest, EagerReasonsAreLoggedOnce) {
  StepGraphs g = make(false);
  for (int i = 0; i < 3; ++i) g.run_eagerly("the exchange takes gradients during backward", body());
  g.run_eagerly("--debug-sync", body());
  EXPECT_EQ(t_.eager, 4);
  EXPECT_EQ(t_.log.size(), 2u);
}

TEST_F(StepGraphsTest, FreesTheLeastRecentlyUsedGraphBeyondTheLimit) {
  StepGraphs g = make(false);
  const int keys = static_cast<int>(StepGraphs::kMaxGraphs) + 1;
  for (int n = 1; n <= keys; ++n)
    for (int i = 0; i < 2; ++i) g.run(key(n), "n", body());
  EXPECT_EQ(g.held(), StepGraphs::kMaxGraphs);
  g.run(key(keys), "n", body());  // the newest: still held
  EXPECT_EQ(g.captures(), keys);
  g.run(key(1), "n", body());  // the oldest was freed: warm-up again
  EXPECT_EQ(t_.eager, keys + 1);
}

/// Three steps of `m` on fixed buffers (as the trainer's): per step the stats, then the gradients.
std::vector<std::vector<float>> train_three(Model& m) {
  Backend& be = m.backend();
  const int n = 6;
  std::vector<float> x(static_cast<std::size_t>(n) * m.sample_shape().count());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 11) - 5.0f;
  const std::vector<std::int32_t> labels = {0, 1, 2, 0, 1, 2};
  DeviceBuffer<float> xd(be, x.size()), stats(be, kStatsFloats);
  DeviceBuffer<std::int32_t> yd(be, labels.size());
  be.copy_to_device(xd.data(), x.data(), x.size() * sizeof(float));
  be.copy_to_device(yd.data(), labels.data(), labels.size() * sizeof(std::int32_t));
  std::vector<std::vector<float>> out;
  for (std::uint64_t step = 1; step <= 3; ++step) {
    be.fill(stats.data(), 0.0f, kStatsFloats);
    m.train_step(xd.data(), yd.data(), n, 1.0f / n, step, stats.data());
    out.push_back(test::to_host(be, stats.data(), kStatsFloats));
    out.push_back(test::to_host(be, m.grads(), m.param_count()));
  }
  return out;
}

TEST(StepGraphsModel, CpuModelWithGraphsTrainsAsWithout) {
  auto be = make_cpu_backend();
  ASSERT_EQ(be->make_step_graph(), nullptr);  // the CPU has no graphs
  const std::vector<std::string> net = {"conv filters=3 kernel=3 pad=1", "batchnorm", "relu",
                                        "dropout rate=0.3", "dense"};
  Model with(*be, net, Shape{1, 1, 8, 8}, 3, 6), without(*be, net, Shape{1, 1, 8, 8}, 3, 6);
  with.initialize(5);
  without.initialize(5);
  std::vector<std::string> log;
  with.set_step_graphs(
      std::make_unique<StepGraphs>([&] { return be->make_step_graph(); }, false,
                                   [&](const std::string& line) { log.push_back(line); }));
  EXPECT_EQ(train_three(with), train_three(without));
  ASSERT_NE(with.step_graphs(), nullptr);
  EXPECT_TRUE(with.step_graphs()->off());  // step 2's capture: the backend has none
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("no CUDA graphs"), std::string::npos) << log[0];
}

/// On an NHWC bf16 backend, a model fed only network-form batches never holds the conversion
/// buffers; its first fp32 NCHW step (a new key: the eager warm-up) allocates them — the batch in
/// bf16 and in fp32 — and no capture ever changes what the model holds.
TEST(StepGraphsModel, InputBuffersComeWithTheFirstFp32NchwStepNeverInACapture) {
  auto be = make_cpu_backend();
  be->set_layout(Layout::nhwc);
  be->set_precision(Precision::bf16);
  const int n = 6;
  const Shape sample{1, 3, 8, 8};
  Model m(*be, {"conv filters=4 kernel=3 pad=1", "batchnorm", "relu", "dense"}, sample, 3, n);
  m.initialize(5);
  Trace t;
  t.bytes = [&] { return m.device_bytes(); };
  m.set_step_graphs(std::make_unique<StepGraphs>(
      [&] { return std::make_unique<RecordingGraph>(t); }, true, nullptr));
  const std::size_t count = sample.count() * n;
  DeviceBuffer<float> x(*be, count), stats(*be, kStatsFloats);  // zeros: valid in either form
  be->fill(x.data(), 0.0f, count);
  const std::vector<std::int32_t> labels = {0, 1, 2, 0, 1, 2};
  DeviceBuffer<std::int32_t> y(*be, labels.size());
  be->copy_to_device(y.data(), labels.data(), labels.size() * sizeof(std::int32_t));
  const auto step = [&] {
    m.train_step(x.data(), y.data(), n, 1.0f / n, 1, stats.data());
    return m.device_bytes();
  };
  m.set_input_form(InputForm::network);
  const std::size_t held = m.device_bytes();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(step(), held);  // warm-up, capture, replay
  m.set_input_form(InputForm::f32_nchw);
  const std::size_t converting = held + count * 2 + count * sizeof(float);
  EXPECT_EQ(step(), converting);
  EXPECT_EQ(m.step_graphs()->captures(), 1u);                 // that step was the new key's warm-up
  for (int i = 0; i < 2; ++i) EXPECT_EQ(step(), converting);  // capture, replay
  m.set_input_form(InputForm::network);
  EXPECT_EQ(step(), converting);  // kept: the f32_nchw graph holds their addresses
  EXPECT_EQ(m.step_graphs()->captures(), 2u);
  const std::vector<std::pair<std::size_t, std::size_t>> want = {{held, held},
                                                                 {converting, converting}};
  EXPECT_EQ(t.capture_bytes, want);
}

}  // namespace
}  // namespace dtrain
