// dtrain/ps/server.cpp — the ps event loop: one pre-posted receive per worker, MPI_Testany with
// back-off (comm/mpi_check); the optimizer runs on the CPU backend over the shard. Pushes are
// applied on arrival (async) or gathered into per-step aggregates (sync through the ps, bounded
// staleness) whose replies are held until the update they wait for (ps/server.hpp).
#include "dtrain/ps/server.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "dtrain/comm/big_message.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timeline.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/protocol.hpp"

namespace dtrain {
namespace {

/// Bytes of a message with `floats` floats after the header (std::size_t: a LOAD or SNAPSHOT of a
/// large shard passes 2 GiB; comm/big_message posts those as one derived datatype).
std::size_t message_bytes(std::size_t floats) { return sizeof(MsgHeader) + floats * sizeof(float); }

/// Element loops shorter than this stay on one thread (--ps-threads): starting a team costs more.
constexpr std::ptrdiff_t kParallelMin = 1 << 16;

struct WorkerSlot {
  /// in: the largest request the worker may still send (the chief's LOAD: 3 parts until it came,
  /// then 1; PUSH: 1); out: grows to the largest reply sent (SNAPSHOT, to the chief only: 3 parts).
  std::vector<char> in, out;
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
        backend_(make_cpu_backend()), params_(*backend_, n_),
        opt_(c, *backend_, n_, total_steps, no_decay), max_steps_(c.max_steps),
        clock_(workers_, 0), slots_(workers_) {
    replicas_ = kind_ == ExchangeKind::ps_sync && c.replicas_to_aggregate > 0
                    ? std::min(c.replicas_to_aggregate, workers_)
                    : workers_;
    opt_.use_async_momentum(workers_);  // --async-momentum (async only)
    stats_.staleness_histogram.assign(kStalenessBins, 0);
    stats_.worker_pushes.assign(workers_, 0);
    stats_.worker_dropped.assign(workers_, 0);
    for (int w = 0; w < workers_; ++w) {
      slots_[w].in.resize(message_bytes((w == 0 ? 3 : 1) * n_));  // worker 0 is the chief
      post_recv(w);
    }
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
      MsgHeader h;
      std::memcpy(&h, slots_[w].in.data(), sizeof h);
      if (h.flags & kFlagStop) stop_seen_ = true;
      if (st.MPI_TAG == kTagDone) {
        slots_[w].done = true;
        --remaining;
      } else {
        on_request(w, st.MPI_TAG, h, reinterpret_cast<float*>(slots_[w].in.data() + sizeof h));
        post_recv(w);  // the request is answered or held; its payload has been used or copied
      }
      release_held();
      stats_.busy_seconds += now_seconds() - b0;
    }
    for (auto& s : slots_) wait_one(s.send, c_.timeout, who_ + " flushing replies");
    stats_.wall_seconds = now_seconds() - t0;
    return stats_;
  }

 private:
  void post_recv(int w) {
    irecv_bytes(slots_[w].in.data(), slots_[w].in.size(), cluster_.worker_rank(w), MPI_ANY_TAG,
                cluster_.world(), &slots_[w].recv);
  }

  /// No more updates: --max-steps reached or a stop requested. Every held reply is released.
  [[nodiscard]] bool finished() const {
    return stop_flag_.load() || stop_seen_ || (max_steps_ > 0 && global_step_ >= max_steps_);
  }

  /// Sends header + the given float ranges to worker w (after its previous send completed).
  void reply(int w, int tag, std::int64_t staleness, int flags,
             std::initializer_list<const float*> parts) {
    WorkerSlot& s = slots_[w];
    wait_one(s.send, comm_timeout(), who_ + " sending to worker " + std::to_string(w));
    MsgHeader h;
    h.global_step = global_step_;
    h.staleness = staleness;
    h.flags = flags | ((stop_flag_.load() || stop_seen_) ? kFlagStop : 0);
    const std::size_t bytes = message_bytes(parts.size() * n_);
    if (s.out.size() < bytes) s.out.resize(bytes);
    const std::size_t at = pack_message(s.out.data(), h, parts, 0, n_);
    isend_bytes(s.out.data(), at, cluster_.worker_rank(w), tag, cluster_.world(), &s.send);
  }

