// dtrain/train/pipeline_exchange.cpp — a pipelined run's exchange: the stages of one replica agree
// on stopping before every step's exchange (every mode: a signal seen by one stage; the ps modes
// then apply the same steps on every stage's ps) and on the global step after it (the ps modes:
// each stage pushes to its own ps), so that they leave their loops, checkpoint and evaluate at the
// same local step; and a stage that must end the run (a non-finite gradient) ends the job, which
// the other stages, waiting on its activations, would not learn of (see train/exchange.hpp,
// agree_along_pipeline).
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
        waiting_("pipeline: stage " + std::to_string(comm_rank(pipe)) +
                 " and the other stages agreeing on "),
        others_(other_stages(pipe)) {}

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
  /// The stages agree on stopping before any pushes (the stop rides on the push, and a ps does
  /// not apply a push that carries it): every stage's ps then applies the same steps.
  GradsFinal begin_step(Model& model, std::int64_t s, int n, bool stop_local) override {
    stop_ = agree_stop(stop_local);
    return inner_->begin_step(model, s, n, stop_);
  }
  ExchangeResult step(Model& model, std::int64_t s, int n, bool /*stop_local*/) override {
    return agree(ending_job([&] { return inner_->step(model, s, n, stop_); }));
  }
  [[nodiscard]] double wait_limit() const override {
    return inner_->wait_limit() + comm_timeout();  // all_max()
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
    all_max(v, 2, "the global step");
    r.global_step = -v[0];
    r.stop = v[1] > 0;
    return r;
  }

  /// Whether any stage of the replica stops (a signal seen by one stage).
  bool agree_stop(bool stop_local) const {
    std::int64_t v = stop_local ? 1 : 0;
    all_max(&v, 1, "stopping");
    return v > 0;
  }

  /// MPI_MAX of v[0..n) over the replica's stages. The wait outlasts the longest a stage waits
  /// in the inner exchange (a ps holding a sync reply: 2 × --timeout), so that a stuck ps is
  /// named by the stage waiting on it, not a healthy stage by the ones waiting here.
  void all_max(std::int64_t* v, int n, const std::string& what) const {
    MPI_Request req;
    DT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MAX, pipe_, &req));
    wait_one(req, inner_->wait_limit() + comm_timeout(), waiting_ + what + others_);
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

  /// " (stage 0 (world rank 3))": the other stages, a stuck one among them (pipe rank = stage).
  static std::string other_stages(MPI_Comm pipe) {
    const int me = comm_rank(pipe), stages = comm_size(pipe);
    const std::vector<int> rank = world_ranks(pipe);
    std::string others;
    for (int s = 0; s < stages; ++s)
      if (s != me)
        others += (others.empty() ? "" : ", ") + std::string("stage ") + std::to_string(s) +
                  " (world rank " + std::to_string(rank[static_cast<std::size_t>(s)]) + ")";
    return " (" + others + ")";
  }

  std::unique_ptr<GradientExchange> inner_;
  MPI_Comm pipe_;
  bool stage_leader_;
  std::string waiting_;  ///< "pipeline: stage 1 and the other stages agreeing on "
  std::string others_;   ///< other_stages()
  bool stop_ = false;    ///< this step's agreed stop (begin_step)
};

}  // namespace

std::unique_ptr<GradientExchange> agree_along_pipeline(std::unique_ptr<GradientExchange> inner,
                                                       MPI_Comm pipe, bool stage_leader) {
  return std::make_unique<PipelineAgreement>(std::move(inner), pipe, stage_leader);
}

}  // namespace dtrain
