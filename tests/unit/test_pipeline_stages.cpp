// tests/unit/test_pipeline_stages.cpp — pipeline stages in one process (model/stage.cpp,
// pipeline/schedule.cpp): a model cut into P stage Models, run micro-batch by micro-batch with
// the crossing tensors copied between neighbours as the MPI runner sends them, gives bit for bit
// the whole model's gradient accumulation (Model::train_step_micro): the same summed gradients,
// batch-norm statistics, loss and accuracy — for every cut of residual and Inception-style graphs,
// a cut through a residual block included. Also the schedules' orders and slot counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "common/layer_rig.hpp"
#include "common/nets.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/pipeline/schedule.hpp"

namespace dtrain {
namespace {

/// A small CNN with dropout (its masks must follow the micro-batch and layer, not the stage).
const std::vector<std::string> kDropoutNet = {
    "conv filters=4 kernel=3 pad=1",
    "relu",
    "maxpool kernel=2",
    "flatten",
    "dense units=12",
    "relu",
    "dropout rate=0.3",
    "dense",
};

struct Outcome {
  std::vector<float> grads, state, stats;
};

/// One mini-batch of n samples (seeded) through `net`, its M micro-batches accumulated.
struct Rig {
  const std::vector<std::string>& net;
  Shape sample{1, 3, 8, 8};
  int classes = 4, n = 12, M = 4;
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::vector<float> x = test::uniform_values(sample.with_n(n).count(), 77, -1.0f, 1.0f);
  std::vector<std::int32_t> y;
  DeviceBuffer<float> xd;
  DeviceBuffer<std::int32_t> yd;

  explicit Rig(const std::vector<std::string>& layers) : net(layers) {
    for (int i = 0; i < n; ++i) y.push_back((5 * i + 1) % classes);
    xd = test::to_device(*be, x);
    yd = DeviceBuffer<std::int32_t>(*be, static_cast<std::size_t>(n));
    be->copy_to_device(yd.data(), y.data(), y.size() * sizeof(std::int32_t));
  }

  /// The crossing tensors `ts` (values, or gradients) of `m`'s slot as one message.
  std::vector<std::byte> send(Model& m, int slot, const std::vector<int>& ts, bool grad, int rows) {
    std::vector<std::byte> msg;
    for (int t : ts) {
      const std::size_t bytes = m.tensor_elements(t, rows) * be->act_size();
      msg.resize(msg.size() + bytes);
      be->copy_to_host(msg.data() + msg.size() - bytes,
                       grad ? m.tensor_grad(slot, t) : m.tensor_value(slot, t), bytes);
    }
    return msg;
  }
  void receive(Model& m, int slot, const std::vector<int>& ts, bool grad,
               const std::vector<std::byte>& msg, int rows) {
    std::size_t at = 0;
    for (int t : ts) {
      const std::size_t bytes = m.tensor_elements(t, rows) * be->act_size();
      ASSERT_LE(at + bytes, msg.size());
      be->copy_to_device(grad ? m.tensor_grad(slot, t) : m.tensor_value(slot, t), msg.data() + at,
                         bytes);
      at += bytes;
    }
    EXPECT_EQ(at, msg.size()) << "the neighbours disagree on the crossing tensors";
  }

  Outcome whole() {
    Model m(*be, net, sample, classes, n);
    m.initialize(3);
    DeviceBuffer<float> stats(*be, kStatsFloats);
    be->fill(stats.data(), 0.0f, kStatsFloats);
    m.train_step_micro(xd.data(), yd.data(), n, M, 1.0f / n, 5, stats.data());
    return {test::to_host(*be, m.grads(), m.param_count()),
            test::to_host(*be, m.state(), m.state_count()),
            test::to_host(*be, stats.data(), kStatsFloats)};
  }

