// tests/unit/test_named_tensors.cpp — tensor names (Model's TensorInfo::key): torchvision's
// state_dict keys for the standard jobs, generated names otherwise, unique; format 2 checkpoints
// keep them; safetensors round trip and refusals (io/safetensors.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/io/checkpoint.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/io/safetensors.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/train/checkpointer.hpp"
#include "dtrain/train/pretrained.hpp"

namespace fs = std::filesystem;

namespace dtrain {
namespace {

/// The repository's jobs/ (tests/common/tiny_cnn.ini is three levels below the root).
std::string job_path(const std::string& name) {
  return (fs::path(DTRAIN_TINY_CNN_JOB).parent_path().parent_path().parent_path() / "jobs" / name)
      .string();
}

/// A layout-only model of a job file's `layer =` lines on its `synthetic =` input (1x28x28:10
/// without one).
std::unique_ptr<Model> layout_of(const std::string& job) {
  std::ifstream in(job_path(job));
  EXPECT_TRUE(in.good()) << job_path(job);
  std::vector<std::string> layers;
  std::string synthetic;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("layer = ", 0) == 0) layers.push_back(line.substr(8));
    if (line.rfind("synthetic = ", 0) == 0) synthetic = line.substr(12);
  }
  // Jobs on files (ResNet-20: Fashion-MNIST) take their data's shape: 1x28x28, 10 classes.
  const DatasetInfo d = parse_synthetic(synthetic.empty() ? "1x28x28:10" : synthetic);
  return std::make_unique<Model>(layers, d.sample, d.num_classes, 1);
}

std::map<std::string, std::vector<std::int64_t>> keys(const Model& m) {
  std::map<std::string, std::vector<std::int64_t>> out;
  for (const auto* list : {&m.param_tensors(), &m.state_tensors()})
    for (const TensorInfo& t : *list) out[t.key] = t.dims;
  return out;
}

using Dims = std::vector<std::int64_t>;

TEST(NamedTensors, ResNet50JobCarriesTorchvisionNames) {
  const auto m = layout_of("resnet50_imagenet.ini");
  const auto k = keys(*m);
  EXPECT_EQ(m->param_tensors().size(), 161u);  // torchvision: 161 parameters
  EXPECT_EQ(m->state_tensors().size(), 106u);  // and 53 batchnorms' mean and var
  EXPECT_EQ(m->param_tensors().front().key, "conv1.weight");
  EXPECT_EQ(k.at("conv1.weight"), (Dims{64, 3, 7, 7}));
  EXPECT_EQ(k.at("bn1.running_mean"), (Dims{64}));
  EXPECT_EQ(k.at("layer1.0.downsample.0.weight"), (Dims{256, 64, 1, 1}));
  EXPECT_EQ(k.at("layer1.0.bn2.running_var"), (Dims{64}));
  EXPECT_EQ(k.at("layer2.0.conv2.weight"), (Dims{128, 128, 3, 3}));
  EXPECT_EQ(k.at("layer4.2.bn3.bias"), (Dims{2048}));
  EXPECT_EQ(k.at("fc.weight"), (Dims{1000, 2048}));
  EXPECT_EQ(m->param_tensors().back().key, "fc.bias");
}

TEST(NamedTensors, VggAndInceptionJobsCarryTorchvisionNames) {
  const auto vgg = keys(*layout_of("vgg16_imagenet.ini"));
  EXPECT_EQ(vgg.size(), 32u);
  EXPECT_EQ(vgg.at("features.0.weight"), (Dims{64, 3, 3, 3}));
  EXPECT_EQ(vgg.at("features.28.bias"), (Dims{512}));
  EXPECT_EQ(vgg.at("classifier.0.weight"), (Dims{4096, 25088}));
  EXPECT_EQ(vgg.at("classifier.6.weight"), (Dims{1000, 4096}));
  const auto inc = keys(*layout_of("inception3_imagenet.ini"));
  EXPECT_EQ(inc.at("Conv2d_1a_3x3.conv.weight"), (Dims{32, 3, 3, 3}));
  EXPECT_EQ(inc.at("Mixed_6b.branch7x7dbl_5.conv.weight"), (Dims{192, 128, 1, 7}));
  EXPECT_EQ(inc.at("Mixed_7c.branch_pool.bn.running_var"), (Dims{192}));
  EXPECT_EQ(inc.at("fc.weight"), (Dims{1000, 2048}));
  const auto r20 = keys(*layout_of("resnet20_cifar.ini"));
  EXPECT_EQ(r20.at("layer3.2.bn2.weight"), (Dims{64}));
}

