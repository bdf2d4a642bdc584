// tests/unit/test_pipeline_plan.cpp — the pipeline stage planner (model/pipeline_plan.hpp): exact
// balanced cuts on closed-form costs, the job's stage= cuts and their errors, what a stage
// receives across a residual cut, activations in flight under GPipe and 1F1B, the bubble, and the
// layer costs a Model reports.
#include <gtest/gtest.h>

#include "common/nets.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/model/pipeline_plan.hpp"

namespace dtrain {
namespace {

/// A chain of layers with the given forward flops, each reading the previous one's output.
std::vector<LayerInfo> chain(const std::vector<double>& flops) {
  std::vector<LayerInfo> v;
  for (std::size_t i = 0; i < flops.size(); ++i) {
    LayerInfo l;
    l.type = "conv";
    l.inputs = {static_cast<int>(i)};
    l.output = Shape{1, 2, 3, 4};
    l.params = 10 * (i + 1);
    l.forward_flops = flops[i];
    v.push_back(l);
  }
  return v;
}

std::vector<std::size_t> firsts(const PipelinePlan& p) {
  std::vector<std::size_t> f;
  for (const auto& s : p.stage) f.push_back(s.first);
  return f;
}

TEST(PipelinePlan, BalancedCutMinimisesTheLargestStage) {
  // 1..6 into 3 stages: [1,2,3 | 4,5 | 6] has the least bottleneck (9); every other cut more.
  const auto layers = chain({1, 2, 3, 4, 5, 6});
  const PipelinePlan p = plan_pipeline(layers, 3, 4, PipelineSchedule::one_f_one_b);
  EXPECT_EQ(firsts(p), (std::vector<std::size_t>{0, 3, 5}));
  EXPECT_EQ(p.stage[1].last, 4u);
  EXPECT_DOUBLE_EQ(p.stage[1].flops, 3.0 * 9);  // forward + backward
  EXPECT_EQ(p.stage[0].params, 10u + 20u + 30u);
  EXPECT_FALSE(p.from_job);
  // One stage per layer, and one stage for all.
  EXPECT_EQ(plan_pipeline(layers, 6, 1, PipelineSchedule::gpipe).stage.size(), 6u);
  EXPECT_EQ(plan_pipeline(layers, 1, 1, PipelineSchedule::gpipe).stage[0].last, 5u);
  // A heavy last layer gets a stage of its own.
  EXPECT_EQ(firsts(plan_pipeline(chain({2, 2, 2, 2, 8}), 2, 2, PipelineSchedule::gpipe)),
            (std::vector<std::size_t>{0, 4}));
}

TEST(PipelinePlan, MeasuredTimesOverrideFlops) {
  // By flops the heavy first layer stands alone; measured, the last layer is the slow one.
  const auto layers = chain({8, 2, 2, 2, 2});
  EXPECT_EQ(firsts(plan_pipeline(layers, 2, 2, PipelineSchedule::gpipe)),
            (std::vector<std::size_t>{0, 1}));
  const PipelinePlan t =
      plan_pipeline(layers, 2, 2, PipelineSchedule::gpipe, {1.0, 1.0, 1.0, 1.0, 5.0});
  EXPECT_TRUE(t.by_time);
  EXPECT_EQ(firsts(t), (std::vector<std::size_t>{0, 4}));
  EXPECT_DOUBLE_EQ(t.stage[0].measured_ms, 4.0);
  EXPECT_DOUBLE_EQ(t.stage[1].measured_ms, 5.0);
  const std::string table = describe_pipeline(t, layers, 8, 4);
  EXPECT_NE(table.find("balanced by measured time"), std::string::npos) << table;
  EXPECT_NE(table.find("per stage (--pipeline-profile): 4.00 5.00"), std::string::npos) << table;
  // A profile of another model, and one together with the job's stage= keys.
  EXPECT_THROW(plan_pipeline(layers, 2, 2, PipelineSchedule::gpipe, {1.0, 2.0}), InputError);
  auto keyed = layers;
  keyed[3].stage = 1;
  EXPECT_THROW(plan_pipeline(keyed, 2, 2, PipelineSchedule::gpipe, {1, 1, 1, 1, 1}), InputError);
}

TEST(PipelinePlan, InFlightMicroBatchesAndBubble) {
  const auto layers = chain({1, 1, 1, 1, 1, 1, 1, 1});
  const PipelinePlan f = plan_pipeline(layers, 4, 8, PipelineSchedule::one_f_one_b);
  const PipelinePlan g = plan_pipeline(layers, 4, 8, PipelineSchedule::gpipe);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(f.stage[static_cast<std::size_t>(s)].in_flight, 4 - s);  // 1F1B: P − s
    EXPECT_EQ(g.stage[static_cast<std::size_t>(s)].in_flight, 8);      // GPipe: all M
  }
  EXPECT_DOUBLE_EQ(f.bubble, 3.0 / 11.0);
  EXPECT_EQ(plan_pipeline(layers, 4, 2, PipelineSchedule::one_f_one_b).stage[0].in_flight, 2);
  const std::string table = describe_pipeline(f, layers, 64, 4);
  EXPECT_NE(table.find("4 stages x 8 micro-batches of 8 samples, 1f1b"), std::string::npos)
      << table;
  EXPECT_NE(table.find("bubble (P-1)/(M+P-1) = 0.273"), std::string::npos) << table;
}

TEST(PipelinePlan, ACutThroughAResidualBlockCarriesBothPaths) {
  // conv → relu (r) → conv → add(conv, r) → dense, cut before the add: the second stage receives
  // the conv's output and the shortcut r.
  auto layers = chain({1, 1, 1, 1, 1});
  layers[1].name = "r";
  layers[3].inputs = {3, 2};
  layers[3].stage = 1;
  const PipelinePlan p = plan_pipeline(layers, 2, 2, PipelineSchedule::one_f_one_b);
  EXPECT_TRUE(p.from_job);
  EXPECT_EQ(firsts(p), (std::vector<std::size_t>{0, 3}));
  EXPECT_EQ(p.stage[1].receives, (std::vector<int>{2, 3}));  // in tensor order
  EXPECT_EQ(p.stage[1].receive_elements, 2 * Shape({1, 2, 3, 4}).count());
  EXPECT_EQ(p.stage[0].receives, (std::vector<int>{0}));  // the data
  EXPECT_NE(describe_pipeline(p, layers, 8, 4).find("r,#3"), std::string::npos);
  // Three stages, cut before the second conv too: r passes through the middle stage, which
  // receives and sends it without reading it (Model::received_tensors() agrees).
  layers[2].stage = 1;
  layers[3].stage = 2;
  const PipelinePlan q = plan_pipeline(layers, 3, 2, PipelineSchedule::one_f_one_b);
  EXPECT_EQ(q.stage[1].receives, (std::vector<int>{2}));
  EXPECT_EQ(q.stage[2].receives, (std::vector<int>{2, 3}));
  // Only the first stage reads the data.
  layers[3].inputs = {3, 0};
  EXPECT_THROW(plan_pipeline(layers, 3, 2, PipelineSchedule::one_f_one_b), InputError);
}

TEST(PipelinePlan, BalancedCutKeepsTheLayersReadingDataInTheFirstStage) {
  // By flops alone the heavy first layer would stand alone ([8 | 1 1 1 1]); layer #3 also reads
  // the data, which only the first stage reads: the planner cuts after it, not a cut it refuses.
  auto layers = chain({8, 1, 1, 1, 1});
  layers[2].inputs = {2, 0};
  const PipelinePlan p = plan_pipeline(layers, 2, 1, PipelineSchedule::gpipe);
  EXPECT_EQ(firsts(p), (std::vector<std::size_t>{0, 3}));
  EXPECT_EQ(p.stage[0].receives, (std::vector<int>{0}));
  EXPECT_EQ(firsts(plan_pipeline(layers, 3, 1, PipelineSchedule::gpipe)),
            (std::vector<std::size_t>{0, 3, 4}));
  // By measured time too.
  EXPECT_EQ(firsts(plan_pipeline(layers, 2, 1, PipelineSchedule::gpipe, {5, 1, 1, 1, 1})),
            (std::vector<std::size_t>{0, 3}));
  // No cut leaves the data to the first stage and a layer to every other one.
  try {
    plan_pipeline(layers, 4, 1, PipelineSchedule::gpipe);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--pipeline-stages 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer #3"), std::string::npos) << e.what();
  }
}

TEST(PipelinePlan, BadCutsNameWhatIsWrong) {
  auto layers = chain({1, 1, 1, 1});
  EXPECT_THROW(plan_pipeline(layers, 5, 1, PipelineSchedule::gpipe), InputError);
  EXPECT_THROW(plan_pipeline(layers, 0, 1, PipelineSchedule::gpipe), InputError);
  EXPECT_THROW(plan_pipeline(layers, 2, 0, PipelineSchedule::gpipe), InputError);
  layers[2].stage = 2;  // stage 1 skipped: it would be empty
  try {
    plan_pipeline(layers, 3, 1, PipelineSchedule::gpipe);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("layer #3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("would be empty"), std::string::npos) << e.what();
  }
  layers[2].stage = 1;
  EXPECT_EQ(firsts(plan_pipeline(layers, 2, 1, PipelineSchedule::gpipe)),
            (std::vector<std::size_t>{0, 2}));
  EXPECT_THROW(plan_pipeline(layers, 3, 1, PipelineSchedule::gpipe), InputError);  // 2 cut, 3 asked
  layers[3].stage = 1;  // stage 1 starts twice
  EXPECT_THROW(plan_pipeline(layers, 2, 1, PipelineSchedule::gpipe), InputError);
  layers[3].stage = -1;
  layers[2].stage = -1;
  layers[0].stage = 1;  // stage 0 would be empty: this cut an empty stage 0 (a crash further on)
  try {
    plan_pipeline(layers, 2, 1, PipelineSchedule::gpipe);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the first layer starts stage 0"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)parse_enum<PipelineSchedule>("zb", "schedule"), InputError);
  EXPECT_EQ(parse_enum<PipelineSchedule>("gpipe", "schedule"), PipelineSchedule::gpipe);
  EXPECT_EQ(parse_enum<PipelineSchedule>("1f1b", "schedule"), PipelineSchedule::one_f_one_b);
}

TEST(PipelinePlan, ModelReportsLayerCostsAndStageKeys) {
  std::vector<std::string> lines = test::kResidualNet;
  lines[12] += " stage=1";  // the relu after the first block's add
  const Model m(lines, Shape{1, 3, 8, 8}, 4, 2);
  const auto layers = m.layers();
  ASSERT_EQ(layers.size(), lines.size());
  // conv filters=8 kernel=3 on 3 channels, 8×8 output: 2·(8·3·3·3)·64 flops per sample.
  EXPECT_DOUBLE_EQ(layers[0].forward_flops, 2.0 * 8 * 3 * 3 * 3 * 64);
  EXPECT_EQ(layers[0].params, 8u * 3 * 3 * 3);
  EXPECT_EQ(layers[1].params, 16u);  // batchnorm γ, β
  EXPECT_EQ(layers[12].stage, 1);
  EXPECT_EQ(layers[11].inputs.size(), 2u);
  const PipelinePlan p = plan_pipeline(layers, 2, 2, PipelineSchedule::gpipe);
  EXPECT_EQ(firsts(p), (std::vector<std::size_t>{0, 12}));
  std::size_t params = 0;
  for (const auto& s : p.stage) params += s.params;
  EXPECT_EQ(params, m.param_count());
  EXPECT_THROW(Model({"dense stage=x"}, Shape{1, 1, 2, 2}, 2, 1), InputError);
}

}  // namespace
}  // namespace dtrain
