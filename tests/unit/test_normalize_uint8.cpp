// tests/unit/test_normalize_uint8.cpp — Backend::normalize_uint8 into the first layer's form:
// for every layout × dtype, its one pass equals bit for bit the sequence a model's input path
// makes otherwise (Model::network_input) — the normalized fp32 NCHW batch, then convert_layout to
// NHWC where the layouts differ, then cast to bf16 — on the CPU backend (the reference) and, with
// a GPU, on the CUDA kernels (CudaNormalizeUint8*: skipped without a GPU, failed with
// DTRAIN_REQUIRE_GPU=1); and a model given that batch as is (InputForm::network) computes what
// it computes from the fp32 NCHW batch, through micro-batches, evaluation and logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "common/layer_rig.hpp"
#include "common/model_step.hpp"
#include "common/nets.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {
namespace {

/// A uint8 batch of shape s and its C×256 table: mostly the ImageNet mean/std formula of
/// io/dataset.hpp's uint8_lut, every fourth entry an fp32 exactly halfway between two bf16
/// values (ties round to even: a truncating or round-half-up kernel would differ).
struct Batch {
  Shape s;
  std::vector<std::uint8_t> raw;
  std::vector<float> lut;
};

Batch make_batch(const Shape& s, std::uint32_t seed) {
  Batch b{s, std::vector<std::uint8_t>(s.count()), {}};
  std::mt19937 gen(seed);
  for (auto& v : b.raw) v = static_cast<std::uint8_t>(gen());
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stddev[3] = {0.229f, 0.224f, 0.225f};
  for (int c = 0; c < s.c; ++c)
    for (int v = 0; v < 256; ++v) {
      float f = (static_cast<float>(v) / 255.0f - mean[c % 3]) / stddev[c % 3];
      if ((v + c) % 4 == 0) {  // sign, exponent 2^-7..2^6, 7 mantissa bits, then 1000…0
        const std::uint32_t bits =
            (gen() & 0x8000'0000u) | ((120u + gen() % 14) << 23) | (gen() & 0x007f'0000u) | 0x8000u;
        std::memcpy(&f, &bits, sizeof f);
      }
      b.lut.push_back(f);
    }
  return b;
}

/// The normalized batch, fp32 NCHW, by the formula (what the host reader delivers).
std::vector<float> normalized(const Batch& b) {
  const std::size_t hw = static_cast<std::size_t>(b.s.h) * b.s.w;
  std::vector<float> y(b.raw.size());
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] = b.lut[(i / hw) % static_cast<std::size_t>(b.s.c) * 256 + b.raw[i]];
  return y;
}

/// The bytes at device p (count bytes), once the backend's queue is done.
std::vector<std::byte> bytes_of(Backend& be, const void* p, std::size_t count) {
  std::vector<std::byte> out(count);
  be.synchronize();
  be.copy_to_host(out.data(), p, count);
  return out;
}

/// normalize_uint8 on `be` in one call.
std::vector<std::byte> one_pass(Backend& be, const Batch& b, Layout to, DType t) {
  DeviceBuffer<std::uint8_t> x(be, b.raw.size());
  DeviceBuffer<float> lut = test::to_device(be, b.lut);
  DeviceBuffer<std::byte> y(be, b.raw.size() * dtype_size(t));
  be.copy_to_device(x.data(), b.raw.data(), b.raw.size());
  be.normalize_uint8(x.data(), lut.data(), y.data(), b.s, to, t);
  return bytes_of(be, y.data(), y.size());
}

/// Odd shapes: 3 samples of 3 or 1 channels at 7×7 and 224×224, 4 and 20 channels (the NHWC
/// kernel's tile narrows past 16 fp32 channels), non-square, one pixel.
const std::vector<Shape> kShapes = {{3, 3, 7, 7},     {3, 1, 7, 7}, {3, 3, 224, 224},
                                    {3, 1, 224, 224}, {2, 4, 5, 9}, {2, 20, 9, 11},
                                    {2, 3, 1, 1}};

/// For every shape, layout and dtype: normalize_uint8 on `be` against the old sequence on `seq`
/// (and, where given, against the CPU reference).
void expect_one_pass_is_the_sequence(Backend& be, Backend& seq, Backend* reference) {
  for (const Shape& s : kShapes) {
    const Batch b = make_batch(s, static_cast<std::uint32_t>(s.count()));
    for (const Layout to : {Layout::nchw, Layout::nhwc})
      for (const DType t : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(s.str() + " " + layout_name(to) + " " + dtype_name(t));
        const std::vector<std::byte> got = one_pass(be, b, to, t);
        EXPECT_TRUE(got == test::network_form(seq, normalized(b), s, to, t));
        if (reference != nullptr) EXPECT_TRUE(got == one_pass(*reference, b, to, t));
        if (to == Layout::nhwc && layouts_differ(s))  // not vacuous: the layout moved the values
          EXPECT_FALSE(got == one_pass(be, b, Layout::nchw, t));
      }
  }
}

