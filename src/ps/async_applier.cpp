// dtrain/ps/async_applier.cpp — the ps_async update rule: Downpour SGD (Dean et al. 2012). A
// push takes the next global step when its first chunk arrives, and is applied chunk by chunk as
// the chunks come, each chunk's reply sent at once from the ring slot the update wrote its new
// values into (ps/server_io.cpp). The momentum rule is --async-momentum: dana (per-worker
// momentum, the reply is the look-ahead position: optim/dana.hpp) or one Optimizer (lr-scaled,
// compensated, as-given); --delay-compensation λ0 corrects the gradient for its staleness first
// (DC-ASGD, optim/delay_compensation.hpp); with --stale-lr inverse it is divided by its
// staleness τ ≥ 1 (Zhang et al. 2016). A layer-wise optimizer (--optimizer lars | lamb) needs
// each tensor whole for its trust ratio: its push is received whole (the shard holds whole
// tensors: ps/sharding.hpp tensor_shard_ranges), takes its global step then, is applied at once
// and answered with the shard's new parameters; --stale-lr and --delay-compensation correct the
// gradient first as for a chunk, and no ring is shared (--ps-shm is for chunk-wise updates).
#include <algorithm>
#include <optional>

#include "dtrain/core/log.hpp"
#include "dtrain/core/timeline.hpp"
#include "dtrain/optim/dana.hpp"
#include "dtrain/optim/delay_compensation.hpp"
#include "update_rule.hpp"

namespace dtrain {
namespace {

class AsyncApplier final : public UpdateRule {
 public:
  AsyncApplier(ServerCore& core, std::int64_t total_steps, const ShardTensors& tensors)
      : core_(core), whole_(is_layerwise(core.config().optimizer)) {
    const Config& c = core.config();
    const std::size_t n = core.size();
    if (c.delay_compensation > 0.0f) dc_.emplace(n, core.workers(), c.delay_compensation);
    // DANA keeps its own momenta (per worker, and their sum as the checkpoint's m); every other
    // rule is one Optimizer over the shard.
    if (uses_dana(c)) {
      dana_.emplace(c, core.backend(), n, core.workers(), total_steps, tensors.no_decay);
      dana_->load(dana_->momentum_sum(), core.params(), 0);  // zero momenta: θ̂ = θ
    } else {
      opt_.emplace(c, core.backend(), n, total_steps, tensors.no_decay, tensors.segments);
      opt_->use_async_momentum(core.workers());  // --async-momentum
    }
  }

  void on_push(int w, const MsgHeader& h) override {
    Incoming& r = core_.request(w);
    r.staleness = 0;
    if (whole_) {  // into w's own shard-sized buffer, kept from push to push
      r.own.resize(core_.size());
      core_.start(w, kTagPush, h, Fate::whole, {r.own.data()});
      return;
    }
    core_.start(w, kTagPush, h, Fate::undecided, {nullptr}, (h.flags & kFlagShm) != 0);
  }

  void on_chunk(int w, std::size_t c, std::size_t at) override {
    Incoming& r = core_.request(w);
    if (r.fate == Fate::whole) return;  // applied by on_pushed()
    if (r.fate == Fate::undecided) decide(w);
    if (r.fate == Fate::apply) apply_chunk(w, c, at);
    else if (r.shm) answer_in_slot(w, c, at);  // not applied: the current parameters
  }

  void on_pushed(int w) override {
    Incoming& r = core_.request(w);
    if (r.fate == Fate::whole) return apply_whole(w);
    if (r.fate == Fate::undecided) decide(w);  // a shard without chunks
    if (r.fate == Fate::apply) {               // every chunk's reply has gone
      ++core_.stats().updates;
      core_.count_used(w, r.staleness);
    } else if (r.shm) {  // every chunk has been answered in its slot already
      core_.reply_header(w, kTagReply, r.step, r.staleness, kFlagDropped);
    } else {
      core_.reply_params(w, r.staleness, kFlagDropped);
    }
  }

  void on_load() override {
    if (dana_) dana_->load(dana_->momentum_sum(), core_.params(), core_.global_step());
  }

  /// DANA: the momentum sum.
  float* state_m() override { return dana_ ? dana_->momentum_sum() : opt_->m(); }
  float* state_v() override { return dana_ ? nullptr : opt_->v(); }

  void on_sent(int w, const float* values, std::size_t begin, std::size_t end) override {
    if (dc_) dc_->sent(w, values, begin, end);
  }

  bool shares_rings() const override { return core_.config().ps_shm && !whole_; }

 private:
  /// The push whose first chunk has arrived takes the next global step (its staleness: updates
  /// since w's parameters) and is applied chunk by chunk from here — unless the ps has stopped
  /// applying updates or it carries no gradient (non-finite, skipped).
  void decide(int w) {
    Incoming& r = core_.request(w);
    r.fate = Fate::drop;
    r.step = core_.global_step();  // through a shared ring, the reply's chunks are θ from here on
    if (core_.finished()) {
      ++core_.stats().ignored;
      return;
    }
    if (r.h.samples == 0) return;  // just the parameters back, the step's rhythm kept
    r.fate = Fate::apply;
    r.step = core_.advance_step();
    r.staleness = r.step - r.h.seen_step;
    core_.reply_header(w, kTagReply, r.step + 1, r.staleness, 0);
  }

