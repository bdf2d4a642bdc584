// tests/unit/test_weight_decay.cpp — --no-weight-decay-on: which flat ranges are excluded (whole
// model and a ps shard cutting through tensors), and Optimizer::apply with exclusions equals the
// plain update with decay on the other floats and without it on the excluded ones, bit for bit —
// also applied range by range (a ps's chunks).
#include <gtest/gtest.h>

#include <algorithm>

#include "dtrain/core/error.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "common/tensor_table.hpp"

namespace dtrain {
namespace {

std::vector<TensorInfo> tensors() {
  // offsets: conv.weight 0..10, conv.bias 10..12, bn.gamma 12..14, bn.beta 14..16,
  // dense.weight 16..26, dense.bias 26..28
  return test::tensor_table({{"0.conv.weight", 10},
                             {"0.conv.bias", 2},
                             {"1.batchnorm.gamma", 2},
                             {"1.batchnorm.beta", 2},
                             {"2.dense.weight", 10},
                             {"2.dense.bias", 2}});
}

Config with(const std::string& kinds, const std::string& optimizer = "momentum") {
  Config c;
  c.no_weight_decay_on = kinds;
  c.optimizer = parse_enum<OptimizerKind>(optimizer, "optimizer");
  c.weight_decay = 0.05f;
  c.lr = 0.1f;
  return c;
}

using R = std::vector<FloatRange>;

TEST(WeightDecay, ExcludedRanges) {
  EXPECT_EQ(no_decay_ranges(with(""), tensors(), 0, 28), R{});
  EXPECT_EQ(no_decay_ranges(with("bias"), tensors(), 0, 28), (R{{10, 12}, {26, 28}}));
  EXPECT_EQ(no_decay_ranges(with("bn"), tensors(), 0, 28), (R{{12, 16}}));
  EXPECT_EQ(no_decay_ranges(with("bias,bn"), tensors(), 0, 28), (R{{10, 16}, {26, 28}}));
  // A ps shard [11, 27): clipped and shifted to the shard's own indices.
  EXPECT_EQ(no_decay_ranges(with("bias,bn"), tensors(), 11, 27), (R{{0, 5}, {15, 16}}));
  EXPECT_EQ(no_decay_ranges(with("bias,bn"), tensors(), 16, 26), R{});
  EXPECT_THROW(no_decay_ranges(with("bias,weights"), tensors(), 0, 28), InputError);
}

TEST(WeightDecay, ApplySkipsDecayOnExcludedRangesOnly) {
  auto be = make_cpu_backend();
  const std::size_t n = 28;
  std::vector<float> p0(n), g(n);
  for (std::size_t i = 0; i < n; ++i) {
    p0[i] = 0.5f + 0.1f * static_cast<float>(i);
    g[i] = 0.3f - 0.02f * static_cast<float>(i);
  }
  for (const std::string opt : {"sgd", "momentum", "adam"}) {
    SCOPED_TRACE(opt);
    // Reference: one optimizer with decay everywhere, one without; pick per float.
    Config decayed = with("", opt), none = with("", opt);
    none.weight_decay = 0.0f;
    Optimizer a(decayed, *be, n, 10), b(none, *be, n, 10);
    Optimizer mixed(with("bias,bn", opt), *be, n, 10,
                    no_decay_ranges(with("bias,bn"), tensors(), 0, n));
    // A ps holding the shard [11, 27) with its own ranges.
    Optimizer shard(with("bias,bn", opt), *be, 16, 10,
                    no_decay_ranges(with("bias,bn"), tensors(), 11, 27));
    // The same, updated chunk by chunk as a ps pipelines a push (chunks of 5 cut through the
    // excluded ranges; the last one partial).
    Optimizer chunked(with("bias,bn", opt), *be, n, 10,
                      no_decay_ranges(with("bias,bn"), tensors(), 0, n));
    // The same as an async ps applies it: each chunk's gradient in a buffer of its own, which then
    // holds the chunk's new parameters (the reply).
    Optimizer replied(with("bias,bn", opt), *be, n, 10,
                      no_decay_ranges(with("bias,bn"), tensors(), 0, n));
    std::vector<float> pa = p0, pb = p0, pm = p0, pc = p0, pr = p0,
                       ps(p0.begin() + 11, p0.begin() + 27);
    for (std::int64_t step = 0; step < 3; ++step) {
      a.apply(pa.data(), g.data(), step);
      b.apply(pb.data(), g.data(), step);
      mixed.apply(pm.data(), g.data(), step);
      shard.apply(ps.data(), g.data() + 11, step);
      for (std::size_t at = 0; at < n; at += 5)
        chunked.apply(pc.data(), g.data() + at, step, at, std::min(n, at + 5));
      for (std::size_t at = 0; at < n; at += 5) {
        const std::size_t end = std::min(n, at + 5);
        std::vector<float> slot(g.begin() + static_cast<std::ptrdiff_t>(at),
                                g.begin() + static_cast<std::ptrdiff_t>(end));
        replied.apply_into_grads(pr.data(), slot.data(), step, at, end);
        EXPECT_EQ(slot, std::vector<float>(pr.begin() + static_cast<std::ptrdiff_t>(at),
                                           pr.begin() + static_cast<std::ptrdiff_t>(end)))
            << "the slot holds the chunk's new parameters, step " << step << " chunk at " << at;
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      const bool excluded = (i >= 10 && i < 16) || i >= 26;
      EXPECT_EQ(pm[i], excluded ? pb[i] : pa[i]) << "float " << i;
      EXPECT_EQ(pc[i], pm[i]) << "chunked float " << i;
      EXPECT_EQ(pr[i], pm[i]) << "replied float " << i;
      if (i >= 11 && i < 27) EXPECT_EQ(ps[i - 11], pm[i]) << "shard float " << i;
    }
    EXPECT_THROW(chunked.apply(pc.data(), g.data() + 20, 3, 20, n + 1), Error);
    std::vector<float> slot(8);
    EXPECT_THROW(replied.apply_into_grads(pr.data(), slot.data(), 3, 20, n + 1), Error);
    EXPECT_NE(pa[11], pb[11]);  // the decay matters at all
  }
}

}  // namespace
}  // namespace dtrain
