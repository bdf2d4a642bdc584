// tests/unit/test_cuda_conv_graph.cpp — GPU convolutions through cuDNN's graph API (--conv-api
// graph; src/dnn/cuda/conv_graph.hpp) against the legacy cudnnConvolution* calls, op by op, on
// two backends of the same GPU fed the same bits: forward y (with the bias and relu in the same
// graph: the fused epilogue, on the graph side), the data gradient (overwritten, and added into an
// existing dx: β = 1), the weight and bias gradients (the relu cases' backward passes both read
// the legacy forward's y: one relu mask for both), for the shapes ResNet,
// Inception and VGG use (3×3, 1×1 stride 2, 7×7 stride 2 on 3 channels, 1×7 / 7×1, 5×5), in
// NCHW fp32 with fp32 math (norm-wise relative error ≤ 1e-5: both accumulate in fp32, only the
// order differs), NHWC TF32 (≤ 5e-3) and NHWC bf16 (≤ 1e-2: outputs rounded to bf16 once each
// way), and NHWC bf16 with --cudnn-benchmark (graph plans timed against each other and against
// the timed legacy algorithm). The graph backend must have built its plans (GraphConvPlans::built),
// so that a silent fallback to the legacy calls cannot pass. The engine rule runs everywhere:
// test_conv_graph_rule.cpp. Skips without a GPU (fails with DTRAIN_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/act_tensor.hpp"
#include "common/gpu.hpp"
#include "common/parity.hpp"
#include "dtrain/dnn/backend.hpp"
#ifdef DTRAIN_HAVE_CUDA
#include "dnn/cuda/cuda_backend.hpp"
#endif

