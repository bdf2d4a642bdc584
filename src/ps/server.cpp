// dtrain/ps/server.cpp — the ps event loop: one pre-posted header receive per worker, and the
// payload chunks of every request in progress, all polled together (comm/mpi_check's wait_any),
// so the pushes of several workers are received — and, async, applied — chunk by chunk
// interleaved, as their chunks arrive (ps-lite's per-key concurrency, at chunk grain). PULL,
// LOAD, SNAPSHOT and DONE are served here; a PUSH goes to the update rule chosen at start
// (ps/update_rule.hpp), whose optimizer runs on the CPU backend over the shard (--ps-threads).
// The chunk receives and the replies are ps/server_io.cpp's.

#include "dtrain/ps/server.hpp"

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/fault.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/ps/client.hpp"  // ps_reply_timeout
#include "server_core.hpp"
#include "update_rule.hpp"

namespace dtrain {

namespace {
/// Whether the ps waits as one of several (ServerCore::wait_timeout_): not a pipeline stage's.
bool several_ps(const Cluster& cluster, const Config& c) {
  return cluster.num_ps() > 1 && c.pipeline_stages <= 1;
}
}  // namespace

ServerCore::ServerCore(const Cluster& cluster, const Config& c, const ShardRange& shard,
                       std::int64_t total_steps, const std::atomic<bool>& stop_flag,
                       const ShardTensors& tensors, MPI_Comm all_ps)
    : cluster_(cluster), c_(c), workers_(cluster.num_workers()), n_(shard.size()),
      who_("ps " + std::to_string(cluster.me().index) +
           (cluster.me().part.empty() ? "" : " (" + cluster.me().part + ")")),
      stop_flag_(stop_flag), chunks_(n_, static_cast<std::size_t>(c.ps_chunk_kb) * 1024),
      backend_(make_cpu_backend()), params_(*backend_, n_), max_steps_(c.max_steps),
      // A pipeline stage's ps already waits longer than any worker (serve_as_ps()).
      wait_timeout_(several_ps(cluster, c) ? kSeveralPsTimeouts * c.timeout : c.timeout),
      idle_timeout_(several_ps(cluster, c) ? c.timeout + ps_reply_timeout(c) : c.timeout),
      slots_(workers_) {
  stats_.staleness_histogram.assign(kStalenessBins, 0);
  stats_.worker_pushes.assign(workers_, 0);
  stats_.worker_dropped.assign(workers_, 0);
  sending_.resize(chunks_.count());
  rule_ = make_update_rule(*this, total_steps, tensors);
  if (rule_->agrees_on_stop())
    join_agreement(all_ps == MPI_COMM_NULL ? cluster.role_comm() : all_ps);
  if (rule_->shares_rings()) share_rings();
  for (int w = 0; w < workers_; ++w) post_recv(w);
}

ServerCore::~ServerCore() {
  if (agree_comm_ != MPI_COMM_NULL) MPI_Comm_free(&agree_comm_);
}

/// agree_on_step()'s communicator (a duplicate of `all_ps`, collective over it) and the world
/// ranks its messages name.
void ServerCore::join_agreement(MPI_Comm all_ps) {
  int n = 1;
  DT_CHECK_MPI(MPI_Comm_size(all_ps, &n));
  if (n == 1) return;  // alone: the verdict is this rank's say
  DT_CHECK_MPI(MPI_Comm_dup(all_ps, &agree_comm_));
  DT_CHECK_MPI(MPI_Comm_rank(agree_comm_, &agree_me_));
  peer_world_ = world_ranks(agree_comm_);
  agree_from_.assign(n, 0);
  agree_recv_.assign(n, MPI_REQUEST_NULL);
  agree_send_.assign(n, MPI_REQUEST_NULL);
  post_says();
}

/// The receives of every other ps rank's say on the next step to agree on, posted ahead: a say
/// that comes before this rank's own tells it that another ps has the step and waits for it.
void ServerCore::post_says() {
  for (int p = 0; p < static_cast<int>(peer_world_.size()); ++p) {
    if (p == agree_me_) continue;
    DT_CHECK_MPI(
        MPI_Irecv(&agree_from_[p], 1, MPI_INT, p, kTagAgree, agree_comm_, &agree_recv_[p]));
  }
  agree_missing_ = std::max(static_cast<int>(peer_world_.size()) - 1, 0);
  waited_since_ = 0;
}

PsStats ServerCore::run() {
  const double t0 = now_seconds();
  int remaining = workers_;
  while (remaining > 0) {
    poll_set();
    MPI_Status st;
    const int i = wait_event(&st);
    if (i == MPI_UNDEFINED) break;
    const double b0 = now_seconds();
    if (owner_[i] < -workers_) {  // a ps rank's say on the step (agree_on_step)
      agree_recv_[owner_[i] - kAgreement] = MPI_REQUEST_NULL;
      --agree_missing_;
      if (said_) {
        if (agree_missing_ == 0) rule_->on_agreed();
      } else if (waited_since_ == 0) {  // before this rank's say: another ps waits for it
        waited_since_ = now_seconds();
      }
    } else if (owner_[i] >= workers_) {  // a slot is free: post the receives that waited for it
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
  wait_all(agree_send_, c_.timeout, who_ + " flushing its say on the last step to the ps ranks");
  for (MPI_Request& r : agree_recv_) {  // the says on a step that never came
    if (r == MPI_REQUEST_NULL) continue;
    DT_CHECK_MPI(MPI_Cancel(&r));
    DT_CHECK_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
  }
  for (auto& s : slots_) {
    wait_one(s.send, c_.timeout, who_ + " flushing replies");
    wait_all(s.ring_send, c_.timeout, who_ + " flushing replies");
  }
  settle_all();
  stats_.wall_seconds = now_seconds() - t0;
  return stats_;
}

/// This round's requests: every worker's header receive and the next chunk of every request in
/// progress (or, when that chunk's ring slot is busy, the reply leaving from it).
void ServerCore::poll_set() {
  polled_.clear();
  owner_.clear();
  for (std::size_t p = 0; p < agree_recv_.size(); ++p) {
    if (agree_recv_[p] == MPI_REQUEST_NULL) continue;
    polled_.push_back(agree_recv_[p]);
    owner_.push_back(kAgreement + static_cast<int>(p));
  }
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
}

/// A shared ring for each worker on this node, named in every reply header from now on.
void ServerCore::share_rings() {
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

void ServerCore::post_recv(int w) {
  DT_CHECK_MPI(MPI_Irecv(&slots_[w].in, sizeof(MsgHeader), MPI_BYTE, cluster_.worker_rank(w),
                         MPI_ANY_TAG, cluster_.world(), &slots_[w].recv));
}

/// The job's world rank of worker w (a pipeline stage's cluster numbers its own ranks).
int ServerCore::job_rank(int w) const { return cluster_.ranks()[cluster_.worker_rank(w)].rank; }

/// The timeout message of the event loop: the requests whose payload is still expected.
std::string ServerCore::waiting_for() const {
  std::string busy, replies;
  for (int w = 0; w < workers_; ++w) {
    const Incoming& r = slots_[w].req;
    if (!r.active) continue;
    std::string& list = r.posted > r.done ? busy : replies;  // poll_set(): what is polled for w
    list += (list.empty() ? "" : ", ") + std::to_string(w);
  }
  // A worker neither done, nor sending, nor waiting for a held reply has sent nothing since its
  // last answer: where others wait for a step's update (held replies), it is the one holding
  // the job up.
  std::string silent, held;
  for (int w = 0; w < workers_; ++w) {
    const bool holding =
        std::any_of(held_.begin(), held_.end(), [w](const HeldReply& r) { return r.worker == w; });
    if (holding) held += (held.empty() ? "" : ", ") + std::to_string(w);
    else if (!slots_[w].done && !slots_[w].req.active)
      silent += std::string(silent.empty() ? "" : ", ") + "worker " + std::to_string(w) +
                " (world rank " + std::to_string(job_rank(w)) + ")";
  }
  // Those waiting for this ps: its held replies' workers, and the ps ranks that have the step and
  // sent their say (agree_on_step) before this one could.
  std::string waiters = held.empty() ? "" : "worker(s) " + held;
  for (std::size_t p = 0; !said_ && waited_since_ > 0 && p < agree_recv_.size(); ++p)
    if (static_cast<int>(p) != agree_me_ && agree_recv_[p] == MPI_REQUEST_NULL)
      waiters += (waiters.empty() ? "" : ", ") + std::string("the ps at world rank ") +
                 std::to_string(peer_world_[p]);
  if (idle() && idle_timeout_ > wait_timeout_)
    return who_ + " waiting for worker messages (no worker has a request here or waits for this " +
           "ps: " +
           (silent.empty() ? "" : "no request from " + silent + " since its last answer; ") +
           "a stuck worker, or workers held up by another ps rank?)";
  return who_ + " waiting for worker messages" +
         (deciding() ? " and for " + agreement_wait() : "") +
         (busy.empty() ? "" : " (the payload of worker(s) " + busy + ")") +
         (replies.empty() ? ""
                          : " (worker(s) " + replies + " to receive a reply from a ring slot)") +
         (silent.empty() || waiters.empty()
              ? ""
              : ": no request from " + silent + " since its last answer, while " + waiters +
                    " wait for step " + std::to_string(global_step_) +
                    "'s update (a stuck or slow worker?)");
}

void ServerCore::on_header(int w, int tag, const MsgHeader& h) {
  switch (tag) {
    case kTagPull:
      if (h.wait_step <= global_step_ || finished()) reply_params(w);
      else hold(w, h.wait_step, 0);
      post_recv(w);
      return;
    case kTagPush:
      if ((h.flags & kFlagShm) && !slots_[w].shm)  // offered only by a rule that shares rings
        throw Error(format_error(who_ + ": worker " + std::to_string(w) +
                                     " pushed through a shared ring this ps did not offer",
                                 __FILE__, __LINE__));
      rule_->on_push(w, h);
      return;
    case kTagLoad:
      settle_all();
      start(w, tag, h, Fate::load, {params_.data(), rule_->state_m(), rule_->state_v()});
      return;
    case kTagSnapshot:
      if (fault_fires(FaultKind::hang_ps_snapshot, global_step_))  // test-only (core/fault.hpp)
        hang_forever(who_ + " at a snapshot of global step " + std::to_string(global_step_));
      reply(w, kTagState, 0, 0, {params_.data(), rule_->state_m(), rule_->state_v()});
      post_recv(w);
      return;
    default:
      throw Error(format_error(who_ + ": unexpected message tag " + std::to_string(tag) +
                                   " from worker " + std::to_string(w),
                               __FILE__, __LINE__));
  }
}

/// A LOAD has arrived whole: the run resumes at its global step, with its --max-steps.
void ServerCore::on_loaded(int w) {
  const Incoming& r = slots_[w].req;
  global_step_ = r.h.global_step;
  max_steps_ = r.h.max_steps;
  rule_->on_load();
  reply(w, kTagReply, 0, 0, {});
}

/// Answers every held request whose step has come (all of them once finished()). Once a stop is
/// requested, a push's reply no longer runs ahead of its step's update (SSP's staleness): the
/// stop may leave that update unmade, and the worker would have counted a step the run does not
/// hold.
void ServerCore::release_held() {
  const bool all = finished();
  const bool stopping = stop_requested_here();
  auto keep = held_.begin();
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    if (all || (it->wait_step <= global_step_ && !(stopping && it->joined >= global_step_))) {
      // A push whose step's update the ps will never make: its batch is not part of the run.
      const bool unapplied = all && it->joined >= global_step_;
      if (unapplied) ++stats_.ignored;
      reply_params(it->worker, it->staleness, (unapplied ? kFlagDropped : 0) | it->flags);
    } else {
      *keep++ = *it;
    }
  }
  held_.erase(keep, held_.end());
  if (all) rule_->on_finished();
}

bool ServerCore::stop_in_force() const {
  return rule_->agrees_on_stop() ? stop_agreed_ : stop_requested_here();
}

bool ServerCore::finished() const {
  return stop_in_force() || (max_steps_ > 0 && global_step_ >= max_steps_);
}

Verdict ServerCore::agree_on_step() {
  if (!said_) {  // the first call for this step: this rank's say, to all
    wait_all(agree_send_, comm_timeout(), who_ + " sending its say on a step to the ps ranks");
    said_ = true;
    agree_step_ = global_step_;
    agree_in_ = stop_requested_here() ? 1 : 0;
    for (int p = 0; p < static_cast<int>(peer_world_.size()); ++p)
      if (p != agree_me_)
        DT_CHECK_MPI(MPI_Isend(&agree_in_, 1, MPI_INT, p, kTagAgree, agree_comm_, &agree_send_[p]));
    agree_deadline_ = now_seconds() + kAgreeTimeouts * comm_timeout();
  }
  if (deciding()) return Verdict::pending;  // the loop polls the receives
  int say = agree_in_;
  for (std::size_t p = 0; p < agree_from_.size(); ++p)
    if (static_cast<int>(p) != agree_me_) say = std::max(say, agree_from_[p]);
  said_ = false;
  stop_agreed_ = say != 0;
  if (!stop_agreed_ && agree_comm_ != MPI_COMM_NULL) post_says();  // the next step's
  return stop_agreed_ ? Verdict::stop : Verdict::apply;
}

bool ServerCore::idle() const {
  return held_.empty() && !deciding() && !(waited_since_ > 0 && !said_) &&
         std::none_of(slots_.begin(), slots_.end(),
                      [](const WorkerSlot& s) { return s.req.active; });
}

std::string ServerCore::agreement_wait() const {
  std::string missing;
  for (std::size_t p = 0; p < agree_recv_.size(); ++p)
    if (agree_recv_[p] != MPI_REQUEST_NULL)
      missing += (missing.empty() ? "" : ", ") + std::string("the ps at world rank ") +
                 std::to_string(peer_world_[p]);
  return missing + " to agree whether global step " + std::to_string(agree_step_) +
         "'s update is made or the run stops before it";
}

int ServerCore::wait_event(MPI_Status* st) {
  if (!said_ && waited_since_ > 0) {
    // Another ps has the step and waits for this one's say, which waits for a push: the workers
    // this ps still needs are the holdup, named here before that ps names this one.
    const double deadline = waited_since_ + comm_timeout();
    try {
      return wait_any(polled_, std::min(c_.timeout, std::max(deadline - now_seconds(), 0.0)),
                      waiting_for_, st);
    } catch (const TimeoutError&) {
      if (now_seconds() < deadline) throw;
      throw TimeoutError(comm_timeout(), waiting_for());
    }
  }
  // Among several ps ranks, a worker this one waits for may itself wait for another, stuck ps
  // rank (its answer at once, --timeout): this ps waits longer (while idle, longer than a worker
  // waits for any reply), so that the worker names that rank.
  if (!deciding())
    return wait_any(polled_, idle() ? idle_timeout_ : wait_timeout_, waiting_for_, st);
  // The step's pushes are in: what the loop waits for is the others' say (and the workers wait
  // for this ps's verdict).
  try {
    return wait_any(polled_, std::max(agree_deadline_ - now_seconds(), 0.0), waiting_for_, st);
  } catch (const TimeoutError&) {
    throw TimeoutError(kAgreeTimeouts * comm_timeout(), who_ + " waiting for " + agreement_wait());
  }
}

void ServerCore::count_used(int w, std::int64_t staleness) {
  ++stats_.pushes;
  ++stats_.worker_pushes[w];
  stats_.staleness_sum += staleness;
  stats_.staleness_max = std::max(stats_.staleness_max, staleness);
  ++stats_.staleness_histogram[std::clamp<std::int64_t>(staleness, 0, kStalenessBins - 1)];
}

void ServerCore::count_dropped(int w) {
  ++stats_.dropped;
  ++stats_.worker_dropped[w];
}

PsStats run_parameter_server(const Cluster& cluster, const Config& config, const ShardRange& shard,
                             std::int64_t total_steps, const std::atomic<bool>& stop_flag,
                             const ShardTensors& tensors, MPI_Comm all_ps) {
  ServerCore ps(cluster, config, shard, total_steps, stop_flag, tensors, all_ps);
  return ps.run();
}

}  // namespace dtrain