  /// Applies chunk c of worker w's push (chunk message `at`, in its ring slot) and sends it back
  /// from that slot, where the update wrote the chunk's new values (DANA: θ̂, where w computes
  /// next) over the gradient (kRingSlots).
  void apply_chunk(int w, std::size_t c, std::size_t at) {
    const TimelineSpan span("apply", "optimizer");
    Incoming& r = core_.request(w);
    float* g = core_.chunk_dest(r, at);
    float* p = core_.params();
    const std::size_t b = core_.chunks().begin(c), e = b + core_.chunks().size(c);
    core_.settle(c);  // replies still leaving from the shard (pulls, held replies) read old values
    correct(w, g, b, e);
    const double t0 = now_seconds();
    if (dana_) dana_->apply_into_grads(w, p, g, r.step, b, e);
    else opt_->apply_into_grads(p, g, r.step, b, e, stale_lr_scale(w));
    core_.stats().optimizer_seconds += now_seconds() - t0;
    if (dc_) dc_->sent(w, dana_ ? dana_->look_ahead() : p, b, e);  // the values g now holds
    core_.send_slot(w, at, g, e - b);
  }

  /// --delay-compensation, then --stale-lr inverse, on the gradient g of floats [b, e) of worker
  /// w's push, before its update: DC-ASGD's g̃ (its mean square of the gradients as pushed) takes
  /// lr/τ. Momentum (DANA too) divides g̃ by τ, its share of the momentum; sgd, Adam, LARS and
  /// LAMB divide the update's learning rate (stale_lr_scale()): Adam, LARS and LAMB normalize a
  /// gradient's scale away, and sgd's weight decay takes lr/τ too.
  void correct(int w, float* g, std::size_t b, std::size_t e) {
    if (dc_) dc_->compensate(w, g, core_.params(), b, e);
    const float s = stale_factor(w);
    if (s != 1.0f && !scales_lr()) core_.backend().scale(g, s, e - b);
  }

  /// 1/τ for a push τ > 1 steps stale under --stale-lr inverse, else 1.
  float stale_factor(int w) {
    const Incoming& r = core_.request(w);
    return core_.config().stale_lr == StaleLr::inverse && r.staleness > 1
               ? 1.0f / static_cast<float>(r.staleness)
               : 1.0f;
  }
  /// Whether --stale-lr inverse divides the learning rate rather than the gradient (momentum, DANA
  /// too, divides the gradient).
  bool scales_lr() const { return core_.config().optimizer != OptimizerKind::momentum; }
  /// The learning-rate factor of worker w's update: 1/τ where correct() did not divide g.
  float stale_lr_scale(int w) { return scales_lr() ? stale_factor(w) : 1.0f; }

  /// A layer-wise optimizer's push, arrived whole: takes the next global step and is applied to
  /// the whole shard at once (unless the ps has stopped applying updates or it carries no
  /// gradient); the reply is the shard's parameters.
  void apply_whole(int w) {
    Incoming& r = core_.request(w);
    r.step = core_.global_step();
    if (core_.finished()) ++core_.stats().ignored;
    if (core_.finished() || r.h.samples == 0) return core_.reply_params(w, 0, kFlagDropped);
    const TimelineSpan span("apply", "optimizer");
    r.step = core_.advance_step();
    r.staleness = r.step - r.h.seen_step;
    core_.settle_all();  // replies still leaving from the shard read old values
    correct(w, r.own.data(), 0, core_.size());
    const double t0 = now_seconds();
    opt_->apply(core_.params(), r.own.data(), r.step, stale_lr_scale(w));
    core_.stats().optimizer_seconds += now_seconds() - t0;
    ++core_.stats().updates;
    core_.count_used(w, r.staleness);
    core_.reply_params(w, r.staleness);
  }

  /// A push through the shared ring that is not applied: chunk c of its reply is the shard's
  /// current values, written into the chunk's slot.
  void answer_in_slot(int w, std::size_t c, std::size_t at) {
    const Incoming& r = core_.request(w);
    float* g = core_.chunk_dest(r, at);
    const float* p = core_.params();
    const std::size_t b = core_.chunks().begin(c), e = b + core_.chunks().size(c);
    std::copy(p + b, p + e, g);
    if (dc_) dc_->sent(w, p, b, e);
    core_.send_slot(w, at, g, e - b);
  }

  ServerCore& core_;
  std::optional<Optimizer> opt_;         ///< the update, unless dana_ makes it
  std::optional<DelayCompensation> dc_;  ///< --delay-compensation
  std::optional<DanaMomentum> dana_;     ///< --async-momentum dana
  const bool whole_;                     ///< lars, lamb: each push applied whole (apply_whole)
};

}  // namespace

std::unique_ptr<UpdateRule> make_async_applier(ServerCore& core, std::int64_t total_steps,
                                               const ShardTensors& tensors) {
  return std::make_unique<AsyncApplier>(core, total_steps, tensors);
}

}  // namespace dtrain
