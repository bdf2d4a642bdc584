// tests/unit/test_cuda_backend.cpp — the CUDA backend (cuDNN + cuBLAS + own kernels) against the
// oneDNN CPU backend: every op forward and backward on random inputs (norm-wise relative error
// ‖gpu − cpu‖/‖cpu‖ ≤ 1e-4 in fp32), optimizer parity, bit-identical dropout masks, a model-level
// gradient comparison and a short GPU training run. Every GPU test skips with the reason when
// dtrain was built without CUDA or no GPU is visible; the GPU-selection and availability tests run
// everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "common/gpu.hpp"
#include "common/gradient_check.hpp"
#include "common/model_step.hpp"
#include "common/nets.hpp"
#include "common/parity.hpp"
#include "dtrain/dnn/bf16.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {
namespace {

using testing::random_vec;
using testing::rel_err;

constexpr double kTol = 1e-4;

/// The same data on the CPU and on the GPU backend.
struct Twin {
  DeviceBuffer<float> cpu, gpu;
};

class CudaParity : public ::testing::Test {
 protected:
  void SetUp() override {
    DT_SKIP_WITHOUT_CUDA();
    cpu_ = make_cpu_backend();
    gpu_ = make_cuda_backend(0);
  }

  Twin twin(const std::vector<float>& v) {
    Twin t{DeviceBuffer<float>(*cpu_, v.size()), DeviceBuffer<float>(*gpu_, v.size())};
    cpu_->copy_to_device(t.cpu.data(), v.data(), v.size() * sizeof(float));
    gpu_->copy_to_device(t.gpu.data(), v.data(), v.size() * sizeof(float));
    return t;
  }
  Twin zeros(std::size_t n) { return twin(std::vector<float>(n, 0.0f)); }
  Twin random(std::size_t n, std::uint32_t seed) { return twin(random_vec(n, seed)); }

  std::vector<float> host(Backend& be, const DeviceBuffer<float>& b) {
    be.synchronize();
    std::vector<float> v(b.size());
    be.copy_to_host(v.data(), b.data(), b.bytes());
    return v;
  }
  /// Batchnorm training (two steps), backward and inference on both backends, compared.
  void batchnorm_parity(const Shape& s);
  /// ‖gpu − cpu‖ / ‖cpu‖ of one twin.
  double err(const Twin& t) { return rel_err(host(*gpu_, t.gpu), host(*cpu_, t.cpu)); }

