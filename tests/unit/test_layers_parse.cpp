// tests/unit/test_layers_parse.cpp — the job-file layer syntax: parsing, argument defaults,
// output shapes, parameter definitions, describe(), and error messages that quote the line.
#include <gtest/gtest.h>

#include <string>

#include "dtrain/core/error.hpp"
#include "dtrain/layers/layer.hpp"

namespace dtrain {
namespace {

class LayerParse : public ::testing::Test {
 protected:
  std::unique_ptr<Layer> make(const std::string& line, const Shape& in, int classes = 10) {
    return make_layer(parse_layer_spec(line), {in}, classes, be_.get());
  }
  /// Expects make(line) (or parsing) to throw InputError whose message contains every needle.
  void expect_error(const std::string& line, const Shape& in,
                    std::initializer_list<std::string> needles) {
    try {
      (void)make(line, in);
      ADD_FAILURE() << "no InputError for '" << line << "'";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      for (const auto& n : needles) {
        EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
      }
    }
  }
  std::unique_ptr<Backend> be_ = make_cpu_backend();
};

TEST_F(LayerParse, SplitsTypeAndArguments) {
  const LayerSpec s = parse_layer_spec("  conv\tfilters=32   kernel=5 stride=2 ");
  EXPECT_EQ(s.type, "conv");
  EXPECT_EQ(s.args.size(), 3u);
  EXPECT_EQ(s.args.at("filters"), "32");
  EXPECT_EQ(s.args.at("kernel"), "5");
  EXPECT_EQ(s.args.at("stride"), "2");
  EXPECT_EQ(s.text, "  conv\tfilters=32   kernel=5 stride=2 ");
  EXPECT_TRUE(parse_layer_spec("relu").args.empty());
}

TEST_F(LayerParse, SyntaxErrorsNameTheText) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "empty layer line"},
      {"   ", "empty layer line"},
      {"conv filters", "'filters'"},
      {"conv filters=", "'filters='"},
      {"conv =3", "'=3'"},
      {"conv filters = 3", "'='"},
      {"filters=3", "layer type first"},
      {"conv filters=3 filters=4", "'filters' given twice"},
  };
  for (const auto& [line, needle] : cases) {
    try {
      (void)parse_layer_spec(line);
      ADD_FAILURE() << "no InputError for '" << line << "'";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("layer '" + line + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  }
}

TEST_F(LayerParse, ConvDefaultsShapesAndParams) {
  auto l = make("conv filters=8", Shape{2, 3, 28, 28});
  EXPECT_EQ(l->type(), "conv");
  EXPECT_EQ(l->describe(), "conv(filters=8,kernel=3,stride=1,pad=0)");
  EXPECT_EQ(l->output_shape(), (Shape{2, 8, 26, 26}));
  const auto defs = l->param_defs();
  ASSERT_EQ(defs.size(), 2u);
  EXPECT_EQ(defs[0].name, "weight");
  EXPECT_EQ(defs[0].shape, (Shape{8, 3, 3, 3}));
  EXPECT_EQ(defs[0].init, Init::he_normal);
  EXPECT_EQ(defs[0].fan_in, 27);
  EXPECT_EQ(defs[1].name, "bias");
  EXPECT_EQ(defs[1].shape.count(), 8u);
  EXPECT_EQ(defs[1].init, Init::zeros);
  EXPECT_TRUE(l->state_defs().empty());
  EXPECT_EQ(make("conv filters=4 kernel=5 stride=2 pad=2", Shape{1, 1, 28, 28})->describe(),
            "conv(filters=4,kernel=5,stride=2,pad=2)");
}

TEST_F(LayerParse, PoolDefaultStrideIsKernel) {
  auto m = make("maxpool", Shape{2, 4, 8, 8});
  EXPECT_EQ(m->describe(), "maxpool(kernel=2,stride=2,pad=0)");
  EXPECT_EQ(m->output_shape(), (Shape{2, 4, 4, 4}));
  auto a = make("avgpool kernel=3", Shape{2, 4, 9, 9});
  EXPECT_EQ(a->describe(), "avgpool(kernel=3,stride=3,pad=0)");
  EXPECT_EQ(a->output_shape(), (Shape{2, 4, 3, 3}));
  EXPECT_EQ(make("maxpool kernel=3 stride=1 pad=1", Shape{1, 1, 5, 5})->output_shape(),
            (Shape{1, 1, 5, 5}));
}

TEST_F(LayerParse, OtherLayersDefaults) {
  EXPECT_EQ(make("relu", Shape{2, 3, 4, 4})->describe(), "relu");
  EXPECT_EQ(make("sigmoid", Shape{2, 3, 4, 4})->output_shape(), (Shape{2, 3, 4, 4}));
  EXPECT_EQ(make("dropout", Shape{2, 3, 4, 4})->describe(), "dropout(rate=0.5)");
  EXPECT_EQ(make("dropout rate=0.3", Shape{2, 3, 4, 4})->describe(), "dropout(rate=0.3)");
  auto f = make("flatten", Shape{2, 3, 4, 5});
  EXPECT_EQ(f->output_shape(), (Shape{2, 60, 1, 1}));
  EXPECT_EQ(f->describe(), "flatten");

  auto bn = make("batchnorm", Shape{2, 6, 4, 4});
  EXPECT_EQ(bn->describe(), "batchnorm(eps=1e-05,momentum=0.1)");
  const auto p = bn->param_defs();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name, "gamma");
  EXPECT_EQ(p[0].init, Init::ones);
  EXPECT_EQ(p[1].name, "beta");
  EXPECT_EQ(p[1].init, Init::zeros);
  const auto s = bn->state_defs();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name, "running_mean");
  EXPECT_EQ(s[0].init, Init::zeros);
  EXPECT_EQ(s[1].name, "running_var");
  EXPECT_EQ(s[1].init, Init::ones);
  EXPECT_EQ(s[1].shape.count(), 6u);
  EXPECT_EQ(make("batchnorm eps=0.001 momentum=0.01", Shape{2, 6, 4, 4})->describe(),
            "batchnorm(eps=0.001,momentum=0.01)");
}

