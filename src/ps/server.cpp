// dtrain/ps/server.cpp — the ps event loop: one pre-posted header receive per worker, and the
// payload chunks of every request in progress, all polled together (comm/mpi_check's wait_any),
// so the pushes of several workers are received — and, async, applied — chunk by chunk
// interleaved, as their chunks arrive (ps-lite's per-key concurrency, at chunk grain). The
// optimizer runs on the CPU backend over the shard (--ps-threads). Async pushes are applied
// chunk by chunk, their chunks received into a small ring of chunk buffers per worker that stays
// in cache (kRingSlots; so are the parts of a LOAD the optimizer has no state for), and each
// chunk's reply leaves at once from its own ring slot, where the update wrote the new values
// over the gradient; sync through the ps and bounded staleness
// gather whole pushes into per-step aggregates whose replies are held until the update they wait
// for (ps/server.hpp, ps/protocol.hpp). A worker on the ps's node pushes async gradients through
// a ring it shares with the ps instead (ps/shared_ring.hpp): the ps then only updates the slots.
#include "dtrain/ps/server.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
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
#include "dtrain/ps/shared_ring.hpp"

namespace dtrain {
namespace {

/// Element loops shorter than this stay on one thread (--ps-threads): starting a team costs more.
constexpr std::ptrdiff_t kParallelMin = 1 << 16;

// kRingSlots (ps/protocol.hpp): chunk buffers per worker that an async push (or any part the ps
// does not keep) is received into, each reused once its chunk is applied: such receives are
// posted this many ahead. The gradient then never leaves the cache between its copy in and the update, where a shard-sized
// buffer sent it to memory and back (comm_bench, 3 ranks, 64 MiB: push-pull/bare 0.74–0.76 →
// 0.85–0.98), and the ps holds no shard-sized buffer for what it reads once.
// A slot is also where its chunk's reply leaves from (the update writes the new parameters over
// the gradient: Optimizer::apply_into_grads), so a worker's copy of a reply reads the slot,
// never the shard: on shared memory the receiver copies, and a parameter line a worker's core
// has read must be taken back from it before the next update can write it — ~7× the update's
// own time where the two cores sit far apart (ps_update_bench --cross-core), while a slot is
// next written by the receive of a chunk, a copy whose full-line stores pay that less. A slot
// takes a new chunk once its reply has left. Slots are used round the ring across requests, so
// the next push of a worker lands beside, not on, the slot its last reply is leaving from.
// A worker on the ps's node has its async pushes' ring in shared memory instead (--ps-shm).

/// Ring receives posted ahead of the chunk being processed, for a worker on another node: the
/// network moves those chunks while the ps updates (kRingSlots). For a worker on the ps's own
/// node one: on shared memory the receiving process copies a message in itself, inside its MPI
/// progress, so receives posted further ahead only make it copy several chunks before it can
/// update the first and let the worker copy that reply on its own core (comm_bench, 2 ranks,
/// 256 KiB in two chunks: both copied in before the first update, 25 of a 50 µs round trip).
/// DTRAIN_TEST_PS_REMOTE=1 (for tests) counts every worker as remote, so that one machine runs
/// the network's way too (and no ring is shared).
bool local_worker(const Cluster& cluster, int w) {
  static const bool all_remote = [] {
    const char* v = std::getenv("DTRAIN_TEST_PS_REMOTE");
    return v != nullptr && std::string(v) == "1";
  }();
  const int node = cluster.ranks()[static_cast<std::size_t>(cluster.worker_rank(w))].node;
  return node == cluster.me().node && !all_remote;
}
std::size_t ring_ahead(const Cluster& cluster, int w) {
  return local_worker(cluster, w) ? 1 : kRingSlots;
}

/// What becomes of a request's payload.
enum class Fate {
  undecided,  ///< async push: decided when its first chunk arrives (staleness counts from there)
  apply,      ///< async push: each chunk applied as it arrives, its reply chunk sent at once
  join,       ///< sync / bounded push: the whole gradient joins step `step`'s aggregate
  drop,       ///< a push not applied (late, after the last step, no samples): answered at the end
  load,       ///< LOAD: params, m, v straight into the shard's arrays
};

/// A request whose payload is arriving: the receives of its chunks (parts × chunks, in travel
/// order, posted in that order: into an array at once when its header came, into the worker's
/// ring ring_ahead() ahead of the chunk being processed) and what is done with them.
struct Incoming {
  bool active = false;
  int tag = 0;
  MsgHeader h;
  Fate fate = Fate::drop;
  std::vector<float*> dest;             ///< per part: the array its chunks land in (nullptr: the ring)
  float* ring = nullptr;                ///< the worker's kRingSlots chunk buffers: message k in slot k % kRingSlots
  std::vector<float> own;               ///< a sync push's gradient (a shard-sized buffer), else empty
  std::vector<MPI_Request> reqs;        ///< one per chunk message, completed in order
  std::size_t posted = 0;               ///< chunk messages whose receive is posted
  std::size_t done = 0;                 ///< chunk messages processed
  std::size_t ring_base = 0;            ///< message k goes (if to the ring) to slot (ring_base + k) % kRingSlots
  std::int64_t step = 0;                ///< apply / join: the global step its update makes
  std::int64_t staleness = 0;
  bool shm = false;  ///< an async push through the shared ring: chunk messages are zero-byte
};

struct WorkerSlot {
  MsgHeader in;   ///< the pre-posted header receive
  MsgHeader out;  ///< the header of the last reply (sent from here)
  MPI_Request recv = MPI_REQUEST_NULL, send = MPI_REQUEST_NULL;
  bool done = false;
  Incoming req;   ///< the request in progress (req.active), at most one per worker
  std::vector<float> ring;  ///< kRingSlots chunk buffers (allocated at the first request using them)
  std::vector<MPI_Request> ring_send = std::vector<MPI_Request>(kRingSlots, MPI_REQUEST_NULL);  ///< per slot: its reply in flight
  std::size_t ring_next = 0;  ///< ring position of the next request's first message
  std::optional<SharedRing> shm;  ///< the ring shared with a worker on this node (async, --ps-shm)
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
        max_steps_(c.max_steps), clock_(workers_, 0), slots_(workers_) {
    replicas_ = kind_ == ExchangeKind::ps_sync && c.replicas_to_aggregate > 0
                    ? std::min(c.replicas_to_aggregate, workers_)
                    : workers_;
    if (kind_ == ExchangeKind::ps_async && c.delay_compensation > 0.0f)
      dc_.emplace(n_, workers_, c.delay_compensation);
    // DANA keeps its own momenta (per worker, and their sum as the checkpoint's m); every other
    // rule is one Optimizer over the shard.
    if (kind_ == ExchangeKind::ps_async && c.async_momentum == AsyncMomentum::dana &&
        optimizer_kind(c.optimizer) == OptimizerKind::momentum) {
      dana_.emplace(c, *backend_, n_, workers_, total_steps, no_decay);
      dana_->load(dana_->momentum_sum(), params_.data(), 0);  // zero momenta: θ̂ = θ
    } else {
      opt_.emplace(c, *backend_, n_, total_steps, no_decay);
      opt_->use_async_momentum(workers_);  // --async-momentum (async only)
    }
    stats_.staleness_histogram.assign(kStalenessBins, 0);
    stats_.worker_pushes.assign(workers_, 0);
    stats_.worker_dropped.assign(workers_, 0);
    sending_.resize(chunks_.count());
    if (kind_ == ExchangeKind::ps_async && c.ps_shm) share_rings();
    for (int w = 0; w < workers_; ++w) post_recv(w);
  }

