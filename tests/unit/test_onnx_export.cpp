// tests/unit/test_onnx_export.cpp — the ONNX graph of a model (train/onnx_export.hpp), read back
// with the same schema: operators, attributes, initializers and their bytes, the dynamic batch
// axis, the outputs; ResNet-50's operator counts; a layer type without a mapping is one error,
// with nothing written; names a model gives twice are made unique.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/train/onnx_export.hpp"
#include "onnx/onnx.pb.h"

namespace dtrain {
namespace {

/// A model's graph with parameters 0, 1, 2, ... (scaled) and statistics 0.5, 1.5, ...
struct Built {
  std::unique_ptr<Model> model;
  std::vector<float> params, state;
  onnx::ModelProto proto;
  OnnxSummary summary;
};

Built build(const std::vector<std::string>& layers, const std::string& input = "1x12x12:4") {
  Built b;
  const DatasetInfo d = parse_synthetic(input);
  b.model = std::make_unique<Model>(layers, d.sample, d.num_classes, 1);
  b.params.resize(b.model->param_count());
  for (std::size_t i = 0; i < b.params.size(); ++i) b.params[i] = 0.001f * static_cast<float>(i);
  b.state.resize(b.model->state_count());
  for (std::size_t i = 0; i < b.state.size(); ++i) b.state[i] = 0.5f + static_cast<float>(i);
  OnnxGraph g;
  g.sample = b.model->sample_shape();
  g.classes = b.model->num_classes();
  g.layers = b.model->layers();
  g.params = b.model->param_tensors();
  g.state = b.model->state_tensors();
  g.param_values = b.params.data();
  g.state_values = b.state.data();
  g.metadata = {{"dtrain.job", "test"}};
  g.producer_version = "test";
  std::ostringstream out;
  b.summary = write_onnx(g, out);
  EXPECT_TRUE(b.proto.ParseFromString(out.str()));
  return b;
}

const onnx::NodeProto& node_named(const onnx::GraphProto& g, const std::string& name) {
  for (const auto& n : g.node())
    if (n.name() == name) return n;
  throw std::runtime_error("no node " + name);
}

const onnx::AttributeProto& attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return a;
  throw std::runtime_error(n.name() + ": no attribute " + name);
}

std::vector<std::int64_t> ints(const onnx::NodeProto& n, const std::string& name) {
  const auto& a = attr(n, name);
  return {a.ints().begin(), a.ints().end()};
}

std::map<std::string, int> op_counts(const onnx::GraphProto& g) {
  std::map<std::string, int> c;
  for (const auto& n : g.node()) ++c[n.op_type()];
  return c;
}

using V = std::vector<std::int64_t>;

TEST(OnnxExport, ModelHeaderInputAndOutputs) {
  const Built b = build({"conv filters=3 kernel=3 pad=1", "relu", "globalavgpool", "dense"});
  const onnx::ModelProto& m = b.proto;
  EXPECT_EQ(m.ir_version(), 8);
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).domain(), "");
  EXPECT_EQ(m.opset_import(0).version(), kOnnxOpset);
  EXPECT_EQ(m.producer_name(), "dtrain");
  ASSERT_EQ(m.metadata_props_size(), 1);
  EXPECT_EQ(m.metadata_props(0).key(), "dtrain.job");
  const onnx::GraphProto& g = m.graph();
  ASSERT_EQ(g.input_size(), 1);
  EXPECT_EQ(g.input(0).name(), "input");
  const auto& shape = g.input(0).type().tensor_type().shape();
  ASSERT_EQ(shape.dim_size(), 4);
  EXPECT_EQ(shape.dim(0).dim_param(), "N");
  EXPECT_EQ(shape.dim(1).dim_value(), 1);
  EXPECT_EQ(shape.dim(3).dim_value(), 12);
  ASSERT_EQ(g.output_size(), 2);
  EXPECT_EQ(g.output(0).name(), "logits");
  EXPECT_EQ(g.output(1).name(), "probabilities");
  EXPECT_EQ(g.output(1).type().tensor_type().shape().dim(1).dim_value(), 4);
  // conv, relu, globalavgpool, flatten + gemm, the logits' Identity and the Softmax.
  EXPECT_EQ(b.summary.nodes, 7u);
  EXPECT_EQ(b.summary.initializers, 4u);
  EXPECT_EQ(node_named(g, "3.dense").input(0), "3.dense/flatten");
  EXPECT_EQ(node_named(g, "output/logits").op_type(), "Identity");
  EXPECT_EQ(attr(node_named(g, "output/probabilities"), "axis").i(), 1);
}