TEST(NormalizeUint8, CpuReferenceEqualsNormalizeConvertCast) {
  auto cpu = make_cpu_backend();
  expect_one_pass_is_the_sequence(*cpu, *cpu, nullptr);
}

constexpr int kClasses = 5;

/// test::run_step_on for a model on `be` (kLayoutNet, initialized with seed 17) of b's batch,
/// given in the network form (normalize_uint8's one pass) or as fp32 NCHW; the training step in 2
/// micro-batches, so that the batch is sliced (Model::input_at). `bytes`: Model::device_bytes()
/// after the steps.
test::StepOutputs run_model(Backend& be, const Batch& b, bool network_form, std::size_t& bytes) {
  Model m(be, test::kLayoutNet, b.s.with_n(1), kClasses, b.s.n);
  m.initialize(17);
  DeviceBuffer<float> x(be, b.s.count());
  if (network_form) {
    DeviceBuffer<std::uint8_t> raw(be, b.raw.size());
    DeviceBuffer<float> lut = test::to_device(be, b.lut);
    be.copy_to_device(raw.data(), b.raw.data(), b.raw.size());
    be.normalize_uint8(raw.data(), lut.data(), x.data(), b.s, m.input_layout(), be.act_dtype());
    m.set_input_form(InputForm::network);
  } else {
    const std::vector<float> f32 = normalized(b);
    be.copy_to_device(x.data(), f32.data(), f32.size() * sizeof(float));
  }
  std::vector<std::int32_t> labels(static_cast<std::size_t>(b.s.n));
  for (int i = 0; i < b.s.n; ++i) labels[static_cast<std::size_t>(i)] = (2 * i + 1) % kClasses;
  test::StepOutputs out = test::run_step_on(m, x.data(), labels, 2);
  bytes = m.device_bytes();
  return out;
}

/// For each layout × precision (fp32 NCHW aside: nothing to convert): a model on a fresh
/// backend from make() given the network-form batch computes what one given the fp32 NCHW batch
/// computes — within `tolerance` relative to each output's largest magnitude: 0 (bit for bit) on
/// the CPU; a GPU's atomic sums (the loss statistics, some backward convolutions) may add in
/// another order from one run to the next, and a bf16 activation then round the other way. And
/// holds less device memory by exactly the input conversion buffers it never needed: the batch
/// in act_dtype(), plus in fp32 where it is both converted to NHWC and rounded to bf16.
void expect_network_form_runs_the_same(const std::function<std::unique_ptr<Backend>()>& make,
                                       double tolerance) {
  const Batch b = make_batch(Shape{5, 3, 8, 6}, 41);
  for (const Layout layout : {Layout::nchw, Layout::nhwc})
    for (const Precision p : {Precision::fp32, Precision::bf16}) {
      if (layout == Layout::nchw && p == Precision::fp32) continue;
      SCOPED_TRACE(std::string(layout_name(layout)) + " " + precision_name(p));
      test::StepOutputs r[2];
      std::size_t bytes[2] = {0, 0};
      for (const bool network : {false, true}) {
        auto be = make();
        be->set_layout(layout);
        be->set_precision(p);
        const int i = network ? 1 : 0;
        r[i] = run_model(*be, b, network, bytes[i]);
      }
      const std::size_t count = b.s.count(), act = dtype_size(act_dtype_of(p));
      const bool both = layout == Layout::nhwc && p == Precision::bf16;
      EXPECT_EQ(bytes[0] - bytes[1], count * act + (both ? count * sizeof(float) : 0));
      EXPECT_LE(test::max_rel(r[1].loss, r[0].loss), tolerance);
      EXPECT_LE(test::max_rel(r[1].grads, r[0].grads), tolerance);
      EXPECT_LE(test::max_rel(r[1].state, r[0].state), tolerance);
      EXPECT_LE(test::max_rel(r[1].eval, r[0].eval), tolerance);
      EXPECT_LE(test::max_rel(r[1].logits, r[0].logits), tolerance);
      // Not vacuous: the step computed gradients.
      EXPECT_TRUE(std::any_of(r[0].grads.begin(), r[0].grads.end(),
                              [](float g) { return std::abs(g) > 1e-3f; }));
    }
}

TEST(NormalizeUint8, CpuModelTakesTheNetworkFormAsIs) {
  expect_network_form_runs_the_same([] { return make_cpu_backend(); }, 0.0);
}

class CudaNormalizeUint8 : public ::testing::Test {
 protected:
  void SetUp() override { DT_SKIP_WITHOUT_CUDA(); }
};

// The fused kernel against the old sequence on the GPU (convert_layout's transpose kernel,
// launch_cast) and against the CPU reference.
TEST_F(CudaNormalizeUint8, OneKernelEqualsNormalizeConvertCast) {
  auto gpu = make_cuda_backend(0);
  auto cpu = make_cpu_backend();
  expect_one_pass_is_the_sequence(*gpu, *gpu, cpu.get());
}

TEST_F(CudaNormalizeUint8, ModelTakesTheNetworkFormAsIs) {
  expect_network_form_runs_the_same([] { return make_cuda_backend(0); }, 1e-2);
}

}  // namespace
}  // namespace dtrain