  ParameterServer(const ParameterServer&) = delete;  // waiting_for_ points at this object
  ParameterServer& operator=(const ParameterServer&) = delete;

  PsStats run() {
    const double t0 = now_seconds();
    int remaining = workers_;
    while (remaining > 0) {
      // Every worker's header receive and the next chunk of every request in progress.
      polled_.clear();
      owner_.clear();
      for (int w = 0; w < workers_; ++w) {
        WorkerSlot& s = slots_[w];
        if (s.recv != MPI_REQUEST_NULL) {
          polled_.push_back(s.recv);
          owner_.push_back(-1 - w);
        }
        if (s.req.active && s.req.posted > s.req.done) {
          polled_.push_back(s.req.reqs[s.req.done]);
          owner_.push_back(w);
        } else if (s.req.active) {  // its next chunk's slot: the reply leaving from it
          polled_.push_back(s.ring_send[ring_slot(s.req, s.req.done)]);
          owner_.push_back(workers_ + w);
        }
      }
      MPI_Status st;
      const int i = wait_any(polled_, c_.timeout, waiting_for_, &st);
      if (i == MPI_UNDEFINED) break;
      const double b0 = now_seconds();
      if (owner_[i] >= workers_) {  // a slot is free: post the receives that waited for it
        post_chunks(owner_[i] - workers_);
      } else if (owner_[i] >= 0) {
        on_chunk(owner_[i]);
      } else {
        const int w = -1 - owner_[i];
        slots_[w].recv = MPI_REQUEST_NULL;
        const MsgHeader h = slots_[w].in;
        if (h.flags & kFlagStop) stop_seen_ = true;
        if (st.MPI_TAG == kTagDone) {
          slots_[w].done = true;
          --remaining;
        } else {
          on_header(w, st.MPI_TAG, h);
        }
      }
      release_held();
      stats_.busy_seconds += now_seconds() - b0;
    }
    for (auto& s : slots_) {
      wait_one(s.send, c_.timeout, who_ + " flushing replies");
      wait_all(s.ring_send, c_.timeout, who_ + " flushing replies");
    }
    settle_all();
    stats_.wall_seconds = now_seconds() - t0;
    return stats_;
  }

