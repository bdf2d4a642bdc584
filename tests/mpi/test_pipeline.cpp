// tests/mpi/test_pipeline.cpp — pipeline model parallelism over ranks (pipeline/runner.hpp): the
// world as D data-parallel replicas × P stages (P = 2, 3, 4 where it divides the world), each
// stage's gradient summed over its D replicas and applied by SGD; after 20 steps every stage's
// parameters, batch-norm statistics and (last stage) loss sums equal bit for bit those of D
// whole models run in this process that accumulate the same M = 4 micro-batches
// (Model::train_step_micro) — for the Fashion-MNIST CNN and ResNet-20 jobs, GPipe and 1F1B.
// Finishing at all is the schedules' no-deadlock check on real MPI.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/layer_rig.hpp"
#include "common/mpi_world.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/model/pipeline_plan.hpp"
#include "dtrain/pipeline/runner.hpp"

namespace dtrain {
namespace {

/// The `layer = ...` lines of a job in jobs/.
std::vector<std::string> job_layers(const std::string& name) {
  std::ifstream in(std::string(DTRAIN_JOBS_DIR) + "/" + name);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("layer = ", 0) == 0) out.push_back(line.substr(8));
  return out;
}

constexpr int kSteps = 20, kBatch = 8, kMicro = 4, kClasses = 10;
constexpr float kLr = 0.05f;
const Shape kSample{1, 1, 28, 28};

struct Replica {  // one replica's batch of a step
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

Replica batch_of(int step, int d) {
  Replica r;
  r.x = test::uniform_values(kSample.with_n(kBatch).count(), 1000 * step + d, -1.0f, 1.0f);
  for (int i = 0; i < kBatch; ++i) r.y.push_back((3 * i + step + d) % kClasses);
  return r;
}

/// params -= lr · g on the device buffer.
void sgd(Backend& be, float* params, const std::vector<float>& g) {
  auto p = test::to_host(be, params, g.size());
  for (std::size_t i = 0; i < g.size(); ++i) p[i] -= kLr * g[i];
  be.copy_to_device(params, p.data(), p.size() * sizeof(float));
}

/// Offset in the whole model's flat buffer of the tensor named `key`.
std::size_t offset_of(const std::vector<TensorInfo>& ts, const std::string& key) {
  for (const auto& t : ts)
    if (t.key == key) return t.offset;
  ADD_FAILURE() << "no tensor " << key;
  return 0;
}

/// The gradient the D reference models `ref` sum at `step`, each on its replica's batch; replica
/// d's loss statistics accumulate in stats.
std::vector<float> reference_gradient(Backend& be, std::vector<std::unique_ptr<Model>>& ref,
                                      int step, int d, float scale, float* stats) {
  std::vector<float> sum;
  for (int r = 0; r < static_cast<int>(ref.size()); ++r) {
    const Replica rb = batch_of(step, r);
    auto rx = test::to_device(be, rb.x);
    DeviceBuffer<std::int32_t> ry(be, kBatch);
    be.copy_to_device(ry.data(), rb.y.data(), rb.y.size() * sizeof(std::int32_t));
    DeviceBuffer<float> scratch(be, kStatsFloats);
    be.fill(scratch.data(), 0.0f, kStatsFloats);
    ref[r]->train_step_micro(rx.data(), ry.data(), kBatch, kMicro, scale, 100 + step,
                             r == d ? stats : scratch.data());
    const auto rg = test::to_host(be, ref[r]->grads(), ref[r]->param_count());
    if (r == 0) sum = rg;
    else
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += rg[i];  // D ≤ 2: exact
  }
  return sum;
}

void run_pipeline(const std::string& job, int P, PipelineSchedule schedule) {
  const int W = test::world_size(), rank = test::world_rank();
  const int D = W / P, s = rank % P, d = rank / P;
  const auto layers = job_layers(job);
  ASSERT_FALSE(layers.empty()) << job;
  auto be = make_cpu_backend();
  const Model layout(layers, kSample, kClasses, kBatch);
  const PipelinePlan plan = plan_pipeline(layout.layers(), P, kMicro, schedule);
  const PipelineStage& mine = plan.stage[static_cast<std::size_t>(s)];
  Model stage(*be, layers, kSample, kClasses, kBatch / kMicro, LayerRange{mine.first, mine.last},
              stage_slots(schedule, s, P, kMicro));
  stage.initialize(17);
  MPI_Comm pipe, replicas;
  MPI_Comm_split(MPI_COMM_WORLD, d, s, &pipe);
  MPI_Comm_split(MPI_COMM_WORLD, s, d, &replicas);
  PipelineRunner runner(stage, pipe, schedule, kMicro);
  EXPECT_EQ(runner.stage(), s);

  // The reference: D whole models, one per replica, the same summed gradient applied to each.
  std::vector<std::unique_ptr<Model>> ref;
  for (int r = 0; r < D; ++r) {
    ref.push_back(std::make_unique<Model>(*be, layers, kSample, kClasses, kBatch));
    ref.back()->initialize(17);
  }
  DeviceBuffer<float> stats(*be, kStatsFloats), ref_stats(*be, kStatsFloats);
  be->fill(stats.data(), 0.0f, kStatsFloats);
  be->fill(ref_stats.data(), 0.0f, kStatsFloats);
  const float scale = 1.0f / static_cast<float>(D * kBatch);
  for (int step = 0; step < kSteps; ++step) {
    const Replica b = batch_of(step, d);
    auto x = test::to_device(*be, b.x);
    DeviceBuffer<std::int32_t> y(*be, kBatch);
    be->copy_to_device(y.data(), b.y.data(), b.y.size() * sizeof(std::int32_t));
    runner.train_step(x.data(), y.data(), kBatch, scale, 100 + step, stats.data());
    auto g = test::to_host(*be, stage.grads(), stage.param_count());
    MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(g.size()), MPI_FLOAT, MPI_SUM, replicas);
    sgd(*be, stage.params(), g);

    const std::vector<float> sum = reference_gradient(*be, ref, step, d, scale, ref_stats.data());
    for (auto& m : ref) sgd(*be, m->params(), sum);
  }
  const std::string what = job + " P=" + std::to_string(P) + " D=" + std::to_string(D) + " " +
                           to_string(schedule) + " stage " + std::to_string(s);
  const Model& whole = *ref[static_cast<std::size_t>(d)];
  if (stage.param_count() > 0) {
    const std::size_t at = offset_of(whole.param_tensors(), stage.param_tensors().front().key);
    const auto want = test::to_host(*be, whole.params() + at, stage.param_count());
    EXPECT_EQ(test::to_host(*be, stage.params(), stage.param_count()), want) << what;
    const auto initial = [&] {
      std::vector<float> p, st;
      whole.initial_values(17, p, st);
      return std::vector<float>(p.begin() + static_cast<long>(at),
                                p.begin() + static_cast<long>(at + stage.param_count()));
    }();
    EXPECT_NE(want, initial) << what << ": training changed nothing";
  }
  if (stage.state_count() > 0) {
    const std::size_t at = offset_of(whole.state_tensors(), stage.state_tensors().front().key);
    EXPECT_EQ(test::to_host(*be, stage.state(), stage.state_count()),
              test::to_host(*be, whole.state() + at, stage.state_count()))
        << what;
  }
  if (stage.has_loss())
    EXPECT_EQ(test::to_host(*be, stats.data(), kStatsFloats),
              test::to_host(*be, ref_stats.data(), kStatsFloats))
        << what;
  MPI_Comm_free(&pipe);
  MPI_Comm_free(&replicas);
}

void run_all(const std::string& job) {
  const int W = test::world_size();
  for (int P : {2, 3, 4}) {
    if (W % P != 0) continue;
    for (auto sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
      run_pipeline(job, P, sched);
  }
}

TEST(Pipeline, CnnStagesEqualGradientAccumulationBitForBit) { run_all("fashion_mnist_cnn.ini"); }

/// Every M ≤ 8 with P = the world size, both schedules, a batch of 8 and of 5 (micro-batches of
/// unequal size, and M > n: empty ones dropped): the runner finishes (no deadlock) and its
/// summed gradients equal Model::train_step_micro's bit for bit; evaluate() agrees with
/// Model::evaluate (the same #correct; the loss summed per micro-batch, to rounding).
TEST(Pipeline, EverySchedulePatternFinishesAndAccumulatesExactly) {
  const int P = test::world_size(), s = test::world_rank();
  const std::vector<std::string> net = {"conv filters=3 kernel=3 pad=1",
                                        "batchnorm",
                                        "relu",
                                        "maxpool kernel=2",
                                        "flatten",
                                        "dense units=16",
                                        "relu",
                                        "dense"};
  const Shape sample{1, 1, 8, 8};
  if (P > static_cast<int>(net.size())) GTEST_SKIP() << "more ranks than layers";
  auto be = make_cpu_backend();
  const Model layout(net, sample, 4, 8);
  for (auto sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
    for (int M = 1; M <= 8; ++M)
      for (int n : {8, 5}) {
        const PipelinePlan plan = plan_pipeline(layout.layers(), P, M, sched);
        const PipelineStage& st = plan.stage[static_cast<std::size_t>(s)];
        Model stage(*be, net, sample, 4, (8 + M - 1) / M, LayerRange{st.first, st.last},
                    stage_slots(sched, s, P, M));
        Model whole(*be, net, sample, 4, 8);
        stage.initialize(5);
        whole.initialize(5);
        PipelineRunner runner(stage, MPI_COMM_WORLD, sched, M);
        const auto xh = test::uniform_values(sample.with_n(n).count(), 40 + M, -1.0f, 1.0f);
        std::vector<std::int32_t> yh;
        for (int i = 0; i < n; ++i) yh.push_back(i % 4);
        auto x = test::to_device(*be, xh);
        DeviceBuffer<std::int32_t> y(*be, static_cast<std::size_t>(n));
        be->copy_to_device(y.data(), yh.data(), yh.size() * sizeof(std::int32_t));
        DeviceBuffer<float> a(*be, kStatsFloats), b(*be, kStatsFloats);
        be->fill(a.data(), 0.0f, kStatsFloats);
        be->fill(b.data(), 0.0f, kStatsFloats);
        runner.train_step(x.data(), y.data(), n, 1.0f / n, 9, a.data());
        whole.train_step_micro(x.data(), y.data(), n, M, 1.0f / n, 9, b.data());
        const std::string what = std::string(to_string(sched)) + " M=" + std::to_string(M) +
                                 " n=" + std::to_string(n) + " stage " + std::to_string(s);
        const std::size_t at =
            stage.param_count() == 0
                ? 0
                : offset_of(whole.param_tensors(), stage.param_tensors().front().key);
        EXPECT_EQ(test::to_host(*be, stage.grads(), stage.param_count()),
                  test::to_host(*be, whole.grads() + at, stage.param_count()))
            << what;
        be->fill(a.data(), 0.0f, kStatsFloats);
        be->fill(b.data(), 0.0f, kStatsFloats);
        runner.evaluate(x.data(), y.data(), n, a.data());
        whole.evaluate(x.data(), y.data(), n, b.data());
        if (stage.has_loss()) {  // the pipeline sums the loss per micro-batch: rounding differs
          const auto pa = test::to_host(*be, a.data(), kStatsFloats),
                     pb = test::to_host(*be, b.data(), kStatsFloats);
          EXPECT_NEAR(pa[0], pb[0], 1e-5 * std::abs(pb[0])) << what;
          EXPECT_EQ(pa[1], pb[1]) << what;
        }
      }
}

TEST(Pipeline, ResNet20StagesEqualGradientAccumulationBitForBit) { run_all("resnet20_cifar.ini"); }

}  // namespace
}  // namespace dtrain