TEST(OnnxExport, InitializersHoldTheValuesUnderTheirNames) {
  const Built b = build({"conv filters=2 kernel=3 name=c1", "batchnorm eps=0.001 name=bn",
                         "flatten", "dense name=fc"});
  const onnx::GraphProto& g = b.proto.graph();
  std::map<std::string, const onnx::TensorProto*> init;
  for (const auto& t : g.initializer()) init[t.name()] = &t;
  for (const auto* list : {&b.model->param_tensors(), &b.model->state_tensors()}) {
    const bool param = list == &b.model->param_tensors();
    for (const TensorInfo& t : *list) {
      ASSERT_TRUE(init.count(t.key)) << t.key;
      const onnx::TensorProto& p = *init[t.key];
      EXPECT_EQ(p.data_type(), onnx::TensorProto::FLOAT);
      EXPECT_EQ(V(p.dims().begin(), p.dims().end()), t.dims) << t.key;
      const float* want = (param ? b.params.data() : b.state.data()) + t.offset;
      ASSERT_EQ(p.raw_data().size(), t.count * sizeof(float)) << t.key;
      EXPECT_EQ(std::memcmp(p.raw_data().data(), want, p.raw_data().size()), 0) << t.key;
    }
  }
  EXPECT_EQ(V(init["fc.weight"]->dims().begin(), init["fc.weight"]->dims().end()), (V{4, 200}));
  const auto& bn = node_named(g, "bn");
  EXPECT_EQ(bn.op_type(), "BatchNormalization");
  EXPECT_FLOAT_EQ(attr(bn, "epsilon").f(), 0.001f);
  EXPECT_EQ(std::vector<std::string>(bn.input().begin(), bn.input().end()),
            (std::vector<std::string>{"c1", "bn.weight", "bn.bias", "bn.running_mean",
                                      "bn.running_var"}));
  EXPECT_EQ(attr(node_named(g, "fc"), "transB").i(), 1);
  EXPECT_EQ(node_named(g, "2.flatten").op_type(), "Flatten");
  EXPECT_EQ(node_named(g, "output/logits").op_type(), "Identity");  // fc's output is already 2-d
}

TEST(OnnxExport, WindowsPaddingAndMergesMapToTheirOperators) {
  const Built b = build(
      {"conv filters=4 kernel=1x3 stride=2 pad=0x1 bias=false name=c",
       "avgpool kernel=3 stride=1 pad=1 name=a", "maxpool kernel=3 stride=2 pad=1 input=c name=m",
       "zeropad channels=8 name=z", "avgpool kernel=2 input=a name=a2",
       "concat input=m,z,a2 name=cat", "sigmoid name=s", "add input=s,s name=twice",
       "add input=twice,s,s name=three", "dropout rate=0.5", "flatten", "dense units=5 name=d",
       "zeropad channels=7 name=zp", "add input=zp,zp name=add2", "dense"});
  const onnx::GraphProto& g = b.proto.graph();
  const auto& c = node_named(g, "c");
  EXPECT_EQ(c.input_size(), 2);  // no bias
  EXPECT_EQ(ints(c, "kernel_shape"), (V{1, 3}));
  EXPECT_EQ(ints(c, "strides"), (V{2, 2}));
  EXPECT_EQ(ints(c, "pads"), (V{0, 1, 0, 1}));
  const auto& a = node_named(g, "a");
  EXPECT_EQ(a.op_type(), "AveragePool");
  EXPECT_EQ(attr(a, "count_include_pad").i(), 0);
  EXPECT_EQ(node_named(g, "m").op_type(), "MaxPool");
  EXPECT_EQ(node_named(g, "z").op_type(), "Pad");
  EXPECT_EQ(attr(node_named(g, "cat"), "axis").i(), 1);
  EXPECT_EQ(node_named(g, "twice").op_type(), "Add");
  EXPECT_EQ(node_named(g, "three").op_type(), "Sum");
  EXPECT_EQ(node_named(g, "10.flatten").input(0), "three");  // dropout: no node
  std::map<std::string, const onnx::TensorProto*> init;
  for (const auto& t : g.initializer()) init[t.name()] = &t;
  // 4 → 8 channels: 2 before, 2 after (4-d); 5 → 7 after the dense (2-d): 1 before, 1 after.
  const auto pads = [&](const std::string& n) {
    return V(init.at(n)->int64_data().begin(), init.at(n)->int64_data().end());
  };
  EXPECT_EQ(pads("z/pads"), (V{0, 2, 0, 0, 0, 2, 0, 0}));
  EXPECT_EQ(pads("zp/pads"), (V{0, 1, 0, 1}));
  EXPECT_EQ(op_counts(g).count("Unsqueeze"), 0u);
}

TEST(OnnxExport, TwoDimensionalValuesMeetFourDimensionalOnes) {
  // A dense output (2-d) added to a global pool's (4-d), then a 1x1 convolution on it.
  const Built b = build({"conv filters=6 kernel=3 name=c", "globalavgpool name=g",
                         "dense units=6 input=c name=d", "batchnorm name=bn2",
                         "add input=bn2,g name=mix", "conv filters=4 kernel=1 name=c2"});
  const onnx::GraphProto& g = b.proto.graph();
  const auto& mix = node_named(g, "mix");
  EXPECT_EQ(mix.input(0), "mix/unsqueeze/0");
  EXPECT_EQ(mix.input(1), "g");
  EXPECT_EQ(node_named(g, "mix/unsqueeze/0").op_type(), "Unsqueeze");
  EXPECT_EQ(node_named(g, "c2").input(0), "mix");  // already 4-d
  EXPECT_EQ(node_named(g, "output/logits").op_type(), "Flatten");
}

