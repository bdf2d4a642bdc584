// dtrain/ps/server.cpp — the ps event loop: one pre-posted header receive per worker, MPI_Testany
// with back-off (comm/mpi_check); the optimizer runs on the CPU backend over the shard. Pushes are
// applied on arrival, chunk by chunk as their payload arrives, each chunk's reply sent at once
// (async), or gathered into per-step aggregates (sync through the ps, bounded staleness) whose
// replies are held until the update they wait for (ps/server.hpp, ps/protocol.hpp).
#include "dtrain/ps/server.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "dtrain/comm/big_message.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timeline.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/optim/dana.hpp"
#include "dtrain/optim/delay_compensation.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/protocol.hpp"

namespace dtrain {
namespace {

/// Element loops shorter than this stay on one thread (--ps-threads): starting a team costs more.
constexpr std::ptrdiff_t kParallelMin = 1 << 16;

struct WorkerSlot {
  MsgHeader in;   ///< the pre-posted header receive
  MsgHeader out;  ///< the header of the last reply (sent from here)
  MPI_Request recv = MPI_REQUEST_NULL, send = MPI_REQUEST_NULL;
  bool done = false;
};



/// The gradients that make one global step's update (sync through the ps, bounded staleness).
struct Aggregate {
  std::vector<std::vector<float>> grads;  ///< per worker (empty: no push, or no samples)
  std::vector<int> samples;               ///< per worker, -1: no push yet
  std::vector<std::int64_t> seen;         ///< per worker: the step its parameters came from
  int pushes = 0;
};

/// A reply held back until global_step reaches wait_step (or the ps stops applying updates).
struct HeldReply {
  int worker;
  std::int64_t wait_step;
  std::int64_t staleness;
};

class ParameterServer {
 public:
  ParameterServer(const Cluster& cluster, const Config& c, const ShardRange& shard,
                  std::int64_t total_steps, const std::atomic<bool>& stop_flag,
                  const std::vector<FloatRange>& no_decay)
      : cluster_(cluster), c_(c), kind_(exchange_kind(c)), workers_(cluster.num_workers()),
        n_(shard.size()), who_("ps " + std::to_string(cluster.me().index)), stop_flag_(stop_flag),
        chunks_(n_, static_cast<std::size_t>(c.ps_chunk_kb) * 1024),
        backend_(make_cpu_backend()), params_(*backend_, n_),
        opt_(c, *backend_, n_, total_steps, no_decay), max_steps_(c.max_steps),
        clock_(workers_, 0), slots_(workers_) {
    replicas_ = kind_ == ExchangeKind::ps_sync && c.replicas_to_aggregate > 0
                    ? std::min(c.replicas_to_aggregate, workers_)
                    : workers_;
    opt_.use_async_momentum(workers_);  // --async-momentum (async only)
    if (kind_ == ExchangeKind::ps_async && c.delay_compensation > 0.0f)
      dc_.emplace(n_, workers_, c.delay_compensation);
    if (kind_ == ExchangeKind::ps_async && c.async_momentum == AsyncMomentum::dana &&
        opt_.kind() == OptimizerKind::momentum) {
      dana_.emplace(c, *backend_, n_, workers_, total_steps, no_decay);
      dana_->load(opt_.m(), params_.data(), 0);  // zero momenta: θ̂ = θ
    }
    stats_.staleness_histogram.assign(kStalenessBins, 0);
    stats_.worker_pushes.assign(workers_, 0);
    stats_.worker_dropped.assign(workers_, 0);
    sending_.resize(chunks_.count());
    for (int w = 0; w < workers_; ++w) post_recv(w);
  }

  PsStats run() {
    const double t0 = now_seconds();
    std::vector<MPI_Request> reqs(workers_);
    int remaining = workers_;
    while (remaining > 0) {
      for (int w = 0; w < workers_; ++w) reqs[w] = slots_[w].recv;
      MPI_Status st;
      const int w = wait_any(reqs, c_.timeout, who_ + " waiting for worker messages", &st);
      if (w == MPI_UNDEFINED) break;
      slots_[w].recv = MPI_REQUEST_NULL;
      const double b0 = now_seconds();
      const MsgHeader h = slots_[w].in;
      if (h.flags & kFlagStop) stop_seen_ = true;
      if (st.MPI_TAG == kTagDone) {
        slots_[w].done = true;
        --remaining;
      } else {
        on_request(w, st.MPI_TAG, h);
        post_recv(w);  // the request is answered or held; its payload has been received
      }
      release_held();
      stats_.busy_seconds += now_seconds() - b0;
    }
    for (auto& s : slots_) wait_one(s.send, c_.timeout, who_ + " flushing replies");
    settle_all();
    stats_.wall_seconds = now_seconds() - t0;
    return stats_;
  }