  /// The stages [first[s], first[s + 1]) each run their `schedule` order, interleaved as the
  /// MPI runner's stages would be: an op runs once what it receives is there (a forward after
  /// the stage before forwarded that micro-batch, a backward after the stage after sent its
  /// gradient), the crossing tensors copied between neighbours' slots as the runner sends them.
  /// Fails if the schedules cannot finish (a deadlock).
  Outcome staged(const std::vector<std::size_t>& first, PipelineSchedule schedule) {
    const int P = static_cast<int>(first.size());
    std::vector<std::unique_ptr<Model>> st;
    std::vector<std::vector<PipelineOp>> ops;
    for (int s = 0; s < P; ++s) {
      LayerRange r{first[s], s + 1 < P ? first[s + 1] - 1 : net.size() - 1};
      st.push_back(std::make_unique<Model>(*be, net, sample, classes, n / M, r,
                                           stage_slots(schedule, s, P, M)));
      st.back()->initialize(3);
      ops.push_back(stage_schedule(schedule, s, P, M));
    }
    DeviceBuffer<float> stats(*be, kStatsFloats);
    be->fill(stats.data(), 0.0f, kStatsFloats);
    const std::size_t per = sample.count();
    // done[s][m]: 1 = forwarded, 2 = backwarded; fwd[s][m] / bwd[s][m]: what stage s sent for
    // micro-batch m (messages: the sender's slot may be reused before the receiver runs).
    std::vector<std::vector<int>> done(P, std::vector<int>(M, 0));
    std::vector<std::vector<std::vector<std::byte>>> fwd(P, std::vector<std::vector<std::byte>>(M)),
        bwd = fwd;
    std::vector<std::size_t> next(P, 0);
    for (bool progress = true; progress;) {
      progress = false;
      for (int s = 0; s < P; ++s) {
        if (next[s] == ops[s].size()) continue;
        const PipelineOp op = ops[s][next[s]];
        const int m = op.micro, a = n * m / M, rows = n * (m + 1) / M - a;
        Model& me = *st[s];
        if (op.forward) {
          if (s > 0 && done[s - 1][m] < 1) continue;
          if (s > 0) receive(me, op.slot, me.received_tensors(), false, fwd[s - 1][m], rows);
          me.forward_micro(op.slot, xd.data() + a * per, yd.data() + a, rows, 1.0f / n,
                           micro_batch_seed(5, m, M), stats.data(), true);
          if (s + 1 < P) fwd[s][m] = send(me, op.slot, me.sent_tensors(), false, rows);
        } else {
          if (s + 1 < P && done[s + 1][m] < 2) continue;
          if (s + 1 < P) receive(me, op.slot, me.sent_tensors(), true, bwd[s + 1][m], rows);
          me.backward_micro(op.slot, rows);
          me.accumulate_micro(m, M);
          if (s > 0) bwd[s][m] = send(me, op.slot, me.received_tensors(), true, rows);
        }
        done[s][m] = op.forward ? 1 : 2;
        ++next[s];
        progress = true;
      }
    }
    for (int s = 0; s < P; ++s)
      EXPECT_EQ(next[s], ops[s].size()) << "stage " << s << " is stuck: " << describe(ops[s]);
    Outcome out;
    for (const auto& m : st) {
      for (float g : test::to_host(*be, m->grads(), m->param_count())) out.grads.push_back(g);
      for (float v : test::to_host(*be, m->state(), m->state_count())) out.state.push_back(v);
    }
    out.stats = test::to_host(*be, stats.data(), kStatsFloats);
    return out;
  }
};

void expect_same(const Outcome& a, const Outcome& b, const std::string& what) {
  EXPECT_EQ(a.grads, b.grads) << what;
  EXPECT_EQ(a.state, b.state) << what;
  EXPECT_EQ(a.stats, b.stats) << what;
}

TEST(PipelineStages, EveryTwoStageCutMatchesAccumulationBitForBit) {
  for (const auto* net : {&test::kResidualNet, &test::kBranchyNet, &kDropoutNet}) {
    Rig rig(*net);
    const Outcome ref = rig.whole();
    ASSERT_GT(*std::max_element(ref.grads.begin(), ref.grads.end()), 0.0f);
    for (std::size_t cut = 1; cut < net->size(); ++cut)
      for (auto sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
        expect_same(rig.staged({0, cut}, sched), ref,
                    "cut before layer " + std::to_string(cut + 1) + " of " + net->front() + ", " +
                        to_string(sched));
  }
}

TEST(PipelineStages, FourStagesMatchAccumulationBitForBit) {
  Rig rig(test::kResidualNet);
  const Outcome ref = rig.whole();
  // A cut inside the bottleneck (r0 passes through stage 1 to the add in stage 2), one inside
  // the projection block (r1 feeds both branches across the cut).
  for (auto sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
    expect_same(rig.staged({0, 4, 9, 15}, sched), ref, to_string(sched));
}

TEST(PipelineStages, StagesInitialiseTheirTensorsAsTheWholeModel) {
  auto be = make_cpu_backend();
  const Shape sample{1, 3, 8, 8};
  Model whole(*be, test::kResidualNet, sample, 4, 2);
  whole.initialize(11);
  std::vector<float> joined;
  for (auto r : {LayerRange{0, 6}, LayerRange{7, 12}, LayerRange{13, 99}}) {
    Model part(*be, test::kResidualNet, sample, 4, 2, r, 1);
    part.initialize(11);
    for (float v : test::to_host(*be, part.params(), part.param_count())) joined.push_back(v);
    EXPECT_EQ(part.has_loss(), r.first == 13);
  }
  EXPECT_EQ(joined, test::to_host(*be, whole.params(), whole.param_count()));
}

TEST(PipelineStages, CrossingsCarryEveryLiveTensor) {
  const Shape sample{1, 3, 8, 8};
  // Cut before layer 5 (0-based 4): r0 (tensor 3) is live across it, with layer 3's output.
  auto be = make_cpu_backend();
  Model s1(*be, test::kResidualNet, sample, 4, 2, LayerRange{4, 8}, 1);
  EXPECT_EQ(s1.received_tensors(), (std::vector<int>{3, 4}));
  EXPECT_EQ(s1.sent_tensors(), (std::vector<int>{3, 9}));  // r0 passes through to the add
  const std::vector<std::string> reads_data_late = {"conv filters=3 kernel=3 pad=1 name=a",
                                                    "conv filters=3 kernel=1 input=data name=b",
                                                    "add input=a,b", "globalavgpool", "dense"};
  EXPECT_NO_THROW(Model(*be, reads_data_late, sample, 4, 2, LayerRange{0, 1}, 1));
  EXPECT_THROW(Model(*be, reads_data_late, sample, 4, 2, LayerRange{1, 99}, 1), InputError)
      << "the network input may only be read by the first stage";
  EXPECT_THROW(Model(*be, test::kResidualNet, sample, 4, 2, LayerRange{30, 40}, 1), InputError);
}

TEST(PipelineSchedules, OrdersAndSlots) {
  using PS = PipelineSchedule;
  EXPECT_EQ(describe(stage_schedule(PS::gpipe, 0, 2, 3)), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(describe(stage_schedule(PS::one_f_one_b, 0, 4, 6)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(describe(stage_schedule(PS::one_f_one_b, 3, 4, 6)),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  EXPECT_EQ(describe(stage_schedule(PS::one_f_one_b, 0, 4, 2)), "F0 F1 B0 B1");
  EXPECT_EQ(stage_slots(PS::one_f_one_b, 1, 4, 8), 3);
  EXPECT_EQ(stage_slots(PS::gpipe, 1, 4, 8), 8);
  // Every op once, each forward before its backward, never more in flight than slots, and no
  // two micro-batches in flight sharing a slot.
  for (auto sched : {PS::gpipe, PS::one_f_one_b})
    for (int P = 1; P <= 4; ++P)
      for (int s = 0; s < P; ++s)
        for (int M = 1; M <= 8; ++M) {
          const auto ops = stage_schedule(sched, s, P, M);
          ASSERT_EQ(ops.size(), static_cast<std::size_t>(2 * M));
          std::vector<int> slot_of(static_cast<std::size_t>(M), -1);
          std::vector<bool> busy(static_cast<std::size_t>(stage_slots(sched, s, P, M)), false);
          int next_b = 0;
          for (const auto& op : ops) {
            auto b = busy.at(static_cast<std::size_t>(op.slot));
            if (op.forward) {
              EXPECT_FALSE(b) << describe(ops);
              b = true;
              slot_of[static_cast<std::size_t>(op.micro)] = op.slot;
            } else {
              EXPECT_EQ(op.micro, next_b++) << describe(ops);
              EXPECT_EQ(slot_of[static_cast<std::size_t>(op.micro)], op.slot);
              b = false;
            }
          }
        }
}

}  // namespace
}  // namespace dtrain