TEST_F(LayerParse, DenseUnitsDefaultToClasses) {
  auto d = make("dense", Shape{4, 3, 2, 2}, 7);
  EXPECT_EQ(d->describe(), "dense(units=7)");
  EXPECT_EQ(d->output_shape(), (Shape{4, 7, 1, 1}));
  const auto defs = d->param_defs();
  EXPECT_EQ(defs[0].shape, (Shape{7, 12, 1, 1}));
  EXPECT_EQ(defs[0].fan_in, 12);
  EXPECT_EQ(defs[0].init, Init::he_normal);
  EXPECT_EQ(make("dense units=128", Shape{4, 12, 1, 1}, 7)->output_shape(), (Shape{4, 128, 1, 1}));
}

TEST_F(LayerParse, UnknownTypeListsKnownTypes) {
  expect_error("convolution filters=3", Shape{1, 1, 8, 8},
               {"layer 'convolution filters=3'", "unknown layer type 'convolution'", "conv, "});
}

TEST_F(LayerParse, UnknownKeyListsAcceptedKeys) {
  expect_error("conv filters=3 kernal=5", Shape{1, 1, 8, 8},
               {"layer 'conv filters=3 kernal=5'", "unknown argument 'kernal'",
                "filters, kernel, stride, pad"});
  expect_error("relu alpha=0.1", Shape{1, 1, 8, 8}, {"unknown argument 'alpha'", "no arguments"});
}

TEST_F(LayerParse, BadValuesSayWhatWasExpected) {
  const Shape in{1, 1, 8, 8};
  expect_error("conv filters=abc", in, {"layer 'conv filters=abc'", "filters='abc'", "integer"});
  expect_error("conv filters=3.5", in, {"filters='3.5'", "integer"});
  expect_error("conv filters=0", in, {"filters=0", "[1, inf)"});
  expect_error("conv filters=4 stride=0", in, {"stride=0"});
  expect_error("conv filters=4 pad=-1", in, {"pad=-1"});
  expect_error("conv kernel=3", in, {"missing required argument filters"});
  expect_error("dropout rate=1", in, {"layer 'dropout rate=1'", "rate='1'", "[0, 1)"});
  expect_error("dropout rate=-0.1", in, {"rate='-0.1'"});
  expect_error("dropout rate=nan", in, {"rate='nan'"});
  expect_error("batchnorm momentum=2", in, {"momentum='2'", "[0, 1]"});
  expect_error("dense units=0", in, {"units=0"});
}

TEST_F(LayerParse, ImpossibleShapesNameTheLine) {
  expect_error("conv filters=4 kernel=9", Shape{2, 1, 5, 5},
               {"layer 'conv filters=4 kernel=9'", "kernel 9 is larger", "2x1x5x5"});
}

TEST_F(LayerParse, AShapeErrorNamesTheRankOnce) {
  set_error_context("rank 7 worker 6 host");  // as main() does
  try {
    (void)make("conv filters=4 kernel=9", Shape{2, 1, 5, 5});
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[rank 7 worker 6 host] layer 'conv filters=4 kernel=9': ", 0), 0u) << msg;
    EXPECT_EQ(msg.find("[rank 7", 1), std::string::npos) << "the rank is named twice: " << msg;
  }
  set_error_context("");
}

TEST_F(LayerParse, PoolKernelLargerThanInput) {
  expect_error("maxpool kernel=4", Shape{2, 3, 3, 3},
               {"layer 'maxpool kernel=4'", "kernel 4 is larger", "2x3x3x3"});
  expect_error("avgpool kernel=2 pad=2", Shape{2, 3, 8, 8},
               {"layer 'avgpool kernel=2 pad=2'", "at most half the kernel"});
}

TEST_F(LayerParse, DenseWithoutClassesOrUnits) {
  try {
    (void)make_layer(parse_layer_spec("dense"), {Shape{2, 3, 1, 1}}, 0, be_.get());
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 'dense'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("units=<integer>"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace dtrain