 private:
  void post_recv(int w) {
    DT_CHECK_MPI(MPI_Irecv(&slots_[w].in, sizeof(MsgHeader), MPI_BYTE, cluster_.worker_rank(w),
                           MPI_ANY_TAG, cluster_.world(), &slots_[w].recv));
  }

  /// Receives the `parts` payload parts of worker w's request, each straight into its array
  /// (nullptr: into scratch, dropped), chunk by chunk; `per_chunk(c)`, if given, runs as soon as
  /// chunk c of every part is in (protocol.hpp: part 0's chunks first, so with one part chunk c is
  /// the next message).
  template <typename PerChunk>
  void receive(int w, std::initializer_list<float*> parts, PerChunk per_chunk) {
    const std::string what = who_ + " receiving from worker " + std::to_string(w);
    std::vector<MPI_Request>& reqs = recv_reqs_;
    reqs.assign(parts.size() * chunks_.count(), MPI_REQUEST_NULL);
    std::size_t at = 0, dropped = 0;
    for (float* part : parts) dropped += part ? 0 : 1;
    if (discard_.size() < dropped * n_) discard_.resize(dropped * n_);
    dropped = 0;
    for (float* part : parts) {
      float* into = part ? part : discard_.data() + n_ * dropped++;
      for (std::size_t c = 0; c < chunks_.count(); ++c, ++at)
        irecv_bytes(into + chunks_.begin(c), chunks_.size(c) * sizeof(float),
                    cluster_.worker_rank(w), 0, cluster_.payload_comm(), &reqs[at]);
    }
    if (parts.size() != 1) {
      wait_all(reqs, comm_timeout(), what);
      for (std::size_t c = 0; c < chunks_.count(); ++c) per_chunk(c);
      return;
    }
    for (std::size_t c = 0; c < chunks_.count(); ++c) {
      wait_one(reqs[c], comm_timeout(), what);
      per_chunk(c);
    }
  }

  /// Sends chunk c of `part` (a shard array; nullptr: zeros) to worker w; it stays in flight
  /// until settle(c).
  void send_chunk(int w, const float* part, std::size_t c) {
    const std::size_t b = chunks_.begin(c), len = chunks_.size(c);
    const float* from = part ? part + b : zeros_.get(len, chunks_.largest());
    std::vector<MPI_Request>& sending = sending_[c];
    // Replies with no update in between (pulls, held replies) pile up here: keep the list short.
    if (sending.size() >= 2 * static_cast<std::size_t>(workers_)) settle(c);
    sending.push_back(MPI_REQUEST_NULL);
    isend_bytes(from, len * sizeof(float), cluster_.worker_rank(w), 0, cluster_.payload_comm(),
                &sending.back());
  }

  /// Waits for the reply chunks still being sent from chunk c of the shard's arrays: call before
  /// changing them (their receives are posted, so they complete: protocol.hpp).
  void settle(std::size_t c) {
    wait_all(sending_[c], comm_timeout(), who_ + " sending parameters");
    sending_[c].clear();
  }
  void settle_all() {
    for (std::size_t c = 0; c < chunks_.count(); ++c) settle(c);
  }

  /// No more updates: --max-steps reached or a stop requested. Every held reply is released.
  [[nodiscard]] bool finished() const {
    return stop_flag_.load() || stop_seen_ || (max_steps_ > 0 && global_step_ >= max_steps_);
  }

  /// Sends worker w a reply header (after its previous one went) saying `global_step`.
  void reply_header(int w, int tag, std::int64_t global_step, std::int64_t staleness, int flags) {
    WorkerSlot& s = slots_[w];
    wait_one(s.send, comm_timeout(), who_ + " sending to worker " + std::to_string(w));
    s.out = MsgHeader{};
    s.out.global_step = global_step;
    s.out.staleness = staleness;
    s.out.flags = flags | ((stop_flag_.load() || stop_seen_) ? kFlagStop : 0);
    DT_CHECK_MPI(MPI_Isend(&s.out, sizeof(MsgHeader), MPI_BYTE, cluster_.worker_rank(w), tag,
                           cluster_.world(), &s.send));
  }

  /// Sends header + the given shard arrays (nullptr: zeros) to worker w, all chunks at once.
  void reply(int w, int tag, std::int64_t staleness, int flags,
             std::initializer_list<const float*> parts) {
    reply_header(w, tag, global_step_, staleness, flags);
    for (const float* part : parts)  // protocol.hpp: part by part, each chunk by chunk
      for (std::size_t c = 0; c < chunks_.count(); ++c) send_chunk(w, part, c);
  }

  void reply_params(int w, std::int64_t staleness = 0, int flags = 0) {
    reply(w, kTagReply, staleness, flags, {params_.data()});
    if (dc_) dc_->sent(w, params_.data(), 0, n_);
  }