 private:
  /// A shared ring for each worker on this node, named in every reply header from now on.
  void share_rings() {
    for (int w = 0; w < workers_; ++w) {
      if (!local_worker(cluster_, w)) continue;
      try {
        slots_[w].shm = SharedRing::create(shared_ring_bytes(chunks_.largest()));
      } catch (const std::exception& e) {  // memfd, mmap, or the token's random_device
        log_warn(who_ + ": no shared ring for worker " + std::to_string(w) +
                 ", its pushes travel as MPI messages: " + e.what());
      }
    }
  }

  void post_recv(int w) {
    DT_CHECK_MPI(MPI_Irecv(&slots_[w].in, sizeof(MsgHeader), MPI_BYTE, cluster_.worker_rank(w),
                           MPI_ANY_TAG, cluster_.world(), &slots_[w].recv));
  }

  /// The timeout message of the event loop: the requests whose payload is still expected.
  [[nodiscard]] std::string waiting_for() const {
    std::string busy, replies;
    for (int w = 0; w < workers_; ++w) {
      const Incoming& r = slots_[w].req;
      if (!r.active) continue;
      std::string& list = r.posted > r.done ? busy : replies;  // run(): what is polled for w
      list += (list.empty() ? "" : ", ") + std::to_string(w);
    }
    return who_ + " waiting for worker messages" +
           (busy.empty() ? "" : " (the payload of worker(s) " + busy + ")") +
           (replies.empty() ? "" : " (worker(s) " + replies + " to receive a reply from a ring slot)");
  }

  /// A buffer of n_ floats, reused.
  std::vector<float> take_buffer() {
    if (free_.empty()) return std::vector<float>(n_);
    std::vector<float> b = std::move(free_.back());
    free_.pop_back();
    return b;
  }