namespace dtrain {
namespace {

struct Setting {
  const char* name;
  Layout layout;
  Precision precision;
  MathMode math;
  double tol;
  bool benchmark = false;  ///< --cudnn-benchmark on both backends (graph plans timed too)
};

const Setting kSettings[] = {
    {"NchwFp32", Layout::nchw, Precision::fp32, MathMode::fp32, 1e-5},
    {"NhwcTf32", Layout::nhwc, Precision::fp32, MathMode::tf32, 5e-3},
    {"NhwcBf16", Layout::nhwc, Precision::bf16, MathMode::tf32, 1e-2},
    {"NhwcBf16Timed", Layout::nhwc, Precision::bf16, MathMode::tf32, 1e-2, true},
};

struct Case {
  Shape in;
  int k;
  Hw kernel, stride, pad;
  bool bias;
  bool accumulate;    ///< set_accumulate_dx(true): dx += conv_bwd_data(dy, w)
  bool relu = false;  ///< enable_relu(): y = max(conv + b, 0), backward_relu()
};

using testing::random_vec;
using testing::rel_err;
using Tensor = testing::ActTensor;

class CudaConvGraphParity : public ::testing::TestWithParam<Setting> {
 protected:
  void SetUp() override {
    DT_SKIP_WITHOUT_CUDA();
    legacy_ = make_cuda_backend(0);
    graph_ = make_cuda_backend(0);
    for (Backend* be : {legacy_.get(), graph_.get()}) {
      be->set_layout(GetParam().layout);
      be->set_precision(GetParam().precision);
      be->set_math(GetParam().math);
      be->set_cudnn_benchmark(GetParam().benchmark);
    }
    graph_->set_conv_api(ConvApi::graph);
  }
  std::unique_ptr<Backend> legacy_, graph_;
};

TEST_P(CudaConvGraphParity, MatchesTheLegacyCalls) {
  const Setting& s = GetParam();
  const DType act = s.precision == Precision::bf16 ? DType::bf16 : DType::f32;
  for (const Case& cc : {Case{{8, 16, 14, 14}, 32, 3, 1, 1, false, false},
                         Case{{8, 16, 14, 14}, 32, 3, 1, 1, true, true},
                         Case{{4, 32, 12, 12}, 64, 1, 2, 0, false, true},
                         Case{{4, 3, 32, 32}, 16, 7, 2, 3, true, false},
                         Case{{4, 8, 9, 11}, 16, {1, 7}, 1, {0, 3}, false, false},
                         Case{{4, 8, 9, 11}, 16, {7, 1}, 1, {3, 0}, true, true},
                         Case{{2, 8, 10, 10}, 8, 5, 1, 2, true, false},
                         Case{{8, 16, 14, 14}, 32, 3, 1, 1, true, false, true},
                         Case{{4, 32, 12, 12}, 64, 1, 2, 0, false, true, true}}) {
    SCOPED_TRACE(cc.in.str() + " k" + cc.kernel.str() + " s" + cc.stride.str() + " p" +
                 cc.pad.str() + (cc.accumulate ? " accumulating dx" : "") +
                 (cc.relu ? " relu" : ""));
    const ConvDesc d{cc.in, cc.k, cc.kernel, cc.stride, cc.pad, cc.bias};
    const Shape out = d.output();
    const std::size_t wn = std::size_t(cc.k) * cc.in.c * cc.kernel.h * cc.kernel.w;
    std::vector<std::vector<float>> got[2];  // y, dx, dw, db of each backend
    Backend* bes[2] = {legacy_.get(), graph_.get()};
    for (int i = 0; i < 2; ++i) {
      Backend& be = *bes[i];
      auto op = be.make_conv(d);
      if (cc.accumulate) {
        ASSERT_TRUE(op->can_accumulate_dx());
        op->set_accumulate_dx(true);
      }
      if (cc.relu) ASSERT_TRUE(op->enable_relu());
      Tensor x(be, act, random_vec(cc.in.count(), 1)), y(be, act, random_vec(out.count(), 2));
      Tensor dy(be, act, random_vec(out.count(), 3)), dx(be, act, random_vec(cc.in.count(), 4));
      Tensor w(be, DType::f32, random_vec(wn, 5)), b(be, DType::f32, random_vec(cc.k, 6));
      Tensor dw(be, DType::f32, random_vec(wn, 7)), db(be, DType::f32, random_vec(cc.k, 8));
      const auto f = [](const Tensor& t) { return static_cast<float*>(t.data()); };
      op->forward(x.data(), f(w), cc.bias ? f(b) : nullptr, y.data());
      std::vector<float> y_host = y.host();
      if (cc.relu) {
        // Both backward passes read the legacy forward's y, so both apply the same relu mask:
        // where the two forwards round an output near 0 to opposite signs (TF32 and bf16 do),
        // each backend's own mask would zero a different dy element, and dx / dw would differ
        // by that element's whole contribution, not by rounding. The forwards are compared
        // on their own through y.
        Tensor y_mask(be, act, i == 0 ? y_host : got[0][0]);
        op->backward_relu(x.data(), y_mask.data(), f(w), dy.data(), dx.data(), f(dw),
                          cc.bias ? f(db) : nullptr);
      } else {
        op->backward(x.data(), f(w), dy.data(), dx.data(), f(dw), cc.bias ? f(db) : nullptr);
      }
      got[i] = {std::move(y_host), dx.host(), dw.host(), db.host()};
    }
    const char* names[4] = {"y", "dx", "dw", "db"};
    for (int k = 0; k < 4; ++k) EXPECT_LE(rel_err(got[1][k], got[0][k]), s.tol) << names[k];
  }
#ifdef DTRAIN_HAVE_CUDA
  // Plans were built (a silent fallback to the legacy calls would build none), and only there.
  EXPECT_GE(cuda::as_cuda_backend(*graph_).conv_plans().built(), 7u);
  EXPECT_EQ(cuda::as_cuda_backend(*legacy_).conv_plans().built(), 0u);
#endif
}

INSTANTIATE_TEST_SUITE_P(CudaConvGraph, CudaConvGraphParity, ::testing::ValuesIn(kSettings),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dtrain
