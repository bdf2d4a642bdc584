// tests/unit/test_cuda_layerwise.cpp — LARS and LAMB on the GPU (CudaBackend::layerwise_update,
// the multi-tensor kernels of src/dnn/cuda/layerwise.cu) against the CPU backend's
// layerwise_update on the same tensors: odd sizes below, at and across the 8,192-float chunk,
// biases and batch-norm parameters excluded from adaptation by param_segments() (as the
// optimizer does), a zero-weight and a zero-gradient tensor (trust 1), momentum and Nesterov,
// LAMB's bias correction over several steps. Tolerance: per tensor ‖gpu − cpu‖/‖cpu‖ ≤ 1e-5 in
// fp32 (the elementwise arithmetic is the CPU's; only the double norms are summed in another
// order). Also: a non-finite gradient after check_gradient() changes nothing, runs are
// bit-identical (what keeps sync replicas equal), bad arguments throw. The chunk-table test runs
// in every CUDA build; the others skip without a GPU (fail with DTRAIN_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "common/tensor_table.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/optim/optimizer.hpp"
#ifdef DTRAIN_HAVE_CUDA
#include "dnn/cuda/layerwise.hpp"
#endif

namespace dtrain {
namespace {

constexpr double kTol = 1e-5;

// 8,192 floats a chunk: 20011 spans three, 8192 is exactly one, 8193 one and a single float.
std::vector<TensorInfo> tensors() {
  return test::tensor_table({{"0.conv.weight", 459},
                             {"0.conv.bias", 17},
                             {"1.batchnorm.gamma", 17},
                             {"1.batchnorm.beta", 17},
                             {"2.conv.weight", 20011},
                             {"2.conv.bias", 1},
                             {"3.dense.weight", 8192},  // zero weights: trust 1
                             {"3.dense.bias", 10},
                             {"4.dense.weight", 8193},  // zero gradient: trust 1
                             {"4.dense.bias", 3}});
}
const std::size_t kN = [] {
  std::size_t n = 0;
  for (const TensorInfo& t : tensors()) n += t.count;
  return n;
}();

std::vector<float> uniform(std::size_t n, std::uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

/// ‖a − b‖/‖b‖ over [begin, end) (‖a − b‖ where b is zero there).
double rel_err(const std::vector<float>& a, const std::vector<float>& b, std::size_t begin,
               std::size_t end) {
  double diff = 0.0, ref = 0.0;
  for (std::size_t i = begin; i < end; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return ref > 0.0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

/// p, g, m, v of kN floats on one backend.
struct State {
  DeviceBuffer<float> p, g, m, v;
  State(Backend& be, const std::vector<float>& p0) : p(be, kN), g(be, kN), m(be, kN), v(be, kN) {
    be.copy_to_device(p.data(), p0.data(), kN * sizeof(float));
  }
};

std::vector<float> host(Backend& be, const DeviceBuffer<float>& b) {
  be.synchronize();
  std::vector<float> out(b.size());
  be.copy_to_host(out.data(), b.data(), b.bytes());
  return out;
}

class CudaLayerwise : public ::testing::Test {
 protected:
  void SetUp() override {
    DT_SKIP_WITHOUT_CUDA();
    cpu_ = make_cpu_backend();
    gpu_ = make_cuda_backend(0);
  }

  /// Weights with the zero tensor 3.dense.weight.
  std::vector<float> initial() const {
    std::vector<float> p = uniform(kN, 11, 0.5f);
    const TensorInfo& zero = tensors()[6];
    for (std::size_t i = zero.offset; i < zero.offset + zero.count; ++i) p[i] = 0.0f;
    return p;
  }
  /// Step `step`'s gradient, zero on 4.dense.weight.
  std::vector<float> gradient(int step) const {
    std::vector<float> g = uniform(kN, 100 + static_cast<std::uint32_t>(step), 0.05f);
    const TensorInfo& zero = tensors()[8];
    for (std::size_t i = zero.offset; i < zero.offset + zero.count; ++i) g[i] = 0.0f;
    return g;
  }

  /// `steps` updates u (u.step = 1, 2, …) on both backends from the same start; then p, m (and v
  /// for LAMB) compared tensor by tensor.
  void expect_parity(OptimizerUpdate u, int steps) {
    const std::vector<ParamSegment> segs = param_segments(tensors(), kN);
    State c(*cpu_, initial()), d(*gpu_, initial());
    for (int s = 1; s <= steps; ++s) {
      const std::vector<float> g = gradient(s);
      cpu_->copy_to_device(c.g.data(), g.data(), kN * sizeof(float));
      gpu_->copy_to_device(d.g.data(), g.data(), kN * sizeof(float));
      u.step = s;
      EXPECT_TRUE(cpu_->layerwise_update(u, segs, c.p.data(), c.g.data(), c.m.data(), c.v.data()));
      EXPECT_TRUE(gpu_->layerwise_update(u, segs, d.p.data(), d.g.data(), d.m.data(), d.v.data()));
    }
    const bool lamb = u.kind == OptimizerKind::lamb;
    const std::vector<float> pc = host(*cpu_, c.p), pd = host(*gpu_, d.p);
    const std::vector<float> mc = host(*cpu_, c.m), md = host(*gpu_, d.m);
    const std::vector<float> vc = host(*cpu_, c.v), vd = host(*gpu_, d.v);
    const std::vector<float> p0 = initial();
    for (const TensorInfo& t : tensors()) {
      const std::size_t b = t.offset, e = t.offset + t.count;
      EXPECT_LE(rel_err(pd, pc, b, e), kTol) << t.name << ": p";
      EXPECT_LE(rel_err(md, mc, b, e), kTol) << t.name << ": m";
      if (lamb) EXPECT_LE(rel_err(vd, vc, b, e), kTol) << t.name << ": v";
      EXPECT_GT(rel_err(pc, p0, b, e), 0.0) << t.name << ": the CPU step moved nothing";
    }
  }

  std::unique_ptr<Backend> cpu_, gpu_;
};

OptimizerUpdate lars(bool nesterov) {
  OptimizerUpdate u;
  u.kind = OptimizerKind::lars;
  u.lr = 0.5f;
  u.momentum = 0.9f;
  u.nesterov = nesterov;
  u.weight_decay = 5e-4f;
  u.lars_eta = 0.02f;
  u.lars_epsilon = 1e-9f;
  return u;
}

OptimizerUpdate lamb() {
  OptimizerUpdate u;
  u.kind = OptimizerKind::lamb;
  u.lr = 0.01f;
  u.beta1 = 0.9f;
  u.beta2 = 0.999f;
  u.epsilon = 1e-6f;
  u.weight_decay = 0.01f;
  return u;
}

TEST_F(CudaLayerwise, LarsMatchesCpu) { expect_parity(lars(false), 4); }

TEST_F(CudaLayerwise, LarsNesterovMatchesCpu) { expect_parity(lars(true), 4); }

TEST_F(CudaLayerwise, LambMatchesCpu) { expect_parity(lamb(), 4); }

// Two replicas given the same state and gradients end with the same bits (the reduction order is
// fixed by the segments), also across a change of the segment list (the tables are rebuilt).
TEST_F(CudaLayerwise, RunsAreBitIdentical) {
  const std::vector<ParamSegment> segs = param_segments(tensors(), kN);
  const std::vector<ParamSegment> one = {{0, kN, true}};
  for (const OptimizerUpdate& base : {lars(true), lamb()}) {
    State a(*gpu_, initial()), b(*gpu_, initial());
    OptimizerUpdate u = base;
    for (int s = 1; s <= 3; ++s) {
      const std::vector<float> g = gradient(s);
      u.step = s;
      for (State* x : {&a, &b}) {
        gpu_->copy_to_device(x->g.data(), g.data(), kN * sizeof(float));
        (void)gpu_->layerwise_update(u, s == 2 ? one : segs, x->p.data(), x->g.data(), x->m.data(),
                                     x->v.data());
      }
    }
    EXPECT_EQ(host(*gpu_, a.p), host(*gpu_, b.p));
    EXPECT_EQ(host(*gpu_, a.m), host(*gpu_, b.m));
    EXPECT_NE(host(*gpu_, a.p), initial());
  }
}

// check_gradient() guards the step on the device: a NaN leaves p, m and v as they were (the GPU
// returns true without waiting; the answer names the index). Without a check a non-finite
// gradient is reported by the return value, as on the CPU.
TEST_F(CudaLayerwise, NonFiniteGradientSkipsTheStep) {
  const std::vector<ParamSegment> segs = param_segments(tensors(), kN);
  const std::size_t bad = tensors()[4].offset + 9000;  // in the second chunk of 2.conv.weight
  for (const OptimizerUpdate& u : {lars(false), lamb()}) {
    const bool is_lamb = u.kind == OptimizerKind::lamb;
    State d(*gpu_, initial());
    std::vector<float> g = gradient(1);
    g[bad] = std::numeric_limits<float>::quiet_NaN();
    gpu_->copy_to_device(d.g.data(), g.data(), kN * sizeof(float));
    gpu_->check_gradient(d.g.data(), kN);
    EXPECT_TRUE(gpu_->layerwise_update(u, segs, d.p.data(), d.g.data(), d.m.data(), d.v.data()));
    EXPECT_EQ(gpu_->take_gradient_check(), std::optional<std::size_t>(bad));
    EXPECT_EQ(host(*gpu_, d.p), initial()) << (is_lamb ? "lamb" : "lars");
    EXPECT_EQ(host(*gpu_, d.m), std::vector<float>(kN, 0.0f));
    EXPECT_EQ(host(*gpu_, d.v), std::vector<float>(kN, 0.0f));
    // A finite gradient's check lets the next step through.
    const std::vector<float> g2 = gradient(2);
    gpu_->copy_to_device(d.g.data(), g2.data(), kN * sizeof(float));
    gpu_->check_gradient(d.g.data(), kN);
    EXPECT_TRUE(gpu_->layerwise_update(u, segs, d.p.data(), d.g.data(), d.m.data(), d.v.data()));
    EXPECT_EQ(gpu_->take_gradient_check(), std::nullopt);
    EXPECT_NE(host(*gpu_, d.p), initial());
  }
  // A backend that never checked: the update reports the Inf itself (and is applied, as
  // optimizer_update; once a check came, the latest check guards every update instead).
  auto fresh = make_cuda_backend(0);
  State d(*fresh, initial());
  std::vector<float> g = gradient(1);
  g[bad] = std::numeric_limits<float>::infinity();
  fresh->copy_to_device(d.g.data(), g.data(), kN * sizeof(float));
  EXPECT_FALSE(
      fresh->layerwise_update(lars(false), segs, d.p.data(), d.g.data(), d.m.data(), d.v.data()));
  const std::vector<float> g2 = gradient(2);
  fresh->copy_to_device(d.g.data(), g2.data(), kN * sizeof(float));
  EXPECT_TRUE(
      fresh->layerwise_update(lars(false), segs, d.p.data(), d.g.data(), d.m.data(), d.v.data()));
}

TEST_F(CudaLayerwise, RejectsBadArguments) {
  State d(*gpu_, initial());
  const std::vector<ParamSegment> segs = param_segments(tensors(), kN);
  auto update = [&](const OptimizerUpdate& u, const std::vector<ParamSegment>& s, float* m,
                    float* v) { (void)gpu_->layerwise_update(u, s, d.p.data(), d.g.data(), m, v); };
  OptimizerUpdate sgd;
  sgd.kind = OptimizerKind::sgd;
  EXPECT_THROW(update(sgd, segs, d.m.data(), d.v.data()), InputError);
  EXPECT_THROW(update(lars(false), {}, d.m.data(), d.v.data()), InputError);
  EXPECT_THROW(update(lars(false), {{0, 5, true}, {6, kN, true}}, d.m.data(), d.v.data()),
               InputError);  // a gap
  OptimizerUpdate step0 = lamb();
  step0.step = 0;
  EXPECT_THROW(update(step0, segs, d.m.data(), d.v.data()), InputError);
  EXPECT_THROW(update(lars(false), segs, nullptr, nullptr), Error);
  EXPECT_THROW(update(lamb(), segs, d.m.data(), nullptr), Error);
  EXPECT_EQ(host(*gpu_, d.p), initial());  // nothing was applied
}

#ifdef DTRAIN_HAVE_CUDA
// The chunk table (host code; no GPU needed): chunks of at most kLayerwiseChunk floats cover
// every tensor in order, none crosses a tensor boundary, and each span points at its own.
TEST(CudaLayerwiseTable, ChunksCoverEachTensorAndNeverCrossOne) {
  using cuda::kLayerwiseChunk;
  const std::vector<cuda::LayerwiseTensor> t = {
      {0, 1, true},
      {1, 1 + kLayerwiseChunk, false},
      {1 + kLayerwiseChunk, 3 * kLayerwiseChunk + 5, true}};
  const cuda::LayerwiseTables tab = cuda::layerwise_tables(t);
  ASSERT_EQ(tab.spans.size(), 3u);
  EXPECT_EQ(tab.spans[0].chunks, 1);
  EXPECT_EQ(tab.spans[1].chunks, 1);
  EXPECT_EQ(tab.spans[2].chunks, 3);  // 2·chunk + 4 floats
  EXPECT_EQ(tab.spans[1].adapt, 0);
  EXPECT_EQ(tab.spans[2].adapt, 1);
  ASSERT_EQ(tab.chunks.size(), 5u);
  std::size_t at = 0;
  for (std::size_t k = 0; k < t.size(); ++k) {
    const cuda::LayerwiseSpan& s = tab.spans[k];
    for (int c = s.first_chunk; c < s.first_chunk + s.chunks; ++c) {
      const cuda::LayerwiseChunk& ch = tab.chunks[static_cast<std::size_t>(c)];
      EXPECT_EQ(ch.begin, at) << "chunk " << c;
      EXPECT_EQ(ch.tensor, static_cast<int>(k));
      EXPECT_GT(ch.end, ch.begin);
      EXPECT_LE(ch.end - ch.begin, kLayerwiseChunk);
      EXPECT_LE(ch.end, t[k].end);
      at = ch.end;
    }
    EXPECT_EQ(at, t[k].end) << "tensor " << k;
  }
}
#endif

}  // namespace
}  // namespace dtrain
