// dtrain/train/ps_exchange.cpp — the worker side of the three parameter-server kinds: one fused
// push-pull per step (PsClient); what differs is how many local steps an epoch has, when it ends,
// and what global step a reply stands for (ps/server.hpp has the server side). On the CPU the
// push leaves while backward runs: each chunk as soon as its gradients are final, checked finite
// first (--overlap; not with --skip-nonfinite, which must see the whole gradient before it
// pushes, nor on a GPU, whose gradients stay on the device until backward ends).
#include <algorithm>
#include <vector>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timeline.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/client.hpp"
#include "exchange_impl.hpp"
#include "host_mirror.hpp"

namespace dtrain {
namespace {

/// ExchangeKind::ps_async — Downpour: each push is applied on arrival; this worker trains its own
/// shard at its own pace.
class PsExchange : public GradientExchange {
 public:
  PsExchange(const Config& c, const Cluster& cluster, const TrainPlan& plan, Model& model)
      : c_(c), cluster_(cluster), plan_(plan),
        client_(cluster,
                ps_shard_ranges(c, model.param_tensors(), model.param_count(), cluster.num_ps()),
                ps_reply_timeout(c), static_cast<std::size_t>(c.ps_chunk_kb) * 1024, c.wire_dtype),
        grads_(model.backend(), model.param_count()), params_(model.backend(), model.param_count()),
        overlap_(push_during_backward(c, cluster, model)) {
    client_.set_answer_timeout(c.timeout);
    // Sync through the ps: a global step is an update of every shard, agreed by the ps ranks
    // (with backup workers too, where no pipeline splits them into stages): a push joins it on
    // every shard alike.
    if (exchange_kind(c) == ExchangeKind::ps_sync && c.pipeline_stages <= 1)
      client_.use_common_seen_step();
  }

  /// --overlap for a ps mode: on the CPU, without --skip-nonfinite; and for the aggregating modes
  /// only where the node has a core per rank. Their reply waits for every worker's push anyway,
  /// so an early push hides only the ps's receive of it, and where ranks outnumber cores that
  /// receive takes a core from backward instead of an idle one (VGG-16, sync through the ps,
  /// 2 workers + 1 ps on 2 cores: ×0.95 samples/s; README "Overlap with backward").
  static bool push_during_backward(const Config& c, const Cluster& cluster, const Model& model) {
    if (!c.overlap || c.skip_nonfinite || model.backend().device() != Device::cpu) return false;
    if (exchange_kind(c) == ExchangeKind::ps_async) return true;
    const int cores = cluster.node_cpus();
    const bool shared = cluster.me().local_size > cores;
    if (shared && cluster.is_chief())
      log_info("pushes leave after backward: " + std::to_string(cluster.me().local_size) +
               " ranks share " + std::to_string(cores) +
               " cores on this node (--overlap needs "
               "a core per rank in the aggregating ps modes)");
    return !shared;
  }

  GradsFinal begin_step(Model& model, std::int64_t /*s*/, int n, bool stop_local) override {
    if (!overlap_) return {};
    // CPU: grads() and params() are host memory; a reply chunk lands only on parameters whose
    // gradients were final (backward no longer reads them).
    issued_ = true;
    bad_ = false;
    final_from_ = model.param_count();
    client_.begin_push(model.grads(), n, model.params(), stop_local);
    return [this, &model, n](std::size_t from) {
      if (bad_ || from >= final_from_) return;
      if (n > 0 && !model.backend().all_finite(model.grads() + from, final_from_ - from)) {
        bad_ = true;  // nothing from here on leaves; step() reports it
        return;
      }
      final_from_ = from;
      client_.push_ready(from);
    };
  }

  void start(Model& model, const CheckpointState* resume, std::int64_t global_step) override {
    if (cluster_.is_chief()) {
      // Sync through the ps ends at the run's last global step whatever its --max-steps: with
      // backup workers the pushes of a step that no epoch holds (a worker's, computed before it
      // heard that the last step was made) could make one more update on a shard.
      const std::int64_t last =
          exchange_kind(c_) == ExchangeKind::ps_sync ? plan_.total_steps : c_.max_steps;
      if (resume) {
        client_.load(resume->params.data(), resume->m.empty() ? nullptr : resume->m.data(),
                     resume->v.empty() ? nullptr : resume->v.data(), global_step, last);
      } else {
        model.initialize(c_.seed);
        client_.load(params_.to_host(model.params()), nullptr, nullptr, global_step, last);
      }
    }
    // No worker pulls before the chief has loaded the ps.
    MPI_Request req;
    DT_CHECK_MPI(MPI_Ibarrier(cluster_.role_comm(), &req));
    wait_one(req, comm_timeout(), "workers waiting for the chief to initialise the ps");
    last_step_ = position_ = client_.pull(params_.buffer(model.params())).global_step;
    params_.to_device(model.params());
  }

  [[nodiscard]] std::int64_t local_steps(int /*epoch*/) const override {
    return worker_steps_per_epoch(plan_, false, cluster_.me().index);
  }

  [[nodiscard]] float gradient_scale(std::int64_t /*s*/, int n) const override {
    return n > 0 ? 1.0f / static_cast<float>(n) : 0.0f;
  }

  ExchangeResult step(Model& model, std::int64_t s, int n, bool stop_local) override {
    float* g = grads_.to_host(model.grads());
    if (issued_) return finish_issued(model, s, n, g, stop_local);
    if (n > 0 && !model.backend().all_finite(model.grads(), model.param_count())) {
      if (!c_.skip_nonfinite) throw RuntimeFault(nonfinite_message(model, g, last_step_));
      ++skipped_;
      log_warn("skipping a push after global step " + std::to_string(last_step_) +
               ": non-finite gradient (--skip-nonfinite)");
      n = 0;  // a push without samples: the ps ignores its values but keeps the step's rhythm
    }
    PushResult p;
    {
      const TimelineSpan span("push-pull", "exchange");  // includes waiting for a held reply
      p = client_.push_pull(g, n, params_.buffer(model.params()), stop_local);
    }
    params_.to_device(model.params());
    return result(p, s, n, stop_local);
  }

  /// step() of a push issued during backward (begin_step): its last chunks, and the replies.
  ExchangeResult finish_issued(Model& model, std::int64_t s, int n, const float* g,
                               bool stop_local) {
    issued_ = false;
    // A non-finite gradient ends the run (--skip-nonfinite does not issue early): no chunk from
    // the non-finite one on left, so the ps holds finite parameters until the job ends.
    if (bad_) throw RuntimeFault(nonfinite_message(model, g, last_step_));
    PushResult p;
    {
      const TimelineSpan span("push-pull", "exchange");  // the exposed part of the exchange
      p = client_.finish_push();
    }
    return result(p, s, n, stop_local);
  }

  ExchangeResult result(const PushResult& p, std::int64_t s, int n, bool stop_local) {
    ++pushes_;
    ExchangeResult r;
    r.applied = n > 0 && !p.dropped_first;  // used by ps 0, whose counts results.json reports
    r.dropped = n > 0 && p.dropped;
    r.stop = p.stop_requested || stop_local;
    r.staleness = static_cast<double>(p.staleness);
    r.global_step = next_step(p);
    r.samples = samples_between(s, position_, r.global_step);
    last_local_ = s;
    last_step_ = p.global_step;
    position_ = r.global_step;
    return r;
  }

  ExchangeResult refresh(Model& model) override {
    const TimelineSpan span("pull", "exchange");
    last_step_ = client_.pull(params_.buffer(model.params()), wait_step()).global_step;
    params_.to_device(model.params());
    ExchangeResult r;
    r.global_step = last_step_;
    if (last_step_ > position_) r.samples = samples_between(last_local_, position_, last_step_);
    position_ = std::max(position_, last_step_);
    return r;
  }

  std::int64_t snapshot(Model& model, CheckpointState& s) override {
    const std::size_t P = model.param_count();
    s.params.assign(P, 0.0f);
    std::vector<float> m(P), v(P);
    const std::int64_t step = client_.snapshot(s.params.data(), m.data(), v.data());
    const OptimizerKind kind = c_.optimizer;
    s.m = kind == OptimizerKind::sgd ? std::vector<float>{} : std::move(m);
    s.v = kind == OptimizerKind::adam || kind == OptimizerKind::lamb ? std::move(v)
                                                                     : std::vector<float>{};
    return step;
  }

  void finish() override { client_.done(); }
  [[nodiscard]] double wait_limit() const override { return ps_reply_timeout(c_); }
  [[nodiscard]] bool lockstep() const override { return false; }
  [[nodiscard]] std::int64_t skipped_steps() const override { return skipped_; }
  [[nodiscard]] double push_bytes_per_step() const override {
    return pushes_ > 0 ? static_cast<double>(client_.pushed_bytes()) / pushes_ : 0.0;
  }