  /// Starts receiving worker w's payload: `parts` arrays (nullptr: through w's ring, read chunk
  /// by chunk and not kept — an async push's gradient, a LOAD part the optimizer has no state
  /// for), each chunk by chunk in travel order (protocol.hpp); the receives are posted in message
  /// order (MPI matches them so), into an array at once, into the ring ring_ahead() ahead of the
  /// chunk being processed (the worker has already posted its sends). A payload without chunks
  /// completes at once.
  /// `shm`: an async push through w's shared ring (its one part is nullptr), from slot 0.
  void start(int w, int tag, const MsgHeader& h, Fate fate, std::initializer_list<float*> parts,
             bool shm = false) {
    Incoming& r = slots_[w].req;
    r.active = true;
    r.tag = tag;
    r.h = h;
    r.fate = fate;
    r.shm = shm;
    r.dest.assign(parts.begin(), parts.end());
    r.ring = nullptr;
    r.done = r.posted = 0;
    r.ring_base = shm ? 0 : slots_[w].ring_next;
    if (shm) {
      r.ring = slots_[w].shm->data();
    } else if (std::find(r.dest.begin(), r.dest.end(), nullptr) != r.dest.end()) {
      std::vector<float>& ring = slots_[w].ring;
      if (ring.empty()) ring.resize(kRingSlots * chunks_.largest());  // ≤ kRingSlots × --ps-chunk-kb
      r.ring = ring.data();
    }
    r.reqs.assign(r.dest.size() * chunks_.count(), MPI_REQUEST_NULL);
    post_chunks(w);
    if (r.reqs.empty()) complete(w);
  }

  /// The ring slot of chunk message `at` of request r (if its part goes through the ring).
  [[nodiscard]] static std::size_t ring_slot(const Incoming& r, std::size_t at) {
    return (r.ring_base + at) % kRingSlots;
  }

  /// Where chunk message `at` of worker w's request lands: its part's array at the chunk's
  /// offset, or a ring slot.
  [[nodiscard]] float* chunk_dest(const Incoming& r, std::size_t at) const {
    float* part = r.dest[at / chunks_.count()];
    if (!part) return r.ring + ring_slot(r, at) * chunks_.largest();
    return part + chunks_.begin(chunks_.travel(at % chunks_.count()));
  }

  /// Posts the receives of worker w's request that may be posted now, in message order: up to
  /// the first one into the ring that is more than ring_ahead() past the chunk being processed or
  /// whose slot still has a reply in flight (the event loop then polls that reply: run()).
  void post_chunks(int w) {
    Incoming& r = slots_[w].req;
    if (r.shm) {  // zero-byte messages: every receive at once (the worker owns the slots' pace)
      for (; r.posted < r.reqs.size(); ++r.posted)
        DT_CHECK_MPI(MPI_Irecv(nullptr, 0, MPI_BYTE, cluster_.worker_rank(w), 0,
                               cluster_.payload_comm(), &r.reqs[r.posted]));
      return;
    }
    for (; r.posted < r.reqs.size(); ++r.posted) {
      const std::size_t at = r.posted;
      if (!r.dest[at / chunks_.count()]) {
        if (at >= r.done + ring_ahead(cluster_, w)) break;
        MPI_Request& reply = slots_[w].ring_send[ring_slot(r, at)];
        int gone = 1;
        if (reply != MPI_REQUEST_NULL) DT_CHECK_MPI(MPI_Test(&reply, &gone, MPI_STATUS_IGNORE));
        if (!gone) break;
      }
      irecv_bytes(chunk_dest(r, at), chunks_.size(chunks_.travel(at % chunks_.count())) * sizeof(float),
                  cluster_.worker_rank(w), 0, cluster_.payload_comm(), &r.reqs[at]);
    }
  }

  /// The next chunk message of worker w's request has arrived (its ring slot, if it used one, is
  /// free again once the chunk is applied).
  void on_chunk(int w) {
    Incoming& r = slots_[w].req;
    const std::size_t at = r.done++;
    r.reqs[at] = MPI_REQUEST_NULL;
    const std::size_t c = chunks_.travel(at % chunks_.count());
    if (r.shm) std::atomic_thread_fence(std::memory_order_acquire);  // the worker's chunk
    if (r.fate == Fate::undecided) decide_async(w);
    if (r.fate == Fate::apply) apply_chunk(w, c, at);
    else if (r.shm) answer_in_slot(w, c, at);  // not applied: the current parameters
    post_chunks(w);
    if (r.done == r.reqs.size()) complete(w);
  }

  /// Worker w's request has been received whole: answer, hold or aggregate it, then take its
  /// next request.
  void complete(int w) {
    Incoming& r = slots_[w].req;
    if (r.fate == Fate::undecided) decide_async(w);  // a shard without chunks
    switch (r.fate) {
      case Fate::apply:  // every chunk's reply has gone
        ++stats_.updates;
        count_used(w, r.staleness);
        break;
      case Fate::drop:  // through the shared ring every chunk has been answered already
        if (r.shm) reply_header(w, kTagReply, r.step, r.staleness, kFlagDropped);
        else reply_params(w, r.staleness, kFlagDropped);
        break;
      case Fate::join:
        join(w);
        break;
      case Fate::load:
        global_step_ = r.h.global_step;
        if (dana_) dana_->load(dana_->momentum_sum(), params_.data(), global_step_);
        max_steps_ = r.h.max_steps;
        std::fill(clock_.begin(), clock_.end(), global_step_);
        pending_.clear();
        reply(w, kTagReply, 0, 0, {});
        break;
      case Fate::undecided:
        break;
    }
    if (!r.own.empty()) free_.push_back(std::exchange(r.own, {}));
    if (r.shm) ++stats_.shared_ring_pushes;
    else slots_[w].ring_next = r.ring_base + r.reqs.size();
    r.active = false;
    post_recv(w);
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
    if (s.shm) {
      s.out.ring_pid = static_cast<std::int32_t>(getpid());
      s.out.ring_fd = s.shm->fd();
      s.out.ring_token = s.shm->token();
    }
    DT_CHECK_MPI(MPI_Isend(&s.out, sizeof(MsgHeader), MPI_BYTE, cluster_.worker_rank(w), tag,
                           cluster_.world(), &s.send));
  }

  /// Sends header + the given shard arrays (nullptr: zeros) to worker w, all chunks at once.
  void reply(int w, int tag, std::int64_t staleness, int flags,
             std::initializer_list<const float*> parts) {
    reply_header(w, tag, global_step_, staleness, flags);
    for (const float* part : parts)  // protocol.hpp: part by part, each chunk in travel order
      for (std::size_t t = 0; t < chunks_.count(); ++t) send_chunk(w, part, chunks_.travel(t));
  }

  /// The optimizer state a LOAD fills and a SNAPSHOT carries (nullptr: none): the first moment
  /// or momentum (DANA: the momentum sum), and Adam's second moment.
  [[nodiscard]] float* state_m() { return dana_ ? dana_->momentum_sum() : opt_->m(); }
  [[nodiscard]] float* state_v() const { return dana_ ? nullptr : opt_->v(); }

  void reply_params(int w, std::int64_t staleness = 0, int flags = 0) {
    reply(w, kTagReply, staleness, flags, {params_.data()});
    if (dc_) dc_->sent(w, params_.data(), 0, n_);
  }

  void on_header(int w, int tag, const MsgHeader& h) {
    switch (tag) {
      case kTagPull:
        if (h.wait_step <= global_step_ || finished()) reply_params(w);
        else held_.push_back({w, h.wait_step, 0});
        post_recv(w);
        return;
      case kTagPush:
        on_push(w, h);
        return;
      case kTagLoad:
        settle_all();
        start(w, tag, h, Fate::load, {params_.data(), state_m(), state_v()});
        return;
      case kTagSnapshot:
        reply(w, kTagState, 0, 0,
              {params_.data(), state_m(), state_v()});
        post_recv(w);
        return;
      default:
        throw Error(format_error(who_ + ": unexpected message tag " + std::to_string(tag) +
                                     " from worker " + std::to_string(w), __FILE__, __LINE__));
    }
  }

