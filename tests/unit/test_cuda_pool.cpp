// tests/unit/test_cuda_pool.cpp — max pooling on the GPU in NHWC, fp32 and bf16, against a host
// reference computed here on the same (rounded) values: y = the window's maximum over the input
// pixels it covers (padding excluded), dx = dy at each window's first maximal position in
// row-major window order, 0 elsewhere, summed where windows overlap. Windows that do not overlap
// (kernel ≤ stride: VGG's 2×2 stride 2) take dtrain's own backward kernel (pool_kernels.cu) and
// must match exactly — ties (inputs from five integers) routed to the first maximum, trailing rows
// and columns no window covers, gaps and padding zero, channel counts that fill no 16-byte pack;
// overlapping windows stay on cuDNN and match within rounding (inputs all different inside every
// window there: cuDNN's choice among equal maxima is its own). Skips without a GPU (fails with
// DTRAIN_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/act_tensor.hpp"
#include "common/gpu.hpp"
#include "common/parity.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/dnn/bf16.hpp"

namespace dtrain {
namespace {

struct PoolReference {
  std::vector<float> y, dx;
};

/// Max pooling of x (N×H×W×C order) and its backward from dy (N×P×Q×C), in double, the sums of
/// overlapping windows rounded to bf16 at the end when `bf16`.
PoolReference max_pool_nhwc(const PoolDesc& d, const std::vector<float>& x,
                            const std::vector<float>& dy, bool bf16) {
  const Shape in = d.input, out = d.output();
  PoolReference r{std::vector<float>(out.count()), std::vector<float>(in.count(), 0.0f)};
  std::vector<double> dx(in.count(), 0.0);
  const auto at_in = [&](int n, int h, int w, int c) {
    return ((std::size_t(n) * in.h + h) * in.w + w) * in.c + c;
  };
  for (int n = 0; n < out.n; ++n)
    for (int p = 0; p < out.h; ++p)
      for (int q = 0; q < out.w; ++q)
        for (int c = 0; c < out.c; ++c) {
          std::size_t best = 0;
          bool any = false;
          for (int i = 0; i < d.kernel.h; ++i)
            for (int j = 0; j < d.kernel.w; ++j) {
              const int h = p * d.stride.h - d.pad.h + i, w = q * d.stride.w - d.pad.w + j;
              if (h < 0 || h >= in.h || w < 0 || w >= in.w) continue;
              const std::size_t k = at_in(n, h, w, c);
              if (!any || x[k] > x[best]) best = k;  // strictly greater: the first maximum stays
              any = true;
            }
          const std::size_t o = ((std::size_t(n) * out.h + p) * out.w + q) * out.c + c;
          r.y[o] = x[best];
          dx[best] += dy[o];
        }
  for (std::size_t k = 0; k < dx.size(); ++k)
    r.dx[k] = bf16 ? round_to_bf16(static_cast<float>(dx[k])) : static_cast<float>(dx[k]);
  return r;
}

/// n values from {−2, −1, 0, 1, 2}: most windows hold their maximum more than once.
std::vector<float> tied_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-2, 2);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(gen));
  return v;
}

/// n×h×w×c values in NHWC order, ((7·h + 3·w + 5·c + 11·n) mod 16) − 8: integers (exact in
/// bf16), the 9 of any 3×3 window all different (7·dh + 3·dw mod 16, dh, dw < 3, never repeats),
/// so that every window has one maximum whichever library routes the gradient.
std::vector<float> distinct_in_3x3(const Shape& s) {
  std::vector<float> v(s.count());
  std::size_t i = 0;
  for (int n = 0; n < s.n; ++n)
    for (int h = 0; h < s.h; ++h)
      for (int w = 0; w < s.w; ++w)
        for (int c = 0; c < s.c; ++c)
          v[i++] = static_cast<float>((7 * h + 3 * w + 5 * c + 11 * n) % 16 - 8);
  return v;
}

enum class Fill { random, ties, distinct };

struct PoolCase {
  Shape in;
  Hw kernel, stride, pad;
  Fill fill;
};

class CudaMaxPoolNhwc : public ::testing::TestWithParam<Precision> {};

TEST_P(CudaMaxPoolNhwc, MatchesTheHostReference) {
  DT_SKIP_WITHOUT_CUDA();
  const Precision precision = GetParam();
  const bool bf16 = precision == Precision::bf16;
  const DType act = bf16 ? DType::bf16 : DType::f32;
  auto be = make_cuda_backend(0);
  be->set_layout(Layout::nhwc);
  be->set_precision(precision);
  const PoolCase cases[] = {
      {{2, 16, 8, 8}, 2, 2, 0, Fill::random},   // every pixel in one window, 16-byte packs
      {{2, 16, 8, 8}, 2, 2, 0, Fill::ties},     // ties: the first maximum gets dy
      {{3, 12, 9, 7}, 2, 2, 0, Fill::ties},     // last row and column uncovered; bf16 unpacked
      {{2, 8, 10, 10}, 2, 3, 1, Fill::random},  // gaps between windows, padding
      {{2, 4, 9, 9}, Hw{1, 3}, Hw{1, 3}, 0, Fill::ties},  // rectangular, fp32 a pack a pixel
      // Overlapping windows: cuDNN's backward, whose choice among equal maxima is its own.
      {{2, 16, 9, 9}, 3, 2, 1, Fill::distinct},
  };

  for (const PoolCase& pc : cases) {
    const PoolDesc d{pc.in, PoolKind::max, pc.kernel, pc.stride, pc.pad};
    const bool overlap = pc.kernel.h > pc.stride.h || pc.kernel.w > pc.stride.w;
    SCOPED_TRACE(pc.in.str() + " k" + pc.kernel.str() + " s" + pc.stride.str() + " p" +
                 pc.pad.str() + (pc.fill == Fill::ties ? " ties" : ""));
    const Shape out = d.output();
    std::vector<float> x = pc.fill == Fill::ties ? tied_values(pc.in.count(), 1)
                           : pc.fill == Fill::distinct
                               ? distinct_in_3x3(pc.in)
                               : testing::random_vec(pc.in.count(), 1, -4.0f, 4.0f);
    std::vector<float> dy = testing::random_vec(out.count(), 2);
    if (bf16) {
      for (float& v : x) v = round_to_bf16(v);
      for (float& v : dy) v = round_to_bf16(v);
    }
    const PoolReference want = max_pool_nhwc(d, x, dy, bf16);
    auto op = be->make_pool(d);
    testing::ActTensor tx(*be, act, x), ty(*be, act, testing::random_vec(out.count(), 3));
    testing::ActTensor tdy(*be, act, dy), tdx(*be, act, testing::random_vec(pc.in.count(), 4));
    op->forward(tx.data(), ty.data(), true);
    op->backward(tx.data(), ty.data(), tdy.data(), tdx.data());
    EXPECT_EQ(ty.host(), want.y);
    if (overlap) EXPECT_LE(testing::rel_err(tdx.host(), want.dx), bf16 ? 1e-2 : 1e-6);
    else EXPECT_EQ(tdx.host(), want.dx);
  }
}

INSTANTIATE_TEST_SUITE_P(CudaPool, CudaMaxPoolNhwc,
                         ::testing::Values(Precision::fp32, Precision::bf16), [](const auto& info) {
                           return std::string(info.param == Precision::bf16 ? "Bf16" : "Fp32");
                         });

}  // namespace
}  // namespace dtrain
