// tests/unit/test_conv_graph_rule.cpp — which engines of cuDNN's graph-API heuristics a GPU
// convolution may run (src/dnn/cuda/conv_engine_rule.hpp): the rule is free of cuDNN, so it is
// checked here on every machine; the plans themselves run in test_cuda_conv_graph.cpp on a GPU.
#include <gtest/gtest.h>

#include <string>

#include "dnn/cuda/conv_engine_rule.hpp"

namespace dtrain::cuda {
namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;

EnginePolicy policy(bool fp32_data, bool allow_tf32, bool deterministic, bool strict = true) {
  return EnginePolicy{fp32_data, allow_tf32, deterministic, strict, 64 * kMiB};
}

TEST(ConvEngineRule, TensorCoresOnFp32DataOnlyWithTf32) {
  EngineNotes tc;
  tc.tensor_core = true;
  EXPECT_EQ(engine_rejection(tc, policy(true, false, false)), "tensor cores on fp32 data");
  EXPECT_EQ(engine_rejection(tc, policy(true, true, false)), "");
  EXPECT_EQ(engine_rejection(tc, policy(false, false, false)), "");            // bf16 data: always
  EXPECT_EQ(engine_rejection(EngineNotes{}, policy(true, false, false)), "");  // FMA
}

TEST(ConvEngineRule, NeverDownConvertedInputs) {
  EngineNotes e;
  e.down_convert = true;
  for (bool fp32 : {true, false})
    for (bool tf32 : {true, false})
      EXPECT_EQ(engine_rejection(e, policy(fp32, tf32, false)), "down-converts its inputs");
}

TEST(ConvEngineRule, DeterministicFirstThenAnyThatFits) {
  EngineNotes e;
  e.nondeterministic = true;
  EXPECT_EQ(engine_rejection(e, policy(true, true, true)), "non-deterministic");
  EXPECT_EQ(engine_rejection(e, policy(true, true, true, /*strict=*/false)), "");
  EXPECT_EQ(engine_rejection(e, policy(true, true, false)), "");  // PyTorch's default
}

TEST(ConvEngineRule, WorkspaceLimitIsInclusive) {
  EngineNotes e;
  e.workspace_bytes = 64 * kMiB;
  EXPECT_EQ(engine_rejection(e, policy(false, true, false)), "");
  e.workspace_bytes = 64 * kMiB + 1;
  EXPECT_EQ(engine_rejection(e, policy(false, true, false)),
            "needs 65 MiB of workspace (limit 64 MiB)");  // rounded up
  e.workspace_bytes = 300 * kMiB;
  EXPECT_EQ(engine_rejection(e, policy(false, true, false)),
            "needs 300 MiB of workspace (limit 64 MiB)");
}

}  // namespace
}  // namespace dtrain::cuda