TEST(OnnxExport, ResNet50HasTorchvisionsOperators) {
  std::vector<std::string> layers;
  // The job's lines, as tests/unit/test_named_tensors.cpp reads them.
  const std::filesystem::path root =
      std::filesystem::path(DTRAIN_TINY_CNN_JOB).parent_path().parent_path().parent_path();
  std::ifstream in(root / "jobs" / "resnet50_imagenet.ini");
  ASSERT_TRUE(in.good());
  for (std::string line; std::getline(in, line);)
    if (line.rfind("layer = ", 0) == 0) layers.push_back(line.substr(8));
  const Built b = build(layers, "3x224x224:1000");
  const auto ops = op_counts(b.proto.graph());
  // 53 convolutions each with a batchnorm (4 on the shortcuts), 16 residual adds, relu after the
  // stem and three per bottleneck, one max pool, one global pool, fc.
  EXPECT_EQ(ops.at("Conv"), 53);
  EXPECT_EQ(ops.at("BatchNormalization"), 53);
  EXPECT_EQ(ops.at("Add"), 16);
  EXPECT_EQ(ops.at("Relu"), 49);
  EXPECT_EQ(ops.at("MaxPool"), 1);
  EXPECT_EQ(ops.at("GlobalAveragePool"), 1);
  EXPECT_EQ(ops.at("Gemm"), 1);
  EXPECT_EQ(b.summary.initializers, 53u + 53u * 4u + 2u);  // conv weights, bn tensors, fc
  EXPECT_EQ(node_named(b.proto.graph(), "fc").input(1), "fc.weight");
}

TEST(OnnxExport, AnUnmappedLayerTypeIsOneErrorAndNothingIsWritten) {
  const Built b = build({"conv filters=2 kernel=3 name=c", "flatten", "dense"});
  OnnxGraph g;
  g.sample = b.model->sample_shape();
  g.classes = 4;
  g.layers = b.model->layers();
  g.layers[1].type = "lstm";  // a type dtrain may gain without an ONNX mapping
  g.params = b.model->param_tensors();
  g.param_values = b.params.data();
  std::ostringstream out;
  try {
    write_onnx(g, out);
    FAIL() << "accepted a layer type without a mapping";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer #2 '1.lstm' is of type 'lstm'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no ONNX mapping"), std::string::npos) << msg;
  }
  EXPECT_TRUE(out.str().empty());
}

// Names a model accepts but ONNX would see twice: the later value or node yields ("/out"), the
// tensors keep theirs; every value is assigned once and every node name is its own.
TEST(OnnxExport, NamesTakenAlreadyAreMadeUnique) {
  const auto unique = [](const onnx::GraphProto& g) {
    std::map<std::string, int> values, nodes;
    for (const auto& t : g.initializer()) ++values[t.name()];
    for (const auto& n : g.node()) {
      ++nodes[n.name()];
      for (const auto& o : n.output()) ++values[o];
    }
    ++values[g.input(0).name()];
    for (const auto& [name, count] : values) EXPECT_EQ(count, 1) << "value " << name;
    for (const auto& [name, count] : nodes) EXPECT_EQ(count, 1) << "node " << name;
  };
  // A layer named like a tensor, another after a tensor of its name.
  const Built a = build({"conv filters=2 kernel=3 name=c", "relu name=c.weight", "relu name=d.bias",
                         "conv filters=2 kernel=1 name=d", "flatten", "dense name=fc"});
  const onnx::GraphProto& ga = a.proto.graph();
  unique(ga);
  EXPECT_EQ(node_named(ga, "c").output(0), "c");
  EXPECT_EQ(node_named(ga, "c.weight").input(0), "c");
  EXPECT_EQ(node_named(ga, "c.weight").output(0), "c.weight/out");
  EXPECT_EQ(node_named(ga, "d.bias").output(0), "d.bias/out");
  EXPECT_EQ(node_named(ga, "d").input(0), "d.bias/out");
  EXPECT_EQ(node_named(ga, "d").input(2), "d.bias");  // the tensor, under its name
  // A name= equal to an earlier layer's "<index>.<type>": two values, two nodes.
  const Built b = build(
      {"conv filters=2 kernel=3", "relu", "maxpool kernel=2 name=1.relu", "flatten", "dense"});
  const onnx::GraphProto& gb = b.proto.graph();
  unique(gb);
  EXPECT_EQ(node_named(gb, "1.relu").op_type(), "Relu");
  EXPECT_EQ(node_named(gb, "1.relu").output(0), "1.relu");
  EXPECT_EQ(node_named(gb, "1.relu/out").op_type(), "MaxPool");
  EXPECT_EQ(node_named(gb, "1.relu/out").input(0), "1.relu");
  EXPECT_EQ(node_named(gb, "1.relu/out").output(0), "1.relu/out");
  EXPECT_EQ(node_named(gb, "3.flatten").input(0), "1.relu/out");
}

}  // namespace
}  // namespace dtrain
