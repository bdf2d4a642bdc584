// dtrain/train/pipeline_exchange.cpp — a pipelined run's exchange: the stages of one replica agree
// after every step on the global step (the ps modes: each stage pushes to its own ps) and on
// stopping (every mode: a signal seen by one stage), so that they leave their loops, checkpoint and
// evaluate at the same local step; and a stage that must end the run (a non-finite gradient) ends
// the job, which the other stages, waiting on its activations, would not learn of (see
// train/exchange.hpp, agree_along_pipeline).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/comm/guard.hpp"
#include "dtrain/train/exchange.hpp"

namespace dtrain {
namespace {

class PipelineAgreement final : public GradientExchange {
 public:
  PipelineAgreement(std::unique_ptr<GradientExchange> inner, MPI_Comm pipe, bool stage_leader)
      : inner_(std::move(inner)), pipe_(pipe), stage_leader_(stage_leader),
        waiting_(agreement_name(pipe)) {}

  void start(Model& model, const CheckpointState* resume, std::int64_t global_step) override {
    inner_->start(model, resume, global_step);
  }
  [[nodiscard]] std::int64_t local_steps(int epoch) const override {
    return inner_->local_steps(epoch);
  }
  [[nodiscard]] bool epoch_over(int epoch, std::int64_t s,
                                std::int64_t global_step) const override {
    return inner_->epoch_over(epoch, s, global_step);
  }
  [[nodiscard]] float gradient_scale(std::int64_t s, int n) const override {
    return inner_->gradient_scale(s, n);
  }
  GradsFinal begin_step(Model& model, std::int64_t s, int n, bool stop_local) override {
    return inner_->begin_step(model, s, n, stop_local);
  }
  ExchangeResult step(Model& model, std::int64_t s, int n, bool stop_local) override {
    return agree(ending_job([&] { return inner_->step(model, s, n, stop_local); }));
  }
  ExchangeResult refresh(Model& model) override {
    return agree(ending_job([&] { return inner_->refresh(model); }));
  }
  std::int64_t snapshot(Model& model, CheckpointState& s) override {
    return ending_job([&] { return inner_->snapshot(model, s); });
  }
  void settle(Model& model) override {
    ending_job([&] {
      inner_->settle(model);
      return 0;
    });
  }
  void finish() override { inner_->finish(); }
  [[nodiscard]] bool lockstep() const override { return inner_->lockstep(); }
  [[nodiscard]] bool waits_for_device() const override { return inner_->waits_for_device(); }
  [[nodiscard]] std::int64_t skipped_steps() const override { return inner_->skipped_steps(); }
  [[nodiscard]] double push_bytes_per_step() const override {
    return inner_->push_bytes_per_step();
  }
  [[nodiscard]] std::string allreduce_algorithm() const override {
    return inner_->allreduce_algorithm();
  }

 private:
  /// The smallest global step over the replica's stages (no stage moves on before its own ps got
  /// there), and stop when any stage stops.
  ExchangeResult agree(ExchangeResult r) const {
    std::int64_t v[2] = {-r.global_step, r.stop ? 1 : 0};
    MPI_Request req;
    DT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, v, 2, MPI_INT64_T, MPI_MAX, pipe_, &req));
    wait_one(req, comm_timeout(), waiting_);
    r.global_step = -v[0];
    r.stop = v[1] > 0;
    return r;
  }

  /// fn(), where an error the stage has already reported (ReportedError: a non-finite gradient,
  /// which every replica of the stage reads and the stage's leader prints) ends the job from the
  /// leader: the other stages, waiting on this one's activations, would otherwise time out
  /// blaming it. The stage's other replicas leave as in a run without stages, and the abort
  /// takes them.
  template <typename Fn>
  auto ending_job(Fn fn) -> decltype(fn()) {
    try {
      return fn();
    } catch (const ReportedError& e) {
      if (stage_leader_) MPI_Abort(MPI_COMM_WORLD, e.code());
      throw;
    }
  }

  /// "pipeline: stage 1 and the other stages agreeing on the global step (stage 0 (world rank
  /// 3))": the wait's name, with the stages a stuck one is among (pipe rank = stage).
  static std::string agreement_name(MPI_Comm pipe) {
    int me = 0, stages = 1;
    DT_CHECK_MPI(MPI_Comm_rank(pipe, &me));
    DT_CHECK_MPI(MPI_Comm_size(pipe, &stages));
    MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    DT_CHECK_MPI(MPI_Comm_group(pipe, &group));
    DT_CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
    std::vector<int> stage(static_cast<std::size_t>(stages)), rank(stage.size());
    for (int s = 0; s < stages; ++s) stage[static_cast<std::size_t>(s)] = s;
    DT_CHECK_MPI(MPI_Group_translate_ranks(group, stages, stage.data(), world, rank.data()));
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    std::string others;
    for (int s = 0; s < stages; ++s)
      if (s != me)
        others += (others.empty() ? "" : ", ") + std::string("stage ") + std::to_string(s) +
                  " (world rank " + std::to_string(rank[static_cast<std::size_t>(s)]) + ")";
    return "pipeline: stage " + std::to_string(me) +
           " and the other stages agreeing on the global step (" + others + ")";
  }

  std::unique_ptr<GradientExchange> inner_;
  MPI_Comm pipe_;
  bool stage_leader_;
  std::string waiting_;  ///< agreement_name()
};

}  // namespace

std::unique_ptr<GradientExchange> agree_along_pipeline(std::unique_ptr<GradientExchange> inner,
                                                       MPI_Comm pipe, bool stage_leader) {
  return std::make_unique<PipelineAgreement>(std::move(inner), pipe, stage_leader);
}

}  // namespace dtrain