TEST(NamedTensors, GeneratedNamesAndCollisions) {
  const Model m({"conv filters=4 kernel=3", "batchnorm", "flatten", "dense name=head"},
                Shape{1, 1, 6, 6}, 3, 1);
  const auto k = keys(m);
  EXPECT_EQ(k.at("0.conv.weight"), (Dims{4, 1, 3, 3}));
  EXPECT_EQ(k.at("0.conv.bias"), (Dims{4}));
  EXPECT_EQ(k.at("1.batchnorm.weight"), (Dims{4}));  // γ
  EXPECT_EQ(k.at("1.batchnorm.running_var"), (Dims{4}));
  EXPECT_EQ(k.at("head.weight"), (Dims{3, 64}));
  // A name= equal to a generated name: one error naming both layers.
  try {
    const Model bad({"conv filters=4 kernel=3 name=1.batchnorm", "batchnorm", "flatten", "dense"},
                    Shape{1, 1, 6, 6}, 3, 1);
    FAIL() << "accepted a duplicate tensor name";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'1.batchnorm.weight' is given to layer #1 and layer #2"),
              std::string::npos)
        << e.what();
  }
}

class NamedFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("dtrain_named_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(NamedFiles, CheckpointKeepsNamesAndShapes) {
  const Model m({"conv filters=4 kernel=3", "batchnorm", "flatten", "dense name=head"},
                Shape{1, 1, 6, 6}, 3, 1);
  CheckpointState s;
  s.mode = "sync";
  s.model_signature = m.signature();
  s.params.resize(m.param_count());
  for (std::size_t i = 0; i < s.params.size(); ++i) s.params[i] = static_cast<float>(i);
  s.state_rows = 2;
  s.model_state.assign(2 * m.state_count(), 0.25f);
  name_tensors(s, m);
  write_checkpoint(dir_, s, 1);
  const CheckpointState r = read_checkpoint(checkpoint_path(dir_, 0));
  EXPECT_EQ(r.format_version, 2);
  ASSERT_EQ(r.param_tensors.size(), m.param_tensors().size());
  for (std::size_t i = 0; i < r.param_tensors.size(); ++i) {
    EXPECT_EQ(r.param_tensors[i].name, m.param_tensors()[i].key);
    EXPECT_EQ(r.param_tensors[i].dims, m.param_tensors()[i].dims);
    EXPECT_EQ(r.param_tensors[i].offset, m.param_tensors()[i].offset);
  }
  ASSERT_EQ(r.buffer_tensors.size(), 2u);
  EXPECT_EQ(r.buffer_tensors[1].name, "1.batchnorm.running_var");
  EXPECT_EQ(r.buffer_tensors[1].dims, (Dims{4}));
  EXPECT_EQ(r.params, s.params);
  // Export: parameters, then each batchnorm's mean, var and num_batches_tracked.
  const std::vector<SafeTensor> t = export_tensors(r, "ckpt", ExportDtype::f32);
  ASSERT_EQ(t.size(), 9u);
  EXPECT_EQ(t[0].name, "0.conv.weight");
  EXPECT_EQ(t.back().name, "1.batchnorm.num_batches_tracked");
  EXPECT_EQ(t.back().dtype, "I64");
  EXPECT_TRUE(t.back().shape.empty());
}

TEST_F(NamedFiles, SafetensorsRoundTripAndRefusals) {
  SafeTensor a{"a.weight", "F32", {2, 3}, std::vector<std::uint8_t>(24)};
  const float v[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
  std::memcpy(a.data.data(), v, 24);
  SafeTensor b{"b.n", "I64", {}, std::vector<std::uint8_t>(8, 0)};
  const std::string path = dir_ + "/m.safetensors";
  write_safetensors(path, {a, b}, {{"format", "pt"}});
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const SafetensorsFile f = read_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.tensors[0].name, "a.weight");
  EXPECT_EQ(f.tensors[0].shape, (Dims{2, 3}));
  EXPECT_EQ(safetensor_floats(f.tensors[0], path), std::vector<float>(v, v + 6));
  EXPECT_THROW(safetensor_floats(f.tensors[1], path), InputError);  // I64 is no float
  EXPECT_THROW(write_safetensors(path, {a}, {}), InputError);       // never overwrites
  // A header length over 100 MB: refused before anything is allocated, naming the file.
  const std::string huge = dir_ + "/huge.safetensors";
  {
    std::ofstream out(huge, std::ios::binary);
    const std::uint64_t n = kSafetensorsMaxHeader + 1;
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << "{}";
  }
  try {
    read_safetensors(huge);
    FAIL() << "accepted a 100 MB header";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(huge), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("100 MB"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain
