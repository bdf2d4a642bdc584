// dtrain/ps/step_aggregator.cpp — the update rules that make one update per global step from
// several workers' whole gradients (ps/update_rule.hpp). A push joins the aggregate of its step
// once its whole gradient is in; an aggregate of R pushes becomes that step's update (their mean,
// weighted by samples, summed in worker order so that the update does not depend on arrival
// order; a push without samples — a shorter shard's last step — takes none of the R places); the
// push's reply is held until the step it waits for. A complete step's update is made once every
// ps rank agrees that the run goes on (ServerCore::agree_on_step; with backup workers, outside a
// pipeline, the workers name one step to every ps: PsClient::use_common_seen_step): a push that
// carries a stop joins its step without a gradient, and the step it joins, or an earlier one, is
// where the updates end on every shard, whichever shard heard of the stop first.
//   SyncAggregator     a push computed on the parameters of step t joins step t; R =
//                      --replicas-to-aggregate; a push for a step already applied is dropped (late:
//                      backup workers) and answered at once (TensorFlow's SyncReplicasOptimizer,
//                      Chen et al. 2016); its reply waits for step t's update.
//   BoundedAggregator  worker w's c-th push joins step c, R = every worker; the reply waits until
//                      the parameters are at most S (--max-staleness) steps behind w's next push
//                      (stale synchronous parallel, Ho et al. 2013). S = 0 is bulk synchronous.
#include <algorithm>
#include <map>
#include <utility>

#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timeline.hpp"
#include "update_rule.hpp"

namespace dtrain {
namespace {

/// Element loops shorter than this stay on one thread (--ps-threads): starting a team costs more.
constexpr std::ptrdiff_t kParallelMin = 1 << 16;

/// The gradients that make one global step's update.
struct Aggregate {
  std::vector<std::vector<float>> grads;  ///< per worker (empty: no push, or no samples)
  std::vector<int> samples;               ///< per worker, -1: no push yet
  std::vector<std::int64_t> seen;         ///< per worker: the step its parameters came from
  int pushes = 0;                         ///< pushes joined
  int gradients = 0;                      ///< pushes joined that carry samples
};

/// One update per global step from `replicas` pushes; subclasses say which step a push joins.
class StepAggregator : public UpdateRule {
 public:
  StepAggregator(ServerCore& core, std::int64_t total_steps, const ShardTensors& tensors,
                 int replicas)
      : core_(core), replicas_(replicas), opt_(core.config(), core.backend(), core.size(),
                                               total_steps, tensors.no_decay, tensors.segments) {}

  void on_push(int w, const MsgHeader& h) override {
    Incoming& r = core_.request(w);
    r.step = step_of(w, h);
    r.staleness = staleness_of(r.step, h);
    Fate fate = Fate::join;
    if (core_.finished()) {
      fate = Fate::drop;
      ++core_.stats().ignored;
    } else if (late(r.step)) {  // computed on older parameters: late, dropped
      fate = Fate::drop;
      r.staleness = core_.global_step() - h.seen_step;
      core_.count_dropped(w);
    }
    if (fate == Fate::drop) return core_.start(w, kTagPush, h, fate, {nullptr});  // read, not kept
    r.own = take_buffer();  // the whole gradient joins an aggregate
    core_.start(w, kTagPush, h, fate, {r.own.data()});
  }

  void on_pushed(int w) override {
    Incoming& r = core_.request(w);
    if (r.fate == Fate::join) join(w);
    else answer_late(w);
    if (!r.own.empty()) free_.push_back(std::exchange(r.own, {}));
  }

  void on_load() override { pending_.clear(); }

  void on_finished() override {
    for (auto& [step, a] : pending_)
      for (auto& g : a.grads)
        if (!g.empty()) free_.push_back(std::move(g));
    pending_.clear();
  }

  float* state_m() override { return opt_.m(); }
  float* state_v() override { return opt_.v(); }
  /// Where every push of a step is needed (sync without backup workers, SSP), every ps sees the
  /// same pushes make each step, so all reach the step to agree on. With backup workers too,
  /// outside a pipeline: a push names the same step to every ps (PsClient::use_common_seen_step),
  /// so the R pushes that complete a step on one ps reach every other at that step. A pipeline's
  /// stage ranks pull from their own stage's ps only: with backup workers a stop there ends the
  /// updates on each ps at once, and the stages may end a step apart.
  [[nodiscard]] bool agrees_on_stop() const override {
    return replicas_ >= core_.workers() || core_.config().pipeline_stages <= 1;
  }
  void on_agreed() override { apply_complete(); }

 protected:
  /// The global step whose update worker w's push (header h) joins.
  virtual std::int64_t step_of(int w, const MsgHeader& h) = 0;
  /// The staleness reported for a push joining `step` (a late one's: the steps it missed).
  [[nodiscard]] virtual std::int64_t staleness_of(std::int64_t step, const MsgHeader& h) const = 0;
  /// The global step a push joining `step` is answered at.
  [[nodiscard]] virtual std::int64_t reply_at(std::int64_t step) const = 0;

  ServerCore& core_;

 private:
  /// A push for `step` comes too late: that update is made, or being agreed on (its pushes are
  /// chosen).
  [[nodiscard]] bool late(std::int64_t step) const {
    return step < core_.global_step() || (step == core_.global_step() && core_.deciding());
  }

  /// Answers worker w's push that came too late (or after the ps finished) as dropped: at once
  /// with the parameters as they stand, or — while the ps ranks agree on the update of its step —
  /// once that update is made, so that the worker does not compute a gradient again on the
  /// parameters of a step whose pushes are chosen (late everywhere, where the ps share one step).
  void answer_late(int w) {
    const Incoming& r = core_.request(w);
    if (!core_.finished() && r.step == core_.global_step() && core_.deciding())
      core_.hold(w, r.step + 1, r.staleness, -1, kFlagDropped);
    else core_.reply_params(w, r.staleness, kFlagDropped);
  }

  /// A buffer of n floats, reused.
  std::vector<float> take_buffer() {
    if (free_.empty()) return std::vector<float>(core_.size());
    std::vector<float> b = std::move(free_.back());
    free_.pop_back();
    return b;
  }

  void join(int w);
  void apply_complete();
  void sum_weighted(const Aggregate& a, std::int64_t total);

  const int replicas_;
  Optimizer opt_;
  std::map<std::int64_t, Aggregate> pending_;  ///< by global step
  std::vector<std::vector<float>> free_;       ///< shard-sized buffers to reuse
  std::vector<float> scratch_;                 ///< the weighted sum
};

/// Worker w's whole gradient joins the aggregate of its step, and its reply waits for
/// reply_at(step) — unless that update was made without it meanwhile (late:
/// --replicas-to-aggregate) or the ps stopped applying updates.
void StepAggregator::join(int w) {
  Incoming& r = core_.request(w);
  if (core_.finished()) {
    ++core_.stats().ignored;
    core_.reply_params(w, 0, kFlagDropped);
    return;
  }
  if (late(r.step)) {
    core_.count_dropped(w);
    r.staleness = core_.global_step() - r.h.seen_step;
    answer_late(w);
    return;
  }
  Aggregate& a = pending_[r.step];
  if (a.samples.empty()) {
    a.grads.resize(core_.workers());
    a.samples.assign(core_.workers(), -1);
    a.seen.assign(core_.workers(), 0);
  }
  if (a.samples[w] >= 0)
    throw Error(format_error(core_.who() + ": worker " + std::to_string(w) +
                                 " pushed twice for global step " + std::to_string(r.step),
                             __FILE__, __LINE__));
  // A push that carries a stop brings no gradient: its step's verdict will be the stop.
  const int samples = (r.h.flags & kFlagStop) ? 0 : r.h.samples;
  a.samples[w] = samples;
  a.seen[w] = r.h.seen_step;
  if (samples > 0) a.grads[w] = std::exchange(r.own, {});
  ++a.pushes;
  a.gradients += samples > 0 ? 1 : 0;
  core_.hold(w, reply_at(r.step), r.staleness, r.step);
  apply_complete();
}

/// scratch_ = Σ_w (n_w / N)·g_w in worker order: the same bits whatever the arrival order.
void StepAggregator::sum_weighted(const Aggregate& a, std::int64_t total) {
  std::vector<float>& sum = scratch_;
  sum.assign(core_.size(), 0.0f);
  for (int w = 0; w < core_.workers(); ++w) {
    if (a.samples[w] <= 0) continue;
    const float f = static_cast<float>(a.samples[w]) / static_cast<float>(total);
    const float* g = a.grads[w].data();
    float* s = sum.data();
    const auto n = static_cast<std::ptrdiff_t>(core_.size());
    // Element-wise, worker order kept per element: the same bits on any thread count.
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (std::ptrdiff_t i = 0; i < n; ++i) s[i] += f * g[i];
  }
}

/// Applies the aggregates that are complete, in step order: R gradients with samples, or every
/// worker's push (a shorter shard's last step holds empty pushes, which take none of the R places:
/// the step waits for the gradients it has instead of applying nothing) — each once the ps ranks
/// agree that the run goes on (on_agreed() comes back here when the verdict is awaited; a stop
/// verdict finishes the ps, and the loop releases every held reply).
void StepAggregator::apply_complete() {
  const auto complete = [&](const Aggregate& a) {
    return a.gradients >= replicas_ || a.pushes >= core_.workers();
  };
  for (auto it = pending_.begin(); it != pending_.end() && it->first == core_.global_step() &&
                                   complete(it->second) && !core_.finished();
       it = pending_.begin()) {
    if (core_.agree_on_step() != Verdict::apply) return;
    Aggregate& a = it->second;
    std::int64_t total = 0;
    for (int s : a.samples) total += std::max(s, 0);
    if (total > 0) {
      const TimelineSpan span("aggregate+apply", "optimizer");
      const double t0 = now_seconds();
      sum_weighted(a, total);
      core_.settle_all();
      opt_.apply(core_.params(), scratch_.data(), core_.global_step());
      core_.stats().optimizer_seconds += now_seconds() - t0;
    }
    for (int w = 0; w < core_.workers(); ++w) {
      if (a.samples[w] < 0) continue;
      core_.count_used(w, core_.global_step() - a.seen[w]);
      if (!a.grads[w].empty()) free_.push_back(std::move(a.grads[w]));
    }
    core_.advance_step();
    ++core_.stats().updates;
    pending_.erase(it);
  }
}

/// ps_sync: SyncReplicasOptimizer with backup workers.
class SyncAggregator final : public StepAggregator {
 public:
  SyncAggregator(ServerCore& core, std::int64_t total_steps, const ShardTensors& tensors)
      : StepAggregator(core, total_steps, tensors, replicas(core)) {}

 private:
  static int replicas(const ServerCore& core) {
    const int r = core.config().replicas_to_aggregate;
    return r > 0 ? std::min(r, core.workers()) : core.workers();
  }
  std::int64_t step_of(int /*w*/, const MsgHeader& h) override { return h.seen_step; }
  std::int64_t staleness_of(std::int64_t /*step*/, const MsgHeader& /*h*/) const override {
    return 0;
  }
  std::int64_t reply_at(std::int64_t step) const override { return step + 1; }
};

/// ps_bounded: stale synchronous parallel.
class BoundedAggregator final : public StepAggregator {
 public:
  BoundedAggregator(ServerCore& core, std::int64_t total_steps, const ShardTensors& tensors)
      : StepAggregator(core, total_steps, tensors, core.workers()), clock_(core.workers(), 0) {}

  void on_load() override {
    StepAggregator::on_load();
    std::fill(clock_.begin(), clock_.end(), core_.global_step());
  }

 private:
  std::int64_t step_of(int w, const MsgHeader& /*h*/) override { return clock_[w]++; }
  std::int64_t staleness_of(std::int64_t step, const MsgHeader& h) const override {
    return step - h.seen_step;
  }
  std::int64_t reply_at(std::int64_t step) const override {
    return step + 1 - core_.config().max_staleness;
  }

  std::vector<std::int64_t> clock_;  ///< pushes of each worker (+ the step it started at)
};

}  // namespace

std::unique_ptr<UpdateRule> make_sync_aggregator(ServerCore& core, std::int64_t total_steps,
                                                 const ShardTensors& tensors) {
  return std::make_unique<SyncAggregator>(core, total_steps, tensors);
}

std::unique_ptr<UpdateRule> make_bounded_aggregator(ServerCore& core, std::int64_t total_steps,
                                                    const ShardTensors& tensors) {
  return std::make_unique<BoundedAggregator>(core, total_steps, tensors);
}

}  // namespace dtrain