  /// A push's header: where its gradient goes. Its payload follows (start()).
  void on_push(int w, const MsgHeader& h) {
    Incoming& r = slots_[w].req;
    r.staleness = 0;
    Fate fate = Fate::join;
    if ((h.flags & kFlagShm) && !slots_[w].shm)  // offered only by an async ps (share_rings)
      throw Error(format_error(who_ + ": worker " + std::to_string(w) + " pushed through a shared "
                                   "ring this ps did not offer", __FILE__, __LINE__));
    switch (kind_) {
      case ExchangeKind::ps_async:  // through w's ring, private or shared
        start(w, kTagPush, h, Fate::undecided, {nullptr}, (h.flags & kFlagShm) != 0);
        return;
      case ExchangeKind::ps_sync:
        r.step = h.seen_step;
        if (finished()) {
          fate = Fate::drop;
          ++stats_.ignored;
        } else if (h.seen_step < global_step_) {  // computed on older parameters: late, dropped
          fate = Fate::drop;
          r.staleness = global_step_ - h.seen_step;
          count_dropped(w);
        }
        break;
      case ExchangeKind::ps_bounded:
        r.step = clock_[w]++;  // w's c-th push makes step c's update
        r.staleness = r.step - h.seen_step;
        if (finished()) {
          fate = Fate::drop;
          ++stats_.ignored;
        }
        break;
      case ExchangeKind::allreduce:
        throw Error(format_error(who_ + ": a push in allreduce mode", __FILE__, __LINE__));
    }
    if (fate == Fate::drop) return start(w, kTagPush, h, fate, {nullptr});  // read, not kept
    r.own = take_buffer();  // the whole gradient joins an aggregate
    start(w, kTagPush, h, fate, {r.own.data()});
  }

  /// Downpour: the push whose first chunk has arrived takes the next global step (its
  /// staleness: updates since w's parameters) and is applied chunk by chunk from here — unless
  /// the ps has stopped applying updates or it carries no gradient (non-finite, skipped).
  void decide_async(int w) {
    Incoming& r = slots_[w].req;
    r.fate = Fate::drop;
    r.step = global_step_;  // through a shared ring, the reply's chunks are θ from here on
    if (finished()) {
      ++stats_.ignored;
      return;
    }
    if (r.h.samples == 0) return;  // just the parameters back, the step's rhythm kept
    r.fate = Fate::apply;
    r.step = global_step_++;
    r.staleness = r.step - r.h.seen_step;
    reply_header(w, kTagReply, r.step + 1, r.staleness, 0);
  }

  /// Async: applies chunk c of worker w's push (chunk message `at`, in its ring slot) and sends
  /// it back from that slot, where the update wrote the chunk's new values (DANA: θ̂, where w
  /// computes next) over the gradient (kRingSlots).
  void apply_chunk(int w, std::size_t c, std::size_t at) {
    const TimelineSpan span("apply", "optimizer");
    Incoming& r = slots_[w].req;
    float* g = chunk_dest(r, at);
    float* p = params_.data();
    const std::size_t b = chunks_.begin(c), e = b + chunks_.size(c);
    settle(c);  // replies still leaving from the shard (pulls, held replies) read the old values
    if (c_.stale_lr == StaleLr::inverse && r.staleness > 1)
      backend_->scale(g, 1.0f / static_cast<float>(r.staleness), e - b);
    if (dc_) dc_->compensate(w, g, p, b, e);
    const double t0 = now_seconds();
    if (dana_) dana_->apply_into_grads(w, p, g, r.step, b, e);
    else opt_->apply_into_grads(p, g, r.step, b, e);
    stats_.optimizer_seconds += now_seconds() - t0;
    if (dc_) dc_->sent(w, dana_ ? dana_->look_ahead() : p, b, e);  // the values g now holds
    send_slot(w, at, g, e - b);
  }

  /// Sends the reply chunk in slot `at` of worker w's request (`floats` values at g): the values
  /// themselves, or through the shared ring a zero-byte message that hands the slot back.
  void send_slot(int w, std::size_t at, float* g, std::size_t floats) {
    const Incoming& r = slots_[w].req;
    MPI_Request& send = slots_[w].ring_send[ring_slot(r, at)];
    if (!r.shm) {
      isend_bytes(g, floats * sizeof(float), cluster_.worker_rank(w), 0, cluster_.payload_comm(),
                  &send);
      return;
    }
    wait_one(send, comm_timeout(), who_ + " handing a shared ring slot to worker " +
                                       std::to_string(w));  // its last zero-byte message
    std::atomic_thread_fence(std::memory_order_release);  // the slot's values before the message
    DT_CHECK_MPI(MPI_Isend(g, 0, MPI_BYTE, cluster_.worker_rank(w), 0, cluster_.payload_comm(),
                           &send));
  }