 protected:
  /// The global step the worker trains at after a reply.
  [[nodiscard]] virtual std::int64_t next_step(const PushResult& p) { return p.global_step; }
  /// Samples of all workers behind the global steps (before, after] (throughput): each async
  /// step is one worker's batch.
  [[nodiscard]] virtual std::int64_t samples_between(std::int64_t /*s*/, std::int64_t before,
                                                     std::int64_t after) const {
    return (after - before) * plan_.batch;
  }
  /// refresh() waits until the ps applied this many steps.
  [[nodiscard]] virtual std::int64_t wait_step() const { return 0; }

  const Config& c_;
  const Cluster& cluster_;
  const TrainPlan& plan_;

 private:
  PsClient client_;
  HostMirror grads_, params_;
  std::int64_t last_step_ = 0;   ///< global_step of the last reply
  std::int64_t position_ = 0;    ///< the last ExchangeResult::global_step
  std::int64_t last_local_ = 0;  ///< the local step of the last step()
  std::int64_t skipped_ = 0;
  std::int64_t pushes_ = 0;     ///< push-pulls made (result())
  const bool overlap_;          ///< push chunks while backward runs (begin_step)
  bool issued_ = false;         ///< this step's push was begun in begin_step
  bool bad_ = false;            ///< a non-finite gradient was found while issuing
  std::size_t final_from_ = 0;  ///< gradients [final_from_, P) checked and handed over
};

/// ExchangeKind::ps_sync — every worker takes the same local steps per epoch (like allreduce); a
/// reply brings the parameters of the next global step, so a worker whose push came late (and
/// was dropped) catches up at once, and the epoch ends when its global steps are done.
class SyncPsExchange final : public PsExchange {
 public:
  using PsExchange::PsExchange;
  [[nodiscard]] std::int64_t local_steps(int /*epoch*/) const override {
    return worker_steps_per_epoch(plan_, true, 0);
  }
  [[nodiscard]] bool epoch_over(int epoch, std::int64_t s,
                                std::int64_t global_step) const override {
    return s >= local_steps(epoch) || global_step >= (epoch + 1) * plan_.steps_per_epoch;
  }

 protected:
  [[nodiscard]] std::int64_t samples_between(std::int64_t s, std::int64_t before,
                                             std::int64_t after) const override {
    // Each update aggregates R workers' batches (all workers' at R = W).
    const int r = c_.replicas_to_aggregate > 0 ? c_.replicas_to_aggregate : plan_.workers;
    return (after - before) * global_samples_at(plan_, s) * r / plan_.workers;
  }
};

/// ExchangeKind::ps_bounded — every worker pushes once per global step (its clock); it may run
/// ahead of the applied updates by at most --max-staleness steps (the ps holds its reply).
class BoundedPsExchange final : public PsExchange {
 public:
  using PsExchange::PsExchange;
  void start(Model& model, const CheckpointState* resume, std::int64_t global_step) override {
    PsExchange::start(model, resume, global_step);
    clock_ = global_step;  // the ps's clocks start there too (LOAD)
  }
  [[nodiscard]] std::int64_t local_steps(int /*epoch*/) const override {
    return worker_steps_per_epoch(plan_, true, 0);
  }

 protected:
  std::int64_t next_step(const PushResult& p) override {
    // A reply with the stop comes from a ps that applies no more updates: the run ends at its
    // step, not at this worker's clock, whose last pushes may wait for updates that never come.
    if (p.stop_requested) return clock_ = std::min(clock_ + 1, p.global_step);
    return p.dropped ? clock_ : ++clock_;  // dropped: past --max-steps
  }
  [[nodiscard]] std::int64_t samples_between(std::int64_t s, std::int64_t before,
                                             std::int64_t after) const override {
    return (after - before) * global_samples_at(plan_, s);
  }
  [[nodiscard]] std::int64_t wait_step() const override { return clock_; }

 private:
  std::int64_t clock_ = 0;  ///< this worker's pushes (+ the start step): its next update
};

}  // namespace

std::unique_ptr<GradientExchange> make_ps_exchange(const Config& c, const Cluster& cluster,
                                                   const TrainPlan& plan, Model& model) {
  switch (exchange_kind(c)) {
    case ExchangeKind::ps_sync:
      return std::make_unique<SyncPsExchange>(c, cluster, plan, model);
    case ExchangeKind::ps_bounded:
      return std::make_unique<BoundedPsExchange>(c, cluster, plan, model);
    default:
      return std::make_unique<PsExchange>(c, cluster, plan, model);
  }
}

}  // namespace dtrain
