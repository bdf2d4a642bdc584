// tests/unit/test_graph_layers.cpp — the layers that real CNNs need beyond a sequential stack, on
// the CPU backend: conv without bias, with non-square kernels/padding (1×7, 7×1), stride 2 and
// 1×1; global average pooling; add, concat and zeropad. Each: a finite-difference gradient check
// of every input and parameter, and forward values against a hand computation.
#include <gtest/gtest.h>

#include "common/layer_rig.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"

namespace dtrain {
namespace {

using test::check_layer_gradients;
using test::LayerRig;
using test::uniform_values;

class GraphLayers : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend();
};

TEST_F(GraphLayers, ConvWithoutBiasHasOnlyAWeight) {
  LayerRig rig(*be_, "conv filters=3 kernel=3 pad=1 bias=false", Shape{2, 2, 5, 5});
  ASSERT_EQ(rig.num_params(), 1u);
  EXPECT_EQ(rig.layer().param_defs()[0].shape, (Shape{3, 2, 3, 3}));
  EXPECT_NE(rig.layer().describe().find("bias=false"), std::string::npos);
  EXPECT_GE(check_layer_gradients(rig), 150u);
}

TEST_F(GraphLayers, ConvNonSquareKernels) {
  for (const char* line :
       {"conv filters=3 kernel=1x7 pad=0x3 bias=false", "conv filters=3 kernel=7x1 pad=3x0",
        "conv filters=2 kernel=1x3 stride=2x1"}) {
    LayerRig rig(*be_, line, Shape{2, 2, 8, 9});
    const Shape out = rig.layer().output_shape();
    if (std::string(line).find("stride") == std::string::npos) {
      EXPECT_EQ(out, (Shape{2, 3, 8, 9})) << line;  // "same" padding keeps H×W
    } else {
      EXPECT_EQ(out, (Shape{2, 2, 4, 7})) << line;
    }
    EXPECT_GE(check_layer_gradients(rig), 130u) << line;
  }
}

TEST_F(GraphLayers, ConvStride2And1x1) {
  for (const char* line :
       {"conv filters=4 kernel=1 stride=2 bias=false", "conv filters=4 kernel=1"}) {
    LayerRig rig(*be_, line, Shape{2, 3, 6, 6});
    EXPECT_GE(check_layer_gradients(rig), 100u) << line;
  }
}

TEST_F(GraphLayers, NonSquareConvMatchesHandComputation) {
  // 1×3 kernel of ones, no bias, pad 0x1: each output is the sum of three horizontal neighbours.
  LayerRig rig(*be_, "conv filters=1 kernel=1x3 pad=0x1 bias=false", Shape{1, 1, 2, 3});
  rig.set_param(0, {1, 1, 1});
  rig.set_input({1, 2, 3, 4, 5, 6});
  const auto y = rig.forward();
  const std::vector<float> want{3, 6, 5, 9, 15, 11};
  ASSERT_EQ(y.size(), want.size());
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y[i], want[i]) << i;
}

TEST_F(GraphLayers, GlobalAveragePooling) {
  LayerRig rig(*be_, "globalavgpool", Shape{2, 3, 4, 5});
  EXPECT_EQ(rig.layer().output_shape(), (Shape{2, 3, 1, 1}));
  const auto x = rig.input();
  const auto y = rig.forward();
  for (std::size_t nc = 0; nc < 6; ++nc) {
    double sum = 0;
    for (std::size_t k = 0; k < 20; ++k) sum += x[nc * 20 + k];
    EXPECT_NEAR(y[nc], sum / 20.0, 1e-5);
  }
  EXPECT_GE(check_layer_gradients(rig), 100u);
}

TEST_F(GraphLayers, AddSumsInputsAndCopiesTheGradient) {
  LayerRig rig(*be_, "add", std::vector<Shape>{{2, 3, 4, 4}, {2, 3, 4, 4}, {2, 3, 4, 4}});
  const auto a = rig.input(0), b = rig.input(1), c = rig.input(2);
  const auto y = rig.forward();
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y[i], a[i] + b[i] + c[i]);
  EXPECT_GE(check_layer_gradients(rig), 280u);
}

TEST_F(GraphLayers, ConcatJoinsChannelsInInputOrder) {
  LayerRig rig(*be_, "concat", std::vector<Shape>{{2, 1, 2, 2}, {2, 3, 2, 2}});
  EXPECT_EQ(rig.layer().output_shape(), (Shape{2, 4, 2, 2}));
  const auto a = rig.input(0), b = rig.input(1);
  const auto y = rig.forward();
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 16; ++k) {
      const float want = k < 4 ? a[n * 4 + k] : b[n * 12 + k - 4];
      EXPECT_FLOAT_EQ(y[n * 16 + k], want) << n << "," << k;
    }
  EXPECT_GE(check_layer_gradients(rig), 30u);
}

TEST_F(GraphLayers, ZeroPadCentresTheInputChannels) {
  LayerRig rig(*be_, "zeropad channels=6", Shape{2, 2, 3, 3});
  EXPECT_EQ(rig.layer().output_shape(), (Shape{2, 6, 3, 3}));
  const auto x = rig.input();
  const auto y = rig.forward();
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 6; ++c)
      for (int k = 0; k < 9; ++k) {
        const float want = (c >= 2 && c < 4) ? x[(n * 2 + c - 2) * 9 + k] : 0.0f;
        EXPECT_FLOAT_EQ(y[(n * 6 + c) * 9 + k], want);
      }
  EXPECT_GE(check_layer_gradients(rig), 30u);
}

TEST_F(GraphLayers, BadArgumentsNameTheLine) {
  auto msg = [&](const std::string& line, std::vector<Shape> in) {
    try {
      (void)make_layer(parse_layer_spec(line), in, 4, be_.get());
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const Shape s{2, 3, 4, 4};
  EXPECT_NE(msg("conv filters=2 kernel=1x", {s}).find("HxW"), std::string::npos);
  EXPECT_NE(msg("conv filters=2 bias=maybe", {s}).find("true or false"), std::string::npos);
  EXPECT_NE(msg("add", {s}).find("two or more inputs"), std::string::npos);
  EXPECT_NE(msg("relu", {s, s}).find("takes one input"), std::string::npos);
  EXPECT_NE(msg("add", {s, Shape{2, 3, 2, 2}}).find("one shape"), std::string::npos);
  EXPECT_NE(msg("concat", {s, Shape{2, 3, 2, 2}}).find("height and width"), std::string::npos);
  EXPECT_NE(msg("zeropad channels=2", {s}).find("fewer"), std::string::npos);
  EXPECT_NE(msg("conv filters=2 name=data", {s}).find("reserved"), std::string::npos);
  EXPECT_NE(msg("conv filters=2 input=a,,b", {s}).find("bad input list"), std::string::npos);
  // The line is quoted in every message.
  EXPECT_NE(msg("add", {s, Shape{2, 3, 2, 2}}).find("layer 'add'"), std::string::npos);
}

TEST_F(GraphLayers, LayoutOnlyLayersHaveShapesButCannotRun) {
  auto l = make_layer(parse_layer_spec("conv filters=8 kernel=3 pad=1 bias=false"),
                      {Shape{2, 3, 4, 4}}, 4, nullptr);
  EXPECT_EQ(l->output_shape(), (Shape{2, 8, 4, 4}));
  EXPECT_EQ(l->param_defs().size(), 1u);
  std::vector<float> x(96), y(256);
  const void* in[] = {x.data()};
  EXPECT_THROW(l->forward(in, y.data(), StepContext{}), Error);
}

}  // namespace
}  // namespace dtrain
