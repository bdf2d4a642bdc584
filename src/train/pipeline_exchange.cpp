// dtrain/train/pipeline_exchange.cpp — a pipelined run's exchange when it is not in lockstep (the
// ps modes, each stage pushing to its own ps): the stages of one replica agree after every step on
// the global step and on stopping, so that they leave their loops, checkpoint and evaluate at the
// same local step (see train/exchange.hpp, agree_along_pipeline).
#include <algorithm>
#include <cstdint>
#include <utility>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/train/exchange.hpp"

namespace dtrain {
namespace {

class PipelineAgreement final : public GradientExchange {
 public:
  PipelineAgreement(std::unique_ptr<GradientExchange> inner, MPI_Comm pipe)
      : inner_(std::move(inner)), pipe_(pipe) {}

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
    return agree(inner_->step(model, s, n, stop_local));
  }
  ExchangeResult refresh(Model& model) override { return agree(inner_->refresh(model)); }
  std::int64_t snapshot(Model& model, CheckpointState& s) override {
    return inner_->snapshot(model, s);
  }
  void settle(Model& model) override { inner_->settle(model); }
  void finish() override { inner_->finish(); }
  [[nodiscard]] bool lockstep() const override { return inner_->lockstep(); }
  [[nodiscard]] bool waits_for_device() const override { return inner_->waits_for_device(); }
  [[nodiscard]] std::int64_t skipped_steps() const override { return inner_->skipped_steps(); }
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
    wait_one(req, comm_timeout(), "pipeline: the stages agreeing on the global step");
    r.global_step = -v[0];
    r.stop = v[1] > 0;
    return r;
  }

  std::unique_ptr<GradientExchange> inner_;
  MPI_Comm pipe_;
};

}  // namespace

std::unique_ptr<GradientExchange> agree_along_pipeline(std::unique_ptr<GradientExchange> inner,
                                                       MPI_Comm pipe) {
  if (inner->lockstep()) return inner;
  return std::make_unique<PipelineAgreement>(std::move(inner), pipe);
}

}  // namespace dtrain