  void reply_params(int w, std::int64_t staleness = 0, int flags = 0) {
    reply(w, kTagReply, staleness, flags, {params_.data()});
  }

  void on_request(int w, int tag, const MsgHeader& h, float* payload) {
    switch (tag) {
      case kTagPull:
        if (h.wait_step <= global_step_ || finished()) reply_params(w);
        else held_.push_back({w, h.wait_step, 0});
        return;
      case kTagPush:
        on_push(w, h, payload);
        return;
      case kTagLoad:
        std::memcpy(params_.data(), payload, n_ * sizeof(float));
        if (opt_.m()) std::memcpy(opt_.m(), payload + n_, n_ * sizeof(float));
        if (opt_.v()) std::memcpy(opt_.v(), payload + 2 * n_, n_ * sizeof(float));
        global_step_ = h.global_step;
        max_steps_ = h.max_steps;
        std::fill(clock_.begin(), clock_.end(), global_step_);
        pending_.clear();
        reply_params(w);
        // LOAD comes once per run (protocol.hpp): from now on the chief's requests hold one part.
        std::vector<char>(message_bytes(n_)).swap(slots_[w].in);
        return;
      case kTagSnapshot:
        reply(w, kTagState, 0, 0, {params_.data(), opt_.m(), opt_.v()});
        return;
      default:
        throw Error(format_error(who_ + ": unexpected message tag " + std::to_string(tag) +
                                     " from worker " + std::to_string(w), __FILE__, __LINE__));
    }
  }

  void on_push(int w, const MsgHeader& h, float* g) {
    if (finished()) {
      ++stats_.ignored;
      reply_params(w, 0, kFlagDropped);
      return;
    }
    switch (kind_) {
      case ExchangeKind::ps_async:
        apply_async(w, h, g);
        return;
      case ExchangeKind::ps_sync:
        if (h.seen_step < global_step_) {  // computed on older parameters: late, dropped
          ++stats_.dropped;
          ++stats_.worker_dropped[w];
          reply_params(w, global_step_ - h.seen_step, kFlagDropped);
          return;
        }
        join(h.seen_step, w, h, g);
        held_.push_back({w, h.seen_step + 1, 0});
        break;
      case ExchangeKind::ps_bounded: {
        const std::int64_t step = clock_[w]++;  // w's c-th push makes step c's update
        join(step, w, h, g);
        held_.push_back({w, step + 1 - c_.max_staleness, step - h.seen_step});
        break;
      }
      case ExchangeKind::allreduce:
        throw Error(format_error(who_ + ": a push in allreduce mode", __FILE__, __LINE__));
    }
    apply_complete();
  }

  /// Downpour: one update from this push, now. Its staleness: updates since w's parameters.
  void apply_async(int w, const MsgHeader& h, float* g) {
    const std::int64_t staleness = global_step_ - h.seen_step;
    if (h.samples == 0) {  // no gradient (non-finite, skipped): just the parameters back
      reply_params(w, 0, kFlagDropped);
      return;
    }
    if (c_.stale_lr == StaleLr::inverse && staleness > 1) {
      backend_->scale(g, 1.0f / static_cast<float>(staleness), n_);
    }
    {
      const TimelineSpan span("apply", "optimizer");
      opt_.apply(params_.data(), g, global_step_);
    }
    ++global_step_;
    ++stats_.updates;
    count_used(w, staleness);
    reply_params(w, staleness);
  }

  /// Adds w's push to the aggregate of global step `step` (a copy: the slot receives on).
  void join(std::int64_t step, int w, const MsgHeader& h, const float* g) {
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
      std::memcpy(a.grads[w].data(), g, n_ * sizeof(float));
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
  std::unique_ptr<Backend> backend_;
  DeviceBuffer<float> params_;
  Optimizer opt_;
  int replicas_ = 1;
  std::int64_t global_step_ = 0, max_steps_ = 0;
  bool stop_seen_ = false;              ///< a worker forwarded a stop request: tell every worker
  std::vector<std::int64_t> clock_;     ///< bounded staleness: pushes of each worker (+ start)
  std::map<std::int64_t, Aggregate> pending_;  ///< by global step
  std::vector<HeldReply> held_;
  std::vector<std::vector<float>> free_;  ///< gradient buffers to reuse
  std::vector<float> scratch_;
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