  void on_request(int w, int tag, const MsgHeader& h) {
    switch (tag) {
      case kTagPull:
        if (h.wait_step <= global_step_ || finished()) reply_params(w);
        else held_.push_back({w, h.wait_step, 0});
        return;
      case kTagPush:
        on_push(w, h);
        return;
      case kTagLoad:
        settle_all();
        receive(w, {params_.data(), opt_.m(), opt_.v()}, [](std::size_t) {});
        global_step_ = h.global_step;
        if (dana_) dana_->load(opt_.m(), params_.data(), global_step_);
        max_steps_ = h.max_steps;
        std::fill(clock_.begin(), clock_.end(), global_step_);
        pending_.clear();
        reply(w, kTagReply, 0, 0, {});
        std::vector<float>().swap(discard_);  // LOAD comes once per run (protocol.hpp)
        return;
      case kTagSnapshot:
        reply(w, kTagState, 0, 0,
              {params_.data(), dana_ ? dana_->momentum_sum() : opt_.m(), opt_.v()});
        return;
      default:
        throw Error(format_error(who_ + ": unexpected message tag " + std::to_string(tag) +
                                     " from worker " + std::to_string(w), __FILE__, __LINE__));
    }
  }

  void on_push(int w, const MsgHeader& h) {
    if (finished()) {
      ++stats_.ignored;
      receive(w, {nullptr}, [](std::size_t) {});
      reply_params(w, 0, kFlagDropped);
      return;
    }
    switch (kind_) {
      case ExchangeKind::ps_async:
        apply_async(w, h);
        return;
      case ExchangeKind::ps_sync:
        if (h.seen_step < global_step_) {  // computed on older parameters: late, dropped
          ++stats_.dropped;
          ++stats_.worker_dropped[w];
          receive(w, {nullptr}, [](std::size_t) {});
          reply_params(w, global_step_ - h.seen_step, kFlagDropped);
          return;
        }
        join(h.seen_step, w, h);
        held_.push_back({w, h.seen_step + 1, 0});
        break;
      case ExchangeKind::ps_bounded: {
        const std::int64_t step = clock_[w]++;  // w's c-th push makes step c's update
        join(step, w, h);
        held_.push_back({w, step + 1 - c_.max_staleness, step - h.seen_step});
        break;
      }
      case ExchangeKind::allreduce:
        throw Error(format_error(who_ + ": a push in allreduce mode", __FILE__, __LINE__));
    }
    apply_complete();
  }

  /// Downpour: one update from this push, now, chunk by chunk as it arrives; each updated chunk
  /// goes back to w at once. Its staleness: updates since w's parameters.
  void apply_async(int w, const MsgHeader& h) {
    const std::int64_t staleness = global_step_ - h.seen_step;
    if (h.samples == 0) {  // no gradient (non-finite, skipped): just the parameters back
      receive(w, {nullptr}, [](std::size_t) {});
      reply_params(w, 0, kFlagDropped);
      return;
    }
    if (grad_.size() < n_) grad_.resize(n_);
    float* g = grad_.data();
    float* p = params_.data();
    const std::int64_t step = global_step_;
    reply_header(w, kTagReply, step + 1, staleness, 0);
    const TimelineSpan span("apply", "optimizer");
    receive(w, {g}, [&](std::size_t c) {
      const std::size_t b = chunks_.begin(c), e = b + chunks_.size(c);
      settle(c);
      if (c_.stale_lr == StaleLr::inverse && staleness > 1)
        backend_->scale(g + b, 1.0f / static_cast<float>(staleness), e - b);
      if (dc_) dc_->compensate(w, g, p, b, e);
      if (dana_) dana_->apply(w, p, g, step, b, e);
      else opt_.apply(p, g, step, b, e);
      const float* sent = dana_ ? dana_->look_ahead() : p;  // DANA: w computes at θ̂ next
      if (dc_) dc_->sent(w, sent, b, e);
      send_chunk(w, sent, c);
    });
    ++global_step_;
    ++stats_.updates;
    count_used(w, staleness);
  }

  /// Receives w's push into the aggregate of global step `step`.
  void join(std::int64_t step, int w, const MsgHeader& h) {
    Aggregate& a = pending_[step];
    if (a.samples.empty()) {
      a.grads.resize(workers_);
      a.samples.assign(workers_, -1);
      a.seen.assign(workers_, 0);
    }
    if (a.samples[w] >= 0)
      throw Error(format_error(who_ + ": worker " + std::to_string(w) + " pushed twice for global "
                                   "step " + std::to_string(step), __FILE__, __LINE__));
    a.samples[w] = h.samples;
    a.seen[w] = h.seen_step;
    if (h.samples > 0) {
      a.grads[w] = take_buffer();
      receive(w, {a.grads[w].data()}, [](std::size_t) {});
    } else {
      receive(w, {nullptr}, [](std::size_t) {});
    }
    ++a.pushes;
  }

