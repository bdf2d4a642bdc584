// tests/unit/test_model_graph.cpp — Model as a graph: gradients of a branched network (a residual
// add, an Inception-style concat of non-square convolutions, an option-A shortcut, an output that
// feeds three layers, in-place relu) against finite differences of the training loss; the memory
// plan's reuse; gradients placed in memory of the caller's (place_gradients); graph errors that
// name the job-file line; signatures that see the wiring.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/layer_rig.hpp"
#include "common/nets.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {
namespace {

using test::to_host;
using test::uniform_values;

using test::kBranchyNet;

class ModelGraph : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend();
  /// A fixed batch of 3 samples of 2×6×6 for kBranchyNet, its labels and a stats buffer.
  struct Batch {
    DeviceBuffer<float> x, stats;
    DeviceBuffer<std::int32_t> y;
  };
  Batch batch3() {
    Batch b{test::to_device(*be_, uniform_values(3 * 2 * 36, 11, -1.0f, 1.0f)),
            DeviceBuffer<float>(*be_, kStatsFloats), DeviceBuffer<std::int32_t>(*be_, 3)};
    const std::int32_t labels[3] = {0, 2, 1};
    be_->copy_to_device(b.y.data(), labels, sizeof labels);
    return b;
  }
};

/// Σ loss of one training forward at the current parameters.
double training_loss(Model& m, Backend& be, const DeviceBuffer<float>& x,
                     const DeviceBuffer<std::int32_t>& y, int n, DeviceBuffer<float>& stats) {
  be.fill(stats.data(), 0.0f, kStatsFloats);
  m.train_step(x.data(), y.data(), n, 1.0f, 3, stats.data());
  return to_host(be, stats.data(), 1)[0];
}

TEST_F(ModelGraph, BranchedGradientsMatchFiniteDifferences) {
  const int n = 3;
  Model m(*be_, kBranchyNet, Shape{1, 2, 6, 6}, 3, n);
  m.initialize(5);
  auto [x, stats, y] = batch3();
  training_loss(m, *be_, x, y, n, stats);
  const auto grads = to_host(*be_, m.grads(), m.param_count());
  auto params = to_host(*be_, m.params(), m.param_count());
  int checked = 0, bad = 0;
  double max_g = 0;
  const double eps = 1e-2;
  for (const TensorInfo& t : m.param_tensors()) {
    for (std::size_t k = 0; k < std::min<std::size_t>(t.count, 6); ++k) {
      const std::size_t i = t.offset + (k * 7919) % t.count;
      const float orig = params[i];
      params[i] = orig + static_cast<float>(eps);
      be_->copy_to_device(m.params(), params.data(), params.size() * sizeof(float));
      const double lp = training_loss(m, *be_, x, y, n, stats);
      params[i] = orig - static_cast<float>(eps);
      be_->copy_to_device(m.params(), params.data(), params.size() * sizeof(float));
      const double lm = training_loss(m, *be_, x, y, n, stats);
      params[i] = orig;
      const double numeric = (lp - lm) / (2 * eps);
      max_g = std::max(max_g, std::abs(numeric));
      ++checked;
      if (!test::close_enough(grads[i], numeric, 3e-3, 5e-2) && ++bad <= 8)
        ADD_FAILURE() << t.name << "[" << i - t.offset << "] analytic " << grads[i] << " numeric "
                      << numeric;
    }
  }
  EXPECT_GT(checked, 40);
  EXPECT_GT(max_g, 1e-2);
  EXPECT_EQ(bad, 0);
}

TEST_F(ModelGraph, PlacedGradientsAreWrittenThereAndComeBack) {
  // The sync exchange moves grads() into the node's shared memory (Model::place_gradients):
  // every layer, of the stack built before and of one built after, then writes there, the
  // values equal an unplaced model's bit for bit, and placing back keeps them.
  const int n = 3;
  Model placed(*be_, kBranchyNet, Shape{1, 2, 6, 6}, 3, n),
      plain(*be_, kBranchyNet, Shape{1, 2, 6, 6}, 3, n);
  placed.initialize(5);
  plain.initialize(5);
  auto [x, stats, y] = batch3();
  const std::size_t P = placed.param_count();
  training_loss(placed, *be_, x, y, n, stats);  // the batch-3 stack exists before the move
  placed.grads()[P] = 5.0f;                     // the spare float moves too
  std::vector<float> storage(P + Model::kGradSpare, -1.0f);
  const std::size_t before = placed.device_bytes();
  placed.place_gradients(storage.data());
  EXPECT_EQ(placed.grads(), storage.data());
  EXPECT_EQ(storage[P], 5.0f);
  EXPECT_EQ(placed.device_bytes(), before - (P + Model::kGradSpare) * sizeof(float));
  std::fill(storage.begin(), storage.begin() + static_cast<std::ptrdiff_t>(P), 0.0f);
  for (int batch : {n, 2}) {  // the stack bound again, and one made after the move
    training_loss(placed, *be_, x, y, batch, stats);
    training_loss(plain, *be_, x, y, batch, stats);
    const auto want = to_host(*be_, plain.grads(), P);
    EXPECT_EQ(std::memcmp(storage.data(), want.data(), P * sizeof(float)), 0) << "batch " << batch;
  }
  placed.place_gradients(nullptr);
  EXPECT_NE(placed.grads(), storage.data());
  EXPECT_EQ(std::memcmp(placed.grads(), storage.data(), P * sizeof(float)), 0);
  EXPECT_EQ(placed.device_bytes(), before);
  training_loss(placed, *be_, x, y, n, stats);
  training_loss(plain, *be_, x, y, n, stats);
  EXPECT_EQ(std::memcmp(placed.grads(), to_host(*be_, plain.grads(), P).data(), P * sizeof(float)),
            0);
}