  /// A push through the shared ring that is not applied: chunk c of its reply is the shard's
  /// current values, written into the chunk's slot.
  void answer_in_slot(int w, std::size_t c, std::size_t at) {
    const Incoming& r = slots_[w].req;
    float* g = chunk_dest(r, at);
    const std::size_t b = chunks_.begin(c), e = b + chunks_.size(c);
    std::copy(params_.data() + b, params_.data() + e, g);
    if (dc_) dc_->sent(w, params_.data(), b, e);
    send_slot(w, at, g, e - b);
  }

  /// Sync / bounded: worker w's whole gradient joins the aggregate of its step, and its reply
  /// waits for that step's update — unless that update was made without it meanwhile (late:
  /// --replicas-to-aggregate) or the ps stopped applying updates.
  void join(int w) {
    Incoming& r = slots_[w].req;
    if (finished()) {
      ++stats_.ignored;
      reply_params(w, 0, kFlagDropped);
      return;
    }
    if (r.step < global_step_) {
      count_dropped(w);
      reply_params(w, global_step_ - r.h.seen_step, kFlagDropped);
      return;
    }
    Aggregate& a = pending_[r.step];
    if (a.samples.empty()) {
      a.grads.resize(workers_);
      a.samples.assign(workers_, -1);
      a.seen.assign(workers_, 0);
    }
    if (a.samples[w] >= 0)
      throw Error(format_error(who_ + ": worker " + std::to_string(w) + " pushed twice for global "
                                   "step " + std::to_string(r.step), __FILE__, __LINE__));
    a.samples[w] = r.h.samples;
    a.seen[w] = r.h.seen_step;
    if (r.h.samples > 0) a.grads[w] = std::exchange(r.own, {});
    ++a.pushes;
    const std::int64_t wait = kind_ == ExchangeKind::ps_bounded ? r.step + 1 - c_.max_staleness
                                                                 : r.step + 1;
    held_.push_back({w, wait, r.staleness});
    apply_complete();
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
        const double t0 = now_seconds();
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
        opt_->apply(params_.data(), sum.data(), global_step_);
        stats_.optimizer_seconds += now_seconds() - t0;
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
    if (all) {
      for (auto& [step, a] : pending_)
        for (auto& g : a.grads)
          if (!g.empty()) free_.push_back(std::move(g));
      pending_.clear();
    }
  }

  void count_used(int w, std::int64_t staleness) {
    ++stats_.pushes;
    ++stats_.worker_pushes[w];
    stats_.staleness_sum += staleness;
    stats_.staleness_max = std::max(stats_.staleness_max, staleness);
    ++stats_.staleness_histogram[std::clamp<std::int64_t>(staleness, 0, kStalenessBins - 1)];
  }
  void count_dropped(int w) {
    ++stats_.dropped;
    ++stats_.worker_dropped[w];
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
  std::optional<Optimizer> opt_;  ///< the update, unless dana_ makes it
  std::optional<DelayCompensation> dc_;  ///< --delay-compensation (async only)
  std::optional<DanaMomentum> dana_;     ///< --async-momentum dana (async only)
  int replicas_ = 1;
  std::int64_t global_step_ = 0, max_steps_ = 0;
  bool stop_seen_ = false;              ///< a worker forwarded a stop request: tell every worker
  std::vector<std::int64_t> clock_;     ///< bounded staleness: pushes of each worker (+ start)
  std::map<std::int64_t, Aggregate> pending_;  ///< by global step
  std::vector<HeldReply> held_;
  std::vector<std::vector<float>> free_;  ///< shard-sized buffers to reuse
  std::vector<float> scratch_;  ///< sync sums
  ZeroChunk zeros_;             ///< SNAPSHOT without m / v
  std::vector<std::vector<MPI_Request>> sending_;  ///< per chunk: reply sends in flight
  std::vector<MPI_Request> polled_;  ///< the event loop's requests this round
  std::vector<int> owner_;           ///< per polled request: worker w's chunk (w), its header (−1 − w), the reply leaving the slot its next chunk needs (workers_ + w)
  const std::function<std::string()> waiting_for_{[this] { return waiting_for(); }};
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