  /// Applies the aggregates that are complete, in step order.
  void apply_complete() {
    for (auto it = pending_.begin(); it != pending_.end() && it->first == global_step_ &&
                                     it->second.pushes >= replicas_ && !finished();
         it = pending_.begin()) {
      Aggregate& a = it->second;
      std::int64_t total = 0;
      for (int s : a.samples) total += std::max(s, 0);
      if (total > 0) {
        const TimelineSpan span("aggregate+apply", "optimizer");
        // Σ_w (n_w / N)·g_w in worker order: the same bits whatever the arrival order.
        std::vector<float>& sum = scratch_;
        sum.assign(n_, 0.0f);
        for (int w = 0; w < workers_; ++w) {
          if (a.samples[w] <= 0) continue;
          const float f = static_cast<float>(a.samples[w]) / static_cast<float>(total);
          const float* g = a.grads[w].data();
          float* s = sum.data();
          const auto n = static_cast<std::ptrdiff_t>(n_);
          // Element-wise, worker order kept per element: the same bits on any thread count.
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
          for (std::ptrdiff_t i = 0; i < n; ++i) s[i] += f * g[i];
        }
        settle_all();
        opt_.apply(params_.data(), sum.data(), global_step_);
      }
      for (int w = 0; w < workers_; ++w) {
        if (a.samples[w] < 0) continue;
        count_used(w, global_step_ - a.seen[w]);
        if (!a.grads[w].empty()) free_.push_back(std::move(a.grads[w]));
      }
      ++global_step_;
      ++stats_.updates;
      pending_.erase(it);
    }
  }

  /// Answers every held request whose step has come (all of them once finished()).
  void release_held() {
    const bool all = finished();
    auto keep = held_.begin();
    for (auto it = held_.begin(); it != held_.end(); ++it) {
      if (all || it->wait_step <= global_step_) {
        reply_params(it->worker, it->staleness);
      } else {
        *keep++ = *it;
      }
    }
    held_.erase(keep, held_.end());
    if (all) pending_.clear();
  }

  void count_used(int w, std::int64_t staleness) {
    ++stats_.pushes;
    ++stats_.worker_pushes[w];
    stats_.staleness_sum += staleness;
    stats_.staleness_max = std::max(stats_.staleness_max, staleness);
    ++stats_.staleness_histogram[std::clamp<std::int64_t>(staleness, 0, kStalenessBins - 1)];
  }

  std::vector<float> take_buffer() {
    if (free_.empty()) return std::vector<float>(n_);
    std::vector<float> b = std::move(free_.back());
    free_.pop_back();
    return b;
  }

  const Cluster& cluster_;
  const Config& c_;
  const ExchangeKind kind_;
  const int workers_;
  const std::size_t n_;
  const std::string who_;
  const std::atomic<bool>& stop_flag_;
  const ChunkLayout chunks_;
  std::unique_ptr<Backend> backend_;
  DeviceBuffer<float> params_;
  Optimizer opt_;
  std::optional<DelayCompensation> dc_;  ///< --delay-compensation (async only)
  std::optional<DanaMomentum> dana_;     ///< --async-momentum dana (async only)
  int replicas_ = 1;
  std::int64_t global_step_ = 0, max_steps_ = 0;
  bool stop_seen_ = false;              ///< a worker forwarded a stop request: tell every worker
  std::vector<std::int64_t> clock_;     ///< bounded staleness: pushes of each worker (+ start)
  std::map<std::int64_t, Aggregate> pending_;  ///< by global step
  std::vector<HeldReply> held_;
  std::vector<std::vector<float>> free_;  ///< gradient buffers to reuse
  std::vector<float> scratch_;  ///< sync sums
  std::vector<float> discard_;  ///< payloads received to be dropped
  std::vector<float> grad_;     ///< async: the push being applied
  ZeroChunk zeros_;             ///< SNAPSHOT without m / v
  std::vector<MPI_Request> recv_reqs_;
  std::vector<std::vector<MPI_Request>> sending_;  ///< per chunk: reply sends in flight
  std::vector<WorkerSlot> slots_;
  PsStats stats_;
};

}  // namespace

PsStats run_parameter_server(const Cluster& cluster, const Config& config, const ShardRange& shard,
                             std::int64_t total_steps, const std::atomic<bool>& stop_flag,
                             const std::vector<FloatRange>& no_decay) {
  ParameterServer ps(cluster, config, shard, total_steps, stop_flag, no_decay);
  return ps.run();
}

}  // namespace dtrain