TEST_F(ModelGraph, PlanSharesMemoryAndReportsIt) {
  Model m(*be_, kBranchyNet, Shape{1, 2, 6, 6}, 3, 8);
  // Without sharing: every activation and its gradient in its own buffer.
  std::size_t naive = 0;
  Model layout(kBranchyNet, Shape{1, 2, 6, 6}, 3, 8);
  EXPECT_EQ(layout.param_count(), m.param_count());
  EXPECT_EQ(layout.activation_bytes(), m.activation_bytes());
  EXPECT_EQ(layout.signature(), m.signature());
  EXPECT_EQ(layout.params(), nullptr);
  const std::vector<Shape> outs = {{8, 4, 6, 6}, {8, 4, 6, 6}, {8, 4, 6, 6}, {8, 3, 6, 6},
                                   {8, 3, 6, 6}, {8, 2, 6, 6}, {8, 5, 6, 6}, {8, 4, 6, 6},
                                   {8, 4, 6, 6}, {8, 4, 6, 6}, {8, 4, 3, 3}, {8, 6, 3, 3},
                                   {8, 6, 1, 1}, {8, 3, 1, 1}};
  for (const Shape& s : outs) naive += 2 * s.count() * sizeof(float);
  EXPECT_GT(m.activation_bytes(), 0u);
  EXPECT_LT(m.activation_bytes(), naive * 3 / 4);
  EXPECT_NE(m.summary().find("activation memory (training, batch 8)"), std::string::npos);
  EXPECT_NE(m.summary().find("<- b1,b2"), std::string::npos) << m.summary();  // concat input=b1,b2
}

TEST_F(ModelGraph, SignatureSeesTheWiring) {
  std::vector<std::string> a = {"conv filters=2 kernel=1 name=x", "relu name=r",
                                "conv filters=2 kernel=1 input=x", "add input=r,3", "dense"};
  a[3] = "add input=r,c";
  a[2] += " name=c";
  std::vector<std::string> b = a;
  b[2] = "conv filters=2 kernel=1 input=r name=c";  // same layers, other wiring
  const Model ma(a, Shape{1, 1, 4, 4}, 3), mb(b, Shape{1, 1, 4, 4}, 3);
  EXPECT_EQ(ma.param_count(), mb.param_count());
  EXPECT_NE(ma.signature(), mb.signature());
}

std::string graph_error(const std::vector<std::string>& lines) {
  try {
    const Model m(lines, Shape{1, 1, 8, 8}, 3);
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST_F(ModelGraph, MalformedGraphsNameTheLine) {
  const std::string unknown = graph_error({"conv filters=2 name=a", "add input=a,zz", "dense"});
  EXPECT_NE(unknown.find("layer #2 'add input=a,zz'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("'zz' names no earlier layer"), std::string::npos) << unknown;

  const std::string later = graph_error({"conv filters=2 input=b name=a", "relu name=b", "dense"});
  EXPECT_NE(later.find("layer #1"), std::string::npos) << later;
  EXPECT_NE(later.find("comes later"), std::string::npos) << later;

  const std::string self = graph_error({"conv filters=2 name=a input=a", "dense"});
  EXPECT_NE(self.find("comes later"), std::string::npos) << self;

  const std::string shapes = graph_error(
      {"conv filters=2 name=a", "conv filters=3 name=b input=a", "add input=a,b", "dense"});
  EXPECT_NE(shapes.find("add input=a,b"), std::string::npos) << shapes;
  EXPECT_NE(shapes.find("one shape"), std::string::npos) << shapes;

  const std::string spatial =
      graph_error({"conv filters=2 pad=1 name=a", "conv filters=3 name=b input=a",
                   "concat input=a,b", "dense"});
  EXPECT_NE(spatial.find("height and width"), std::string::npos) << spatial;

  const std::string unused = graph_error({"conv filters=2 name=a", "relu", "dense input=a"});
  EXPECT_NE(unused.find("layer #2 'relu'"), std::string::npos) << unused;
  EXPECT_NE(unused.find("used by no later layer"), std::string::npos) << unused;

  const std::string dup = graph_error({"conv filters=2 name=a", "relu name=a", "dense"});
  EXPECT_NE(dup.find("already used"), std::string::npos) << dup;
}

TEST_F(ModelGraph, SequentialJobsKeepTheirSignature) {
  // A job without name=/input= is the same chain as before graphs existed: checkpoints written by
  // earlier versions (signature lines without wiring) still match.
  const Model m({"conv filters=2 kernel=3 pad=1", "relu", "flatten", "dense"}, Shape{1, 1, 4, 4},
                3);
  EXPECT_EQ(m.signature().find("input="), std::string::npos);
  EXPECT_NE(m.signature().find("conv(filters=2,kernel=3,stride=1,pad=1) 0.conv.weight:2x1x3x3"),
            std::string::npos);
}

}  // namespace
}  // namespace dtrain