  std::unique_ptr<Backend> cpu_, gpu_;
};

TEST(CudaAvailability, NeverThrowsAndIsConsistent) {
  int count = -1;
  EXPECT_NO_THROW(count = cuda_device_count());
  EXPECT_GE(count, 0);
  EXPECT_EQ(cuda_available(), count > 0);
  if (count == 0) EXPECT_THROW(make_cuda_backend(0), Error);
}

TEST(CudaSelectGpu, BindsByLocalRankAndRefusesOversubscription) {
  const int gpus = cuda_device_count();
  if (gpus == 0) {
    // Built without CUDA (Error) or no GPU visible (Error): never a silent GPU choice.
    EXPECT_THROW(select_gpu_for_local_rank(0, 1, false), Error);
    return;
  }
  for (int r = 0; r < gpus; ++r) EXPECT_EQ(select_gpu_for_local_rank(r, gpus, false), r);
  EXPECT_THROW(select_gpu_for_local_rank(0, gpus + 1, false), InputError);
  try {
    select_gpu_for_local_rank(0, gpus + 1, false);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--allow-gpu-sharing"), std::string::npos) << e.what();
  }
  EXPECT_EQ(select_gpu_for_local_rank(gpus, gpus + 1, true), 0);
}

TEST_F(CudaParity, MemoryFillScaleFinite) {
  EXPECT_NE(gpu_->name().find("cuda:0"), std::string::npos) << gpu_->name();
  DeviceBuffer<float> b(*gpu_, 1000);
  for (float x : host(*gpu_, b)) ASSERT_EQ(x, 0.0f);  // allocate() zero-fills
  gpu_->fill(b.data(), 2.0f, b.size());
  gpu_->scale(b.data(), 0.25f, b.size());
  for (float x : host(*gpu_, b)) ASSERT_EQ(x, 0.5f);
  EXPECT_TRUE(gpu_->all_finite(b.data(), b.size()));
  const float inf = INFINITY;
  gpu_->copy_to_device(b.data() + 777, &inf, sizeof(float));
  EXPECT_FALSE(gpu_->all_finite(b.data(), b.size()));
  EXPECT_TRUE(gpu_->all_finite(b.data(), 777));
  DeviceBuffer<float> c(*gpu_, 1000);
  gpu_->copy_device(c.data(), b.data(), b.bytes());
  EXPECT_EQ(host(*gpu_, c), host(*gpu_, b));
  void* pinned = gpu_->allocate_host(4096);
  ASSERT_NE(pinned, nullptr);
  EXPECT_EQ(static_cast<unsigned char*>(pinned)[4095], 0);
  gpu_->deallocate_host(pinned);
}

struct ConvCase {
  Shape in;
  int k;
  Hw kernel, stride, pad;
  bool bias = true;
};

// Both ways of choosing cuDNN's algorithms (heuristics; --cudnn-benchmark: every algorithm timed,
// cudnnFind*) must give the CPU's results: with fp32 math neither may pick a tensor-op algorithm.
class CudaConvParity : public CudaParity, public ::testing::WithParamInterface<bool> {};

TEST_P(CudaConvParity, ConvolutionForwardBackward) {
  gpu_->set_cudnn_benchmark(GetParam());
  // Square kernels with bias; the non-square (1x7, 7x1) and bias-free ones Inception and ResNet
  // use.
  for (const ConvCase& cc :
       {ConvCase{{4, 3, 9, 9}, 5, 3, 1, 1}, ConvCase{{2, 4, 12, 10}, 6, 3, 2, 0},
        ConvCase{{3, 2, 7, 7}, 4, 5, 1, 2}, ConvCase{{2, 8, 6, 6}, 3, 1, 1, 0},
        ConvCase{{2, 3, 9, 11}, 4, {1, 7}, 1, {0, 3}, false},
        ConvCase{{2, 3, 9, 11}, 4, {7, 1}, 1, {3, 0}, true},
        ConvCase{{3, 8, 8, 8}, 6, 1, 2, 0, false}, ConvCase{{2, 4, 10, 10}, 5, 3, 2, 1, false}}) {
    SCOPED_TRACE(cc.in.str() + " k" + cc.kernel.str() + " s" + cc.stride.str() + " p" +
                 cc.pad.str() + (cc.bias ? " bias" : " no bias"));
    const ConvDesc d{cc.in, cc.k, cc.kernel, cc.stride, cc.pad, cc.bias};
    const Shape out = d.output();
    auto c_op = cpu_->make_conv(d);
    auto g_op = gpu_->make_conv(d);
    const std::size_t wn = std::size_t(cc.k) * cc.in.c * cc.kernel.h * cc.kernel.w;
    Twin x = random(cc.in.count(), 1), w = random(wn, 2), b = random(cc.k, 3);
    Twin y = zeros(out.count()), dy = random(out.count(), 4);
    Twin dx = zeros(cc.in.count()), dw = random(wn, 5), db = random(cc.k, 6);  // overwritten
    auto bias = [&](DeviceBuffer<float>& t) { return cc.bias ? t.data() : nullptr; };
    c_op->forward(x.cpu.data(), w.cpu.data(), bias(b.cpu), y.cpu.data());
    g_op->forward(x.gpu.data(), w.gpu.data(), bias(b.gpu), y.gpu.data());
    EXPECT_LE(err(y), kTol);
    c_op->backward(x.cpu.data(), w.cpu.data(), dy.cpu.data(), dx.cpu.data(), dw.cpu.data(),
                   bias(db.cpu));
    g_op->backward(x.gpu.data(), w.gpu.data(), dy.gpu.data(), dx.gpu.data(), dw.gpu.data(),
                   bias(db.gpu));
    EXPECT_LE(err(dx), kTol);
    EXPECT_LE(err(dw), kTol);
    if (cc.bias) EXPECT_LE(err(db), kTol);
    // dx == nullptr skips the data gradient but still overwrites dw (and db).
    g_op->backward(x.gpu.data(), w.gpu.data(), dy.gpu.data(), nullptr, dw.gpu.data(), bias(db.gpu));
    EXPECT_LE(err(dw), kTol);
  }
}

INSTANTIATE_TEST_SUITE_P(CudaAlgorithms, CudaConvParity, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Benchmark" : "Heuristic"; });

TEST_F(CudaParity, AddAndStridedCopy) {
  Twin a = random(1000, 21), b = random(1000, 22);
  cpu_->add(a.cpu.data(), b.cpu.data(), 1000, DType::f32);
  gpu_->add(a.gpu.data(), b.gpu.data(), 1000, DType::f32);
  EXPECT_LE(err(a), 1e-7);
  // 5 rows of 7 floats from a stride-11 source into a stride-13 destination at offset 3.
  Twin src = random(5 * 11, 23), dst = zeros(5 * 13 + 3);
  constexpr std::size_t f = sizeof(float);
  cpu_->copy_2d(dst.cpu.data() + 3, 13 * f, src.cpu.data(), 11 * f, 7 * f, 5);
  gpu_->copy_2d(dst.gpu.data() + 3, 13 * f, src.gpu.data(), 11 * f, 7 * f, 5);
  EXPECT_EQ(host(*gpu_, dst.gpu), host(*cpu_, dst.cpu));
}

// bf16 conversions and sums on the GPU round exactly as the host's (dtrain/dnn/bf16.hpp).
TEST_F(CudaParity, Bf16CastAndAddRoundAsTheHost) {
  const std::size_t n = 4097;
  auto a = random_vec(n, 31), b = random_vec(n, 32);
  a[0] = std::numeric_limits<float>::quiet_NaN();
  a[1] = 3.0e38f;  // rounds beyond bf16's largest value: +Inf
  DeviceBuffer<float> ad(*gpu_, n), bd(*gpu_, n), back(*gpu_, n);
  DeviceBuffer<std::uint16_t> ah(*gpu_, n), bh(*gpu_, n);
  gpu_->copy_to_device(ad.data(), a.data(), n * sizeof(float));
  gpu_->copy_to_device(bd.data(), b.data(), n * sizeof(float));
  gpu_->cast(ad.data(), DType::f32, ah.data(), DType::bf16, n);
  gpu_->cast(bd.data(), DType::f32, bh.data(), DType::bf16, n);
  std::vector<std::uint16_t> h(n);
  gpu_->copy_to_host(h.data(), ah.data(), n * 2);
  EXPECT_TRUE(std::isnan(bf16_to_float(h[0])));
  for (std::size_t i = 1; i < n; ++i) ASSERT_EQ(h[i], float_to_bf16(a[i])) << i;
  gpu_->add(ah.data(), bh.data(), n, DType::bf16);
  gpu_->cast(ah.data(), DType::bf16, back.data(), DType::f32, n);
  std::vector<float> sum(n);
  gpu_->copy_to_host(sum.data(), back.data(), n * sizeof(float));
  for (std::size_t i = 1; i < n; ++i)
    ASSERT_EQ(sum[i], round_to_bf16(round_to_bf16(a[i]) + round_to_bf16(b[i]))) << i;
  // convert_layout of bf16 tensors moves the elements as the CPU backend's reorder does (every
  // shape, both directions: ConvertLayoutMovesEveryElementAsTheCpu).
  const Shape s{3, 5, 7, 9};
  ASSERT_LE(s.count(), n);
  std::vector<std::uint16_t> nchw(s.count()), want(s.count()), got(s.count());
  for (std::size_t i = 0; i < s.count(); ++i) nchw[i] = float_to_bf16(a[i + 2]);
  DeviceBuffer<std::uint16_t> xc(*cpu_, s.count()), yc(*cpu_, s.count());
  cpu_->copy_to_device(xc.data(), nchw.data(), s.count() * 2);
  cpu_->convert_layout(xc.data(), yc.data(), s, Layout::nhwc, DType::bf16);
  cpu_->copy_to_host(want.data(), yc.data(), s.count() * 2);
  gpu_->copy_to_device(ah.data(), nchw.data(), s.count() * 2);
  gpu_->convert_layout(ah.data(), bh.data(), s, Layout::nhwc, DType::bf16);
  gpu_->copy_to_host(got.data(), bh.data(), s.count() * 2);
  EXPECT_EQ(got, want);
}

/// relu(v) as the kernels compute it: NaN passes.
float host_relu(float v) { return v > 0.0f || std::isnan(v) ? v : 0.0f; }

// The vectorized element-wise kernels (16-byte packs, elem.cuh) and the fused add + relu and
// relu-backward fan-out equal the host's arithmetic bit for bit in fp32 and bf16, at sizes that
// leave a tail after the last pack and at pointers one element off a 16-byte boundary (the
// scalar path).
TEST_F(CudaParity, VectorizedElementwiseMatchesTheHost) {
  for (const DType t : {DType::f32, DType::bf16}) {
    // The relu op works on the backend's activation type: a backend of precision t.
    auto be = make_cuda_backend(0);
    be->set_precision(t == DType::bf16 ? Precision::bf16 : Precision::fp32);
    for (const std::size_t n :
         {std::size_t(1), std::size_t(7), std::size_t(8), std::size_t(1001)}) {
      for (const std::size_t off : {std::size_t(0), std::size_t(1)}) {
        SCOPED_TRACE(std::string(t == DType::bf16 ? "bf16" : "fp32") + " n=" + std::to_string(n) +
                     " offset=" + std::to_string(off));
        const bool bf = t == DType::bf16;
        auto r = [&](float v) { return bf ? round_to_bf16(v) : v; };
        auto a = random_vec(n, 41), b = random_vec(n, 42), dy = random_vec(n, 43);
        if (n > 2) a[2] = std::numeric_limits<float>::quiet_NaN();
        // Device tensors of type t at element offset `off`, filled from fp32 host vectors.
        const std::size_t es = dtype_size(t);
        const std::size_t stride = (n + 8 + 15) / 16 * 16;  // tensors 16-element aligned, + off
        DeviceBuffer<std::byte> buf(*be, 6 * stride * es);
        DeviceBuffer<float> f32(*be, n);
        auto at = [&](int k) { return buf.data() + (k * stride + off) * es; };
        auto put = [&](int k, const std::vector<float>& v) {
          be->copy_to_device(f32.data(), v.data(), n * sizeof(float));
          be->cast(f32.data(), DType::f32, at(k), t, n);
        };
        auto get = [&](int k) {
          be->cast(at(k), t, f32.data(), DType::f32, n);
          std::vector<float> v(n);
          be->copy_to_host(v.data(), f32.data(), n * sizeof(float));
          return v;
        };
        put(0, a);
        put(1, b);
        put(2, dy);
        auto relu = be->make_activation(ActKind::relu, Shape{static_cast<int>(n), 1, 1, 1});
        be->add_relu(at(3), at(0), at(1), n, t, *relu);  // y = relu(a + b)
        be->relu_backward_fanout(at(3), at(2), at(4), at(5), n, t, *relu);
        const auto y = get(3), d0 = get(4), d1 = get(5);
        relu->forward(at(0), at(0));  // in place
        const auto ra = get(0);
        for (std::size_t i = 0; i < n; ++i) {
          const float want = r(host_relu(r(a[i]) + r(b[i])));
          if (std::isnan(a[i])) {
            ASSERT_TRUE(std::isnan(y[i]) && std::isnan(ra[i])) << i;
            continue;
          }
          ASSERT_EQ(y[i], want) << i;
          ASSERT_EQ(ra[i], host_relu(r(a[i]))) << i;
          const float g = want > 0.0f ? r(dy[i]) : 0.0f;
          ASSERT_EQ(d0[i], g) << i;
          ASSERT_EQ(d1[i], g) << i;
        }
      }
    }
  }
}

TEST_F(CudaParity, ConvertLayoutMovesEveryElementAsTheCpu) {
  // Shapes of one tile, of several tiles in both matrix dimensions (C and H·W past 32), of a
  // one-pixel plane, and with odd edges; both directions, both element types (bits compared).
  for (const Shape& s : {Shape{3, 5, 7, 9}, Shape{2, 40, 6, 7}, Shape{2, 70, 1, 1},
                         Shape{2, 3, 33, 2}, Shape{1, 33, 65, 3}}) {
    for (const Layout to : {Layout::nhwc, Layout::nchw}) {
      for (const DType t : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(s.str() + " to " + layout_name(to) + " " + dtype_name(t));
        const std::size_t bytes = s.count() * (t == DType::bf16 ? 2 : 4);
        std::vector<unsigned char> x(bytes), want(bytes), got(bytes);
        for (std::size_t i = 0; i < bytes; ++i) x[i] = static_cast<unsigned char>(i * 131 + i / 7);
        DeviceBuffer<unsigned char> xc(*cpu_, bytes), yc(*cpu_, bytes);
        DeviceBuffer<unsigned char> xg(*gpu_, bytes), yg(*gpu_, bytes);
        cpu_->copy_to_device(xc.data(), x.data(), bytes);
        cpu_->convert_layout(xc.data(), yc.data(), s, to, t);
        cpu_->copy_to_host(want.data(), yc.data(), bytes);
        gpu_->copy_to_device(xg.data(), x.data(), bytes);
        gpu_->convert_layout(xg.data(), yg.data(), s, to, t);
        gpu_->copy_to_host(got.data(), yg.data(), bytes);
        EXPECT_EQ(got, want);
      }
    }
  }
}

TEST_F(CudaParity, PoolingForwardBackward) {
  const Shape in{3, 4, 9, 8};
  // Square windows; global average pooling (kernel = H×W); a non-square window; a 1×1 subsample.
  for (const PoolDesc& d :
       {PoolDesc{in, PoolKind::max, 2, 2, 0}, PoolDesc{in, PoolKind::max, 3, 2, 1},
        PoolDesc{in, PoolKind::avg, 2, 2, 0}, PoolDesc{in, PoolKind::avg, 3, 2, 1},
        PoolDesc{in, PoolKind::avg, 3, 1, 1}, PoolDesc{in, PoolKind::avg, Hw{9, 8}, 1, 0},
        PoolDesc{in, PoolKind::max, Hw{1, 3}, Hw{1, 2}, Hw{0, 1}},
        PoolDesc{in, PoolKind::avg, 1, 2, 0}}) {
    SCOPED_TRACE(std::string(d.kind == PoolKind::max ? "max" : "avg") + " k" + d.kernel.str() +
                 " s" + d.stride.str() + " p" + d.pad.str());
    const Shape out = d.output();
    auto c_op = cpu_->make_pool(d);
    auto g_op = gpu_->make_pool(d);
    Twin x = random(in.count(), 11), y = zeros(out.count()), dy = random(out.count(), 12);
    Twin dx = random(in.count(), 13);
    c_op->forward(x.cpu.data(), y.cpu.data(), true);
    g_op->forward(x.gpu.data(), y.gpu.data(), true);
    EXPECT_LE(err(y), kTol);
    c_op->backward(x.cpu.data(), y.cpu.data(), dy.cpu.data(), dx.cpu.data());
    g_op->backward(x.gpu.data(), y.gpu.data(), dy.gpu.data(), dx.gpu.data());
    EXPECT_LE(err(dx), kTol);
  }
}

TEST_F(CudaParity, ActivationsForwardBackward) {
  const Shape s{4, 3, 5, 7};
  for (ActKind kind : {ActKind::relu, ActKind::sigmoid}) {
    SCOPED_TRACE(kind == ActKind::relu ? "relu" : "sigmoid");
    auto c_op = cpu_->make_activation(kind, s);
    auto g_op = gpu_->make_activation(kind, s);
    Twin x = random(s.count(), 21), y = zeros(s.count()), dy = random(s.count(), 22);
    Twin dx = zeros(s.count());
    c_op->forward(x.cpu.data(), y.cpu.data());
    g_op->forward(x.gpu.data(), y.gpu.data());
    EXPECT_LE(err(y), kTol);
    c_op->backward(x.cpu.data(), y.cpu.data(), dy.cpu.data(), dx.cpu.data());
    g_op->backward(x.gpu.data(), y.gpu.data(), dy.gpu.data(), dx.gpu.data());
    EXPECT_LE(err(dx), kTol);
  }
}

TEST_F(CudaParity, BatchNormTrainingInferenceBackward) {
  // 5 channels train on dtrain's kernels, 300 (more than two per SM on any GPU) on cuDNN's.
  for (const Shape& s : {Shape{6, 5, 4, 3}, Shape{3, 300, 3, 2}}) {
    SCOPED_TRACE(s.str());
    batchnorm_parity(s);
  }
}

void CudaParity::batchnorm_parity(const Shape& s) {
  const BatchNormDesc d{s, 1e-5f, 0.1f};
  auto c_op = cpu_->make_batchnorm(d);
  auto g_op = gpu_->make_batchnorm(d);
  Twin x = twin(random_vec(s.count(), 31, -2.0f, 3.0f));
  Twin gamma = twin(random_vec(s.c, 32, 0.5f, 1.5f)), beta = random(s.c, 33);
  Twin mean = zeros(s.c), var = twin(std::vector<float>(s.c, 1.0f));
  Twin y = zeros(s.count()), dy = random(s.count(), 34), dx = zeros(s.count());
  Twin dgamma = random(s.c, 35), dbeta = random(s.c, 36);
  for (int step = 0; step < 2; ++step) {  // two steps: running statistics accumulate
    c_op->forward(x.cpu.data(), gamma.cpu.data(), beta.cpu.data(), mean.cpu.data(), var.cpu.data(),
                  y.cpu.data(), true);
    g_op->forward(x.gpu.data(), gamma.gpu.data(), beta.gpu.data(), mean.gpu.data(), var.gpu.data(),
                  y.gpu.data(), true);
  }
  EXPECT_LE(err(y), kTol);
  EXPECT_LE(err(mean), kTol);
  EXPECT_LE(err(var), kTol);  // both keep the unbiased variance
  c_op->backward(x.cpu.data(), gamma.cpu.data(), dy.cpu.data(), dx.cpu.data(), dgamma.cpu.data(),
                 dbeta.cpu.data());
  g_op->backward(x.gpu.data(), gamma.gpu.data(), dy.gpu.data(), dx.gpu.data(), dgamma.gpu.data(),
                 dbeta.gpu.data());
  EXPECT_LE(err(dx), kTol);
  EXPECT_LE(err(dgamma), kTol);
  EXPECT_LE(err(dbeta), kTol);
  c_op->forward(x.cpu.data(), gamma.cpu.data(), beta.cpu.data(), mean.cpu.data(), var.cpu.data(),
                y.cpu.data(), false);
  g_op->forward(x.gpu.data(), gamma.gpu.data(), beta.gpu.data(), mean.gpu.data(), var.gpu.data(),
                y.gpu.data(), false);
  EXPECT_LE(err(y), kTol);
}

TEST_F(CudaParity, BatchNormOfOneValuePerChannelKeepsRunningStatsFinite) {
  // N·H·W = 1 (a final batch of one after a dense layer): cuDNN's unbiased variance would divide
  // by zero; both backends must treat the batch variance as 0 and stay finite and equal.
  const Shape s{1, 7, 1, 1};
  const BatchNormDesc d{s, 1e-5f, 0.1f};
  auto c_op = cpu_->make_batchnorm(d);
  auto g_op = gpu_->make_batchnorm(d);
  Twin x = random(s.count(), 41), gamma = twin(random_vec(s.c, 42, 0.5f, 1.5f));
  Twin beta = random(s.c, 43), mean = random(s.c, 44);
  Twin var = twin(random_vec(s.c, 45, 0.5f, 2.0f)), y = zeros(s.count());
  c_op->forward(x.cpu.data(), gamma.cpu.data(), beta.cpu.data(), mean.cpu.data(), var.cpu.data(),
                y.cpu.data(), true);
  g_op->forward(x.gpu.data(), gamma.gpu.data(), beta.gpu.data(), mean.gpu.data(), var.gpu.data(),
                y.gpu.data(), true);
  const std::vector<float> gv = host(*gpu_, var.gpu), gm = host(*gpu_, mean.gpu);
  for (std::size_t i = 0; i < gv.size(); ++i) {
    EXPECT_TRUE(std::isfinite(gv[i]) && std::isfinite(gm[i])) << "channel " << i;
  }
  EXPECT_LE(err(mean), kTol);
  EXPECT_LE(err(var), kTol);
  EXPECT_LE(err(y), kTol);
}

TEST_F(CudaParity, DenseForwardBackward) {
  for (const DenseDesc& d : {DenseDesc{8, 30, 10}, DenseDesc{1, 7, 3}, DenseDesc{33, 64, 17}}) {
    SCOPED_TRACE(std::to_string(d.batch) + "x" + std::to_string(d.inputs) + "->" +
                 std::to_string(d.outputs));
    auto c_op = cpu_->make_dense(d);
    auto g_op = gpu_->make_dense(d);
    const std::size_t xn = std::size_t(d.batch) * d.inputs, yn = std::size_t(d.batch) * d.outputs;
    const std::size_t wn = std::size_t(d.outputs) * d.inputs;
    Twin x = random(xn, 41), w = random(wn, 42), b = random(d.outputs, 43);
    Twin y = zeros(yn), dy = random(yn, 44), dx = zeros(xn);
    Twin dw = random(wn, 45), db = random(d.outputs, 46);
    c_op->forward(x.cpu.data(), w.cpu.data(), b.cpu.data(), y.cpu.data());
    g_op->forward(x.gpu.data(), w.gpu.data(), b.gpu.data(), y.gpu.data());
    EXPECT_LE(err(y), kTol);
    c_op->backward(x.cpu.data(), w.cpu.data(), dy.cpu.data(), dx.cpu.data(), dw.cpu.data(),
                   db.cpu.data());
    g_op->backward(x.gpu.data(), w.gpu.data(), dy.gpu.data(), dx.gpu.data(), dw.gpu.data(),
                   db.gpu.data());
    EXPECT_LE(err(dx), kTol);
    EXPECT_LE(err(dw), kTol);
    EXPECT_LE(err(db), kTol);
  }
}

TEST_F(CudaParity, DropoutMasksAreIdentical) {
  const Shape s{16, 8, 5, 5};
  for (float p : {0.0f, 0.3f, 0.75f}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    auto c_op = cpu_->make_dropout(s, p);
    auto g_op = gpu_->make_dropout(s, p);
    Twin x = random(s.count(), 51), y = zeros(s.count()), dy = random(s.count(), 52);
    Twin dx = zeros(s.count());
    const std::uint64_t seed = 0xDEADBEEF12345ull;
    c_op->forward(x.cpu.data(), y.cpu.data(), true, seed);
    g_op->forward(x.gpu.data(), y.gpu.data(), true, seed);
    const std::vector<float> yc = host(*cpu_, y.cpu), yg = host(*gpu_, y.gpu);
    std::size_t dropped = 0;
    for (std::size_t i = 0; i < yc.size(); ++i) {
      ASSERT_EQ(yc[i] == 0.0f, yg[i] == 0.0f) << "mask differs at element " << i;
      dropped += yc[i] == 0.0f;
    }
    EXPECT_NEAR(double(dropped) / yc.size(), p, 0.05);
    EXPECT_LE(rel_err(yg, yc), 1e-6);
    c_op->backward(dy.cpu.data(), dx.cpu.data());
    g_op->backward(dy.gpu.data(), dx.gpu.data());
    EXPECT_LE(err(dx), 1e-6);
    g_op->forward(x.gpu.data(), y.gpu.data(), false, seed);  // inference: identity
    EXPECT_EQ(host(*gpu_, y.gpu), host(*gpu_, x.gpu));
  }
}

TEST_F(CudaParity, SoftmaxCrossEntropyLabelSmoothing) {
  const int batch = 37, classes = 10;
  cpu_->set_label_smoothing(0.1f);
  gpu_->set_label_smoothing(0.1f);
  auto c_op = cpu_->make_softmax_xent(batch, classes);
  auto g_op = gpu_->make_softmax_xent(batch, classes);
  cpu_->set_label_smoothing(0.0f);
  gpu_->set_label_smoothing(0.0f);
  std::vector<float> logits = random_vec(std::size_t(batch) * classes, 62, -4.0f, 4.0f);
  std::vector<std::int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = (i * 3) % classes;
  Twin l = twin(logits), dl = zeros(logits.size()), stats = twin({0.0f, 0.0f});
  DeviceBuffer<std::int32_t> lab_c(*cpu_, batch), lab_g(*gpu_, batch);
  cpu_->copy_to_device(lab_c.data(), labels.data(), batch * sizeof(std::int32_t));
  gpu_->copy_to_device(lab_g.data(), labels.data(), batch * sizeof(std::int32_t));
  c_op->forward_backward(l.cpu.data(), lab_c.data(), batch, 0.5f, dl.cpu.data(), stats.cpu.data());
  g_op->forward_backward(l.gpu.data(), lab_g.data(), batch, 0.5f, dl.gpu.data(), stats.gpu.data());
  EXPECT_LE(err(dl), kTol);
  const std::vector<float> sc = host(*cpu_, stats.cpu), sg = host(*gpu_, stats.gpu);
  EXPECT_NEAR(sg[0], sc[0], 1e-4 * std::abs(sc[0]));
  EXPECT_EQ(sg[1], sc[1]);
}

TEST_F(CudaParity, SoftmaxCrossEntropy) {
  const int batch = 37, classes = 10;
  auto c_op = cpu_->make_softmax_xent(batch, classes);
  auto g_op = gpu_->make_softmax_xent(batch, classes);
  std::vector<float> logits = random_vec(std::size_t(batch) * classes, 61, -4.0f, 4.0f);
  std::vector<std::int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = (i * 7) % classes;
  Twin l = twin(logits), dl = zeros(logits.size()),
       stats = twin({1.5f, 2.0f, 3.0f});  // accumulates
  DeviceBuffer<std::int32_t> lab_c(*cpu_, batch), lab_g(*gpu_, batch);
  cpu_->copy_to_device(lab_c.data(), labels.data(), batch * sizeof(std::int32_t));
  gpu_->copy_to_device(lab_g.data(), labels.data(), batch * sizeof(std::int32_t));
  for (int n : {batch, 20}) {  // full and partial batch
    c_op->forward_backward(l.cpu.data(), lab_c.data(), n, 0.5f, dl.cpu.data(), stats.cpu.data());
    g_op->forward_backward(l.gpu.data(), lab_g.data(), n, 0.5f, dl.gpu.data(), stats.gpu.data());
    EXPECT_LE(err(dl), kTol);
    const std::vector<float> sc = host(*cpu_, stats.cpu), sg = host(*gpu_, stats.gpu);
    EXPECT_NEAR(sg[0], sc[0], 1e-4 * std::abs(sc[0]));
    EXPECT_EQ(sg[1], sc[1]);
    EXPECT_EQ(sg[2], sc[2]);  // top-5 hits
  }
  // Loss only (dlogits == nullptr) still accumulates the statistics.
  g_op->forward_backward(l.gpu.data(), lab_g.data(), batch, 1.0f, nullptr, stats.gpu.data());
  EXPECT_GT(host(*gpu_, stats.gpu)[0], host(*cpu_, stats.cpu)[0]);
}

TEST_F(CudaParity, OptimizerUpdates) {
  const std::size_t n = 5000;
  for (int variant = 0; variant < 4; ++variant) {
    OptimizerUpdate u;
    u.lr = 0.05f;
    u.weight_decay = variant == 1 ? 0.0f : 1e-3f;
    u.kind = variant == 0   ? OptimizerKind::sgd
             : variant <= 2 ? OptimizerKind::momentum
                            : OptimizerKind::adam;
    u.nesterov = variant == 2;
    SCOPED_TRACE("variant " + std::to_string(variant));
    Twin p = random(n, 71), m = zeros(n), v = zeros(n);
    for (int step = 1; step <= 5; ++step) {
      Twin g = random(n, 72 + step);
      u.step = step;
      cpu_->optimizer_update(u, p.cpu.data(), g.cpu.data(), m.cpu.data(), v.cpu.data(), n);
      if (step % 2 == 0) {  // the variant a ps uses: g receives the new p (Backend's default)
        gpu_->optimizer_update_into_grad(u, p.gpu.data(), g.gpu.data(), m.gpu.data(), v.gpu.data(),
                                         n);
        EXPECT_EQ(host(*gpu_, g.gpu), host(*gpu_, p.gpu)) << "step " << step;
      } else {
        gpu_->optimizer_update(u, p.gpu.data(), g.gpu.data(), m.gpu.data(), v.gpu.data(), n);
      }
    }
    EXPECT_LE(err(p), kTol);
    if (u.kind != OptimizerKind::sgd) EXPECT_LE(err(m), kTol);
    if (u.kind == OptimizerKind::adam) EXPECT_LE(err(v), kTol);
  }
}

const std::vector<std::string> kSmallNet = {"conv filters=4 kernel=3 stride=1 pad=1",
                                            "batchnorm",
                                            "relu",
                                            "maxpool kernel=2 stride=2",
                                            "flatten",
                                            "dense units=16",
                                            "sigmoid",
                                            "dropout rate=0.2",
                                            "dense"};

/// Random images with labels that a small net can learn (label = brightest quadrant).
void make_batch(int n, std::vector<float>& x, std::vector<std::int32_t>& y, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> noise(0.0f, 0.3f);
  x.assign(std::size_t(n) * 8 * 8, 0.0f);
  y.assign(n, 0);
  for (int s = 0; s < n; ++s) {
    y[s] = static_cast<std::int32_t>(gen() % 4);
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j) {
        const int q = (i / 4) * 2 + j / 4;
        x[std::size_t(s) * 64 + i * 8 + j] = noise(gen) + (q == y[s] ? 1.0f : 0.0f);
      }
  }
}

// check_gradient on the device (first non-finite index by atomicMin, read back through a pinned
// slot and an event) guarding the optimizer kernel: the CPU's contract, see gradient_check.hpp.
TEST_F(CudaParity, GradientChecksGuardTheUpdateAndAnswerInOrder) {
  test::expect_gradient_checks_guard_updates(*gpu_);
}

// mark() records events on the stream: the time between two points is the device work queued in
// between (here 20 optimizer passes over 64 Mi floats, well over a millisecond on any GPU).
TEST_F(CudaParity, StopwatchTimesTheQueuedWork) {
  constexpr std::size_t n = std::size_t{64} << 20;
  DeviceBuffer<float> p(*gpu_, n), g(*gpu_, n);
  OptimizerUpdate u;
  u.kind = OptimizerKind::sgd;
  test::expect_stopwatch_times(*gpu_, 1e-3, [&] {
    for (int i = 0; i < 20; ++i)
      (void)gpu_->optimizer_update(u, p.data(), g.data(), nullptr, nullptr, n);
  });
}

TEST_F(CudaParity, ModelGradientsMatchCpu) {
  const int n = 16;
  for (const auto* net : {&kSmallNet, &test::kBranchyNet}) {
    SCOPED_TRACE(net == &kSmallNet ? "sequential net" : "graph net");
    Model mc(*cpu_, *net, Shape{1, 1, 8, 8}, 4, n);
    Model mg(*gpu_, *net, Shape{1, 1, 8, 8}, 4, n);
    mc.initialize(7);
    mg.initialize(7);
    ASSERT_EQ(mc.param_count(), mg.param_count());
    std::vector<float> x;
    std::vector<std::int32_t> y;
    make_batch(n, x, y, 81);
    Twin xs = twin(x), stats = zeros(kStatsFloats);
    DeviceBuffer<std::int32_t> yc(*cpu_, n), yg(*gpu_, n);
    cpu_->copy_to_device(yc.data(), y.data(), n * sizeof(std::int32_t));
    gpu_->copy_to_device(yg.data(), y.data(), n * sizeof(std::int32_t));
    mc.train_step(xs.cpu.data(), yc.data(), n, 1.0f / n, 99, stats.cpu.data());
    mg.train_step(xs.gpu.data(), yg.data(), n, 1.0f / n, 99, stats.gpu.data());
    std::vector<float> gc(mc.param_count()), gg(mg.param_count());
    cpu_->copy_to_host(gc.data(), mc.grads(), gc.size() * sizeof(float));
    gpu_->copy_to_host(gg.data(), mg.grads(), gg.size() * sizeof(float));
    EXPECT_LE(rel_err(gg, gc), 1e-3);  // whole network: errors compound a little across layers
    EXPECT_LE(err(stats), 1e-4);
  }
}

/// Largest relative differences a GPU model may show against its CPU twin.
struct ModelTolerance {
  double grads, state, loss, logits;
};

/// Runs test::run_step on both models (the same weights: both initialized with seed 7) for a full
/// batch and a partial one of kLayoutNet-sized samples, and compares what they produce.
void expect_models_agree(Model& mc, Model& mg, const Shape& sample, int classes, std::uint64_t seed,
                         const ModelTolerance& tol) {
  mc.initialize(7);
  mg.initialize(7);
  ASSERT_EQ(mc.param_count(), mg.param_count());
  for (const int n : {mc.max_batch(), 5}) {
    SCOPED_TRACE("batch " + std::to_string(n));
    const auto x = random_vec(sample.with_n(n).count(), seed + n);
    std::vector<std::int32_t> y(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) y[static_cast<std::size_t>(i)] = (5 * i + 2) % classes;
    const test::StepOutputs c = test::run_step(mc, x, y), g = test::run_step(mg, x, y);
    EXPECT_LE(rel_err(g.grads, c.grads), tol.grads);
    EXPECT_LE(rel_err(g.state, c.state), tol.state);
    EXPECT_NEAR(g.loss[0], c.loss[0], tol.loss * std::abs(c.loss[0]));
    EXPECT_LE(rel_err(g.logits, c.logits), tol.logits);
    if (mg.backend().act_dtype() == DType::bf16)
      for (float v : g.logits) ASSERT_EQ(v, round_to_bf16(v));  // bf16 logits, widened
  }
}

// cuDNN in the NHWC layout (NHWC descriptors, KRSC filters converted per call, persistent
// batchnorm) against the CPU backend in NCHW: the same model, weights and batch (3 channels, so
// the batch itself is converted); a full and a partial batch.
TEST_F(CudaParity, NhwcModelMatchesCpu) {
  const Shape sample{1, 3, 8, 6};
  auto nhwc = make_cuda_backend(0);
  nhwc->set_layout(Layout::nhwc);
  Model mc(*cpu_, test::kLayoutNet, sample, 4, 16);
  Model mg(*nhwc, test::kLayoutNet, sample, 4, 16);
  expect_models_agree(mc, mg, sample, 4, 40, {1e-3, 1e-4, 1e-4, 1e-4});
}

// --precision bf16 natively on cuDNN/cuBLAS (bf16 tensors, fp32 accumulation on tensor cores, bf16
// filter copies, our kernels on bf16) against the CPU backend's bf16 emulation (CpuBf16::emulated,
// on any CPU: it rounds the same tensors and computes in fp32), in both layouts, full and partial
// batch. They differ only in
// summation order and in where a sum is rounded (cuDNN rounds the conv output before the bias add
// and writes the weight gradient in bf16), so the agreement is a few bf16 ulps, not 1e-4.
TEST_F(CudaParity, Bf16ModelMatchesCpu) {
  const Shape sample{1, 3, 8, 6};
  for (const Layout layout : {Layout::nchw, Layout::nhwc}) {
    SCOPED_TRACE(layout_name(layout));
    auto cpu = make_cpu_backend(CpuBf16::emulated);
    auto gpu = make_cuda_backend(0);
    for (Backend* be : {cpu.get(), gpu.get()}) {
      be->set_layout(layout);
      be->set_precision(Precision::bf16);
    }
    Model mc(*cpu, test::kLayoutNet, sample, 4, 16);
    Model mg(*gpu, test::kLayoutNet, sample, 4, 16);
    expect_models_agree(mc, mg, sample, 4, 60, {3e-2, 1e-2, 1e-2, 2e-2});
  }
}

/// test::run_step on a fused model and its unfused twin (both initialized with seed 7; 4 classes)
/// for a batch of max_batch() and one of 5 samples (inputs from seed + n): gradients within
/// `grads`, state, loss, evaluation and logits within `rest` (norm-wise relative).
void expect_fused_matches(Model& fused, Model& plain, const Shape& sample, std::uint32_t seed,
                          double grads, double rest) {
  fused.initialize(7);
  plain.initialize(7);
  for (const int n : {fused.max_batch(), 5}) {
    SCOPED_TRACE("batch " + std::to_string(n));
    const auto x = random_vec(sample.with_n(n).count(), seed + static_cast<std::uint32_t>(n));
    std::vector<std::int32_t> y(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) y[static_cast<std::size_t>(i)] = (5 * i + 2) % 4;
    const test::StepOutputs f = test::run_step(fused, x, y), p = test::run_step(plain, x, y);
    EXPECT_LE(rel_err(f.grads, p.grads), grads);
    EXPECT_LE(rel_err(f.state, p.state), rest);
    EXPECT_LE(rel_err(f.loss, p.loss), rest);
    EXPECT_LE(rel_err(f.eval, p.eval), rest);
    EXPECT_LE(rel_err(f.logits, p.logits), rest);
  }
}

// Fusion on the GPU (--fuse auto, the default) against every layer alone (--fuse off) on the
// same GPU: the ResNet blocks of test::kResidualNet with relus inside the adds (one kernel each
// way), in NHWC batchnorm + relu and batchnorm + add + relu as cuDNN's fused calls
// (CUDNN_BATCHNORM_OPS_BN_ACTIVATION / _BN_ADD_ACTIVATION, where cuDNN offers them for the type)
// and the convolutions' input gradients summed in place (cuDNN's β = 1). Stated
// tolerances (norm-wise relative, test::run_step's outputs): fp32 math 1e-5 (the same arithmetic
// in another order: the fused batchnorm kernel's reductions); bf16 2e-2 for gradients and 1e-2
// for the rest (a fused sum is rounded to bf16 once instead of twice).
TEST_F(CudaParity, FusedResidualNetMatchesUnfused) {
  const Shape sample{1, 3, 8, 8};
  struct Case {
    Layout layout;
    Precision precision;
    double grads, rest;
  };
  for (const Case& c : {Case{Layout::nchw, Precision::fp32, 1e-5, 1e-5},
                        Case{Layout::nhwc, Precision::fp32, 1e-5, 1e-5},
                        Case{Layout::nhwc, Precision::bf16, 2e-2, 1e-2}}) {
    const std::string what =
        std::string(layout_name(c.layout)) + (c.precision == Precision::bf16 ? " bf16" : " fp32");
    SCOPED_TRACE(what);
    std::unique_ptr<Backend> be[2] = {make_cuda_backend(0), make_cuda_backend(0)};
    for (auto& b : be) {
      b->set_layout(c.layout);
      b->set_precision(c.precision);
    }
    be[1]->set_fuse(false);
    Model fused(*be[0], test::kResidualNet, sample, 4, 12);
    Model plain(*be[1], test::kResidualNet, sample, 4, 12);
    EXPECT_EQ(plain.fused_layers(), 0u);
    EXPECT_EQ(plain.in_place_gradient_sums(), 0u);
    // At least the two add → relu pairs; in NHWC, where cuDNN fuses batchnorm epilogues, up to
    // 7: three relus and two add + relu pairs inside batchnorms.
    EXPECT_GE(fused.fused_layers(), 2u);
    EXPECT_LE(fused.fused_layers(), 7u);
    EXPECT_EQ(fused.in_place_gradient_sums(), 2u);
    std::printf("[ fusion   ] %s: %zu layers run inside another, %zu in-place gradient sums\n",
                what.c_str(), fused.fused_layers(), fused.in_place_gradient_sums());
    expect_fused_matches(fused, plain, sample, 70, c.grads, c.rest);
  }
}

// Fusion of conv → relu on the GPU (--fuse auto) against every layer alone (--fuse off): the bias
// add and the relu in one vectorised pass (launch_add_channel_bias with relu_after; a conv without
// bias: the relu kernel in place), the relu's mask applied to dy in the pass that sums the bias
// gradient (launch_channel_sum_relu_mask). Nets: test::kVggNet, and test::kOddConvReluNet, whose
// odd planes, 3 channels, 2-pixel planes and partial batch make 16-byte packs cross channels and
// samples and leave scalar tails. Both runs do the same arithmetic in the same order; the stated
// tolerances (norm-wise relative) are FusedResidualNetMatchesUnfused's, for cuDNN's freedom to
// pick nondeterministic algorithms: fp32 math 1e-5; bf16 2e-2 for gradients, 1e-2 for the rest.
// The fused fp32 models also match the CPU backend in NCHW (an independent reference for the
// kernels' channel indexing, which the unfused bias add shares) within NhwcModelMatchesCpu's
// tolerances.
TEST_F(CudaParity, FusedConvReluNetMatchesUnfused) {
  struct Net {
    const std::vector<std::string>* layers;
    Shape sample;
  };
  struct Case {
    Layout layout;
    Precision precision;
    double grads, rest;
  };
  for (const Net& net :
       {Net{&test::kVggNet, Shape{1, 3, 8, 8}}, Net{&test::kOddConvReluNet, Shape{1, 3, 5, 7}}}) {
    for (const Case& c : {Case{Layout::nchw, Precision::fp32, 1e-5, 1e-5},
                          Case{Layout::nhwc, Precision::fp32, 1e-5, 1e-5},
                          Case{Layout::nchw, Precision::bf16, 2e-2, 1e-2},
                          Case{Layout::nhwc, Precision::bf16, 2e-2, 1e-2}}) {
      const bool f32 = c.precision == Precision::fp32;
      SCOPED_TRACE(std::string(net.layers == &test::kVggNet ? "VGG-style " : "odd shapes ") +
                   layout_name(c.layout) + (f32 ? " fp32" : " bf16"));
      std::unique_ptr<Backend> be[2] = {make_cuda_backend(0), make_cuda_backend(0)};
      for (auto& b : be) {
        b->set_layout(c.layout);
        b->set_precision(c.precision);
      }
      be[1]->set_fuse(false);
      Model fused(*be[0], *net.layers, net.sample, 4, 12);
      Model plain(*be[1], *net.layers, net.sample, 4, 12);
      EXPECT_EQ(plain.fused_layers(), 0u);
      EXPECT_EQ(fused.fused_layers(), 4u);  // every conv → relu pair whose relu is the sole reader
      expect_fused_matches(fused, plain, net.sample, 90, c.grads, c.rest);
      if (f32) {
        Model mc(*cpu_, *net.layers, net.sample, 4, 12);
        expect_models_agree(mc, fused, net.sample, 4, 110, {1e-3, 1e-4, 1e-4, 1e-4});
      }
    }
  }
}

TEST_F(CudaParity, TrainingOnGpuLowersTheLoss) {
  const int n = 32;
  Model model(*gpu_, kSmallNet, Shape{1, 1, 8, 8}, 4, n);
  model.initialize(3);
  DeviceBuffer<float> m(*gpu_, model.param_count()), v(*gpu_, model.param_count());
  DeviceBuffer<float> x(*gpu_, std::size_t(n) * 64), stats(*gpu_, kStatsFloats);
  DeviceBuffer<std::int32_t> y(*gpu_, n);
  OptimizerUpdate u;
  u.kind = OptimizerKind::adam;
  u.lr = 0.01f;
  std::vector<float> hx, s(2);
  std::vector<std::int32_t> hy;
  float first = 0.0f, last = 0.0f;
  for (int step = 1; step <= 60; ++step) {
    make_batch(n, hx, hy, 1000 + step);
    gpu_->copy_to_device(x.data(), hx.data(), hx.size() * sizeof(float));
    gpu_->copy_to_device(y.data(), hy.data(), hy.size() * sizeof(std::int32_t));
    gpu_->fill(stats.data(), 0.0f, kStatsFloats);
    model.train_step(x.data(), y.data(), n, 1.0f / n, step, stats.data());
    u.step = step;
    gpu_->optimizer_update(u, model.params(), model.grads(), m.data(), v.data(),
                           model.param_count());
    gpu_->copy_to_host(s.data(), stats.data(), 2 * sizeof(float));
    ASSERT_TRUE(std::isfinite(s[0])) << "step " << step;
    if (step <= 5) first += s[0] / n / 5;
    if (step > 55) last += s[0] / n / 5;
  }
  EXPECT_LT(last, 0.5f * first) << "mean loss of the first 5 steps " << first << ", last 5 "
                                << last;
  EXPECT_TRUE(gpu_->all_finite(model.params(), model.param_count()));
}

}  // namespace
}  // namespace dtrain
