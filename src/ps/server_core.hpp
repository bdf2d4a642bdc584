// dtrain/ps/server_core.hpp (private) — one ps rank minus its update rule: the event loop over
// every worker's header receive and the payload chunks of every request in progress, the shard,
// the replies (held or not), LOAD / SNAPSHOT / PULL / DONE and the statistics. What a PUSH does
// to the shard is the UpdateRule's (ps/update_rule.hpp), chosen once at start: the ps mirrors the
// worker's GradientExchange (train/exchange.hpp), one class per mode.
//   server.cpp     the loop: receive, dispatch, held replies, LOAD / SNAPSHOT, shutdown, timeouts
//   server_io.cpp  a request's chunk receives (array or ring), reply headers and chunks, settle
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/protocol.hpp"
#include "dtrain/ps/server.hpp"
#include "dtrain/ps/shared_ring.hpp"
#include "dtrain/ps/sharding.hpp"

namespace dtrain {

class UpdateRule;

/// What becomes of a request's payload (set by ServerCore::start, then by the update rule).
enum class Fate {
  undecided,  ///< async push: decided when its first chunk arrives (staleness counts from there)
  apply,      ///< async push: each chunk applied as it arrives, its reply chunk sent at once
  join,       ///< sync / bounded push: the whole gradient joins step `step`'s aggregate
  whole,      ///< async push of a layer-wise optimizer: received whole, then applied at once
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
  std::vector<float*> dest;       ///< per part: the array its chunks land in (nullptr: the ring)
  float* ring = nullptr;          ///< the worker's kRingSlots chunk buffers: message k in slot
                                  ///< (ring_base + k) % kRingSlots
  std::vector<float> own;         ///< a push kept whole (sync, bounded, async LARS), else empty
  std::vector<MPI_Request> reqs;  ///< one per chunk message, completed in order
  std::size_t posted = 0;         ///< chunk messages whose receive is posted
  std::size_t done = 0;           ///< chunk messages processed
  std::size_t ring_base = 0;      ///< ring position of message 0
  std::int64_t step = 0;          ///< apply / join: the global step its update makes
  std::int64_t staleness = 0;
  bool shm = false;  ///< an async push through the shared ring: chunk messages are zero-byte
  /// A push over MPI with a 16-bit --wire-dtype: each chunk message lands in the worker's
  /// WorkerSlot::wire (ServerCore::wire_dest) and is widened to fp32 at chunk_dest on arrival.
  bool encoded = false;
};

struct WorkerSlot {
  MsgHeader in;   ///< the pre-posted header receive
  MsgHeader out;  ///< the header of the last reply (sent from here)
  MPI_Request recv = MPI_REQUEST_NULL, send = MPI_REQUEST_NULL;
  bool done = false;
  Incoming req;             ///< the request in progress (req.active), at most one per worker
  std::vector<float> ring;  ///< kRingSlots chunk buffers, allocated when first needed
  /// 16-bit pushes as they arrive: the ring's kRingSlots chunks, or a whole shard for a push
  /// received into an array (sync, bounded); allocated when first needed.
  std::vector<std::uint16_t> wire;
  /// Per ring slot: its reply in flight.
  std::vector<MPI_Request> ring_send = std::vector<MPI_Request>(kRingSlots, MPI_REQUEST_NULL);
  std::size_t ring_next = 0;      ///< ring position of the next request's first message
  std::optional<SharedRing> shm;  ///< the ring shared with a worker on this node (async, --ps-shm)
};

/// A reply held back until global_step reaches wait_step (or the ps stops applying updates).
struct HeldReply {
  int worker;
  std::int64_t wait_step;
  std::int64_t staleness;
  std::int64_t joined;  ///< a push: the global step whose update it joined; a pull: -1
  int flags = 0;        ///< added to the reply's (kFlagDropped: a late push's)
};

/// The event loop's owner code of ps rank p's say on a step (ServerCore::agree_on_step): kAgreement
/// + p.
inline constexpr int kAgreement = -(1 << 30);

/// How many comm_timeout()s a ps waits for the other ps ranks' say on a step.
inline constexpr double kAgreeTimeouts = 1.5;
/// How many --timeouts a ps among several waits for a worker's message (held replies waiting for
/// its push): more than the worker waits for a reply another ps gives at once, less than the
/// others' say on a step.
inline constexpr double kSeveralPsTimeouts = 1.25;

/// Whether a complete global step's update is made (ServerCore::agree_on_step).
enum class Verdict { pending, apply, stop };

/// Whether worker w runs on this ps's node (DTRAIN_TEST_PS_REMOTE=1: never, for tests).
bool local_worker(const Cluster& cluster, int w);

/// The ps rank. Not copyable (the timeout message and the rule point at it). Not thread-safe: one
/// thread runs the loop, and the rule's calls come from it.
class ServerCore {
 public:
  /// Throws as run_parameter_server() does for its set-up (ps/server.hpp).
  ServerCore(const Cluster& cluster, const Config& c, const ShardRange& shard,
             std::int64_t total_steps, const std::atomic<bool>& stop_flag,
             const ShardTensors& tensors, MPI_Comm all_ps);
  ~ServerCore();
  ServerCore(const ServerCore&) = delete;
  ServerCore& operator=(const ServerCore&) = delete;

  /// Serves until every worker sent DONE (run_parameter_server()).
  PsStats run();

  // ---- For the update rules (ps/update_rule.hpp); all on the loop's thread. ----
  [[nodiscard]] const Config& config() const { return c_; }
  [[nodiscard]] int workers() const { return workers_; }
  [[nodiscard]] std::size_t size() const { return n_; }  ///< floats in the shard
  [[nodiscard]] const ChunkLayout& chunks() const { return chunks_; }
  [[nodiscard]] const std::string& who() const { return who_; }  ///< "ps K", for messages
  [[nodiscard]] Backend& backend() { return *backend_; }
  [[nodiscard]] float* params() { return params_.data(); }  ///< the shard's n floats
  [[nodiscard]] std::int64_t global_step() const { return global_step_; }
  /// Counts one update made: returns the global step it made and moves past it.
  std::int64_t advance_step() { return global_step_++; }
  /// No more updates: --max-steps reached or a stop requested (held replies are all released).
  /// Where the rule agrees on steps (UpdateRule::agrees_on_stop), a stop counts once agreed.
  [[nodiscard]] bool finished() const;
  /// The modes with one update per global step (sync, SSP), where a stop must end the run at the
  /// same step on every ps rank of the job: called for global_step()'s update once its
  /// gradients are in, it answers whether that update is made or the run stops before it — the
  /// same verdict on every ps rank, whatever order the pushes and signals reached each in. A stop
  /// requested here (a signal, or a push carrying one) counts on every ps rank: the first call
  /// for a step sends this rank's say (one integer) to every other ps rank of the job (every
  /// stage's, in a pipeline); the receives of theirs are posted ahead (after each verdict) and
  /// polled by the event loop, which calls UpdateRule::on_agreed() when the last has come:
  /// `pending` until then. A stop verdict makes finished() true. The loop waits for the others'
  /// say at most 1.5 × comm_timeout() (longer than a ps waits for a stuck worker, shorter than a
  /// worker waits for a held reply), then throws TimeoutError naming the ps ranks not heard from;
  /// a ps that has another's say before its own step is complete waits for its workers at most
  /// comm_timeout() from then, then throws TimeoutError naming those it lacks. Throws
  /// LibraryError when an MPI call fails.
  Verdict agree_on_step();
  /// Whether the ps ranks' verdict on global_step()'s update is still awaited.
  [[nodiscard]] bool deciding() const { return said_ && agree_missing_ > 0; }
  [[nodiscard]] PsStats& stats() { return stats_; }
  void count_used(int w, std::int64_t staleness);  ///< a gradient of worker w in an update
  void count_dropped(int w);                       ///< a late gradient of worker w, not applied
  [[nodiscard]] Incoming& request(int w) { return slots_[w].req; }

  /// Starts receiving worker w's payload: `parts` arrays (nullptr: through w's ring, read chunk
  /// by chunk and not kept — an async push's gradient, a LOAD part the optimizer has no state
  /// for), each chunk by chunk in travel order (protocol.hpp); the receives are posted in message
  /// order (MPI matches them so), into an array at once, into the ring ring_ahead() ahead of the
  /// chunk being processed (the worker has already posted its sends). A payload without chunks
  /// completes at once. `shm`: an async push through w's shared ring (its one part is nullptr).
  void start(int w, int tag, const MsgHeader& h, Fate fate, std::initializer_list<float*> parts,
             bool shm = false);
  /// Where chunk message `at` of request r lands: its part's array at the chunk's offset, or a
  /// ring slot.
  [[nodiscard]] float* chunk_dest(const Incoming& r, std::size_t at) const;
  /// Sends the reply chunk in slot `at` of worker w's request (`floats` values at g): the values
  /// themselves, or through the shared ring a zero-byte message that hands the slot back.
  void send_slot(int w, std::size_t at, float* g, std::size_t floats);
  /// Sends worker w a reply header (after its previous one went) saying `global_step`.
  void reply_header(int w, int tag, std::int64_t global_step, std::int64_t staleness, int flags);
  /// Sends worker w a REPLY: the header and the shard's parameters.
  void reply_params(int w, std::int64_t staleness = 0, int flags = 0);
  /// Answers worker w with the parameters once global_step ≥ wait_step (or finished()).
  /// `joined`: a push's global step (its reply says kFlagDropped when the ps finishes before
  /// that step's update), -1 for a pull. `flags` go into the reply as well.
  void hold(int w, std::int64_t wait_step, std::int64_t staleness, std::int64_t joined = -1,
            int flags = 0) {
    held_.push_back({w, wait_step, staleness, joined, flags});
  }
  /// Waits for the reply chunks still being sent from chunk c of the shard's arrays: call before
  /// changing them (their receives are posted, so they complete: protocol.hpp).
  void settle(std::size_t c);
  void settle_all();

 private:
  void share_rings();
  void join_agreement(MPI_Comm all_ps);
  void post_says();
  [[nodiscard]] int job_rank(int w) const;
  void post_recv(int w);
  [[nodiscard]] std::string waiting_for() const;
  void poll_set();
  void on_header(int w, int tag, const MsgHeader& h);
  [[nodiscard]] std::size_t ring_ahead(int w) const;
  [[nodiscard]] static std::size_t ring_slot(const Incoming& r, std::size_t at);
  void post_chunks(int w);
  /// Where chunk message `at` of worker w's 16-bit push lands (Incoming::encoded).
  [[nodiscard]] std::uint16_t* wire_dest(int w, std::size_t at);
  void on_chunk(int w);
  void complete(int w);
  void on_loaded(int w);
  void send_chunk(int w, const float* part, std::size_t c);
  void reply(int w, int tag, std::int64_t staleness, int flags,
             std::initializer_list<const float*> parts);
  void release_held();
  [[nodiscard]] bool stop_requested_here() const { return stop_flag_.load() || stop_seen_; }
  /// The stop that ends the updates: agreed where the rule agrees on steps, else requested here.
  [[nodiscard]] bool stop_in_force() const;
  /// The wait for the other ps ranks' say on step agree_step_: who has not answered.
  [[nodiscard]] std::string agreement_wait() const;
  /// One event loop wait: wait_any over polled_, within the deadline of the step's verdict.
  int wait_event(MPI_Status* st);
  /// No request of a worker in progress, no reply held, no ps rank waiting for this one's say.
  [[nodiscard]] bool idle() const;

  const Cluster& cluster_;
  const Config& c_;
  const int workers_;
  const std::size_t n_;
  const std::string who_;
  const std::atomic<bool>& stop_flag_;
  const ChunkLayout chunks_;
  std::unique_ptr<Backend> backend_;
  DeviceBuffer<float> params_;
  std::int64_t global_step_ = 0, max_steps_ = 0;
  /// The event loop's deadline, seconds: --timeout; with several ps ranks kSeveralPsTimeouts ×
  /// --timeout, and while idle() ps_reply_timeout() + --timeout (longer than a worker waits for any
  /// of them).
  const double wait_timeout_, idle_timeout_;
  bool stop_seen_ = false;  ///< a worker forwarded a stop request: tell every worker
  // agree_on_step(): every ps rank's say on global step agree_step_, one message each way between
  // every two ps ranks (a wait names the ones not heard from).
  MPI_Comm agree_comm_ = MPI_COMM_NULL;  ///< a duplicate of the job's ps ranks' communicator
  int agree_me_ = 0;
  std::vector<int> peer_world_;  ///< world rank of each rank of agree_comm_
  std::int64_t agree_step_ = -1;
  int agree_in_ = 0;
  std::vector<int> agree_from_;  ///< per ps rank: its say (1: stop)
  std::vector<MPI_Request> agree_recv_, agree_send_;
  int agree_missing_ = 0;  ///< says not yet received
  bool said_ = false;      ///< this rank's say on the step in agreement is sent
  double agree_deadline_ = 0;
  double waited_since_ = 0;  ///< before said_: when another ps's say came (it waits for ours)
  bool stop_agreed_ = false;
  std::vector<HeldReply> held_;
  ZeroChunk zeros_;                                ///< SNAPSHOT without m / v
  std::vector<std::vector<MPI_Request>> sending_;  ///< per chunk: reply sends in flight
  std::vector<MPI_Request> polled_;                ///< the event loop's requests this round
  /// Per polled request: worker w's chunk (w), its header (−1 − w), the reply leaving the slot
  /// its next chunk needs (workers_ + w), the ps ranks' verdict (kAgreement).
  std::vector<int> owner_;
  const std::function<std::string()> waiting_for_{[this] { return waiting_for(); }};
  std::vector<WorkerSlot> slots_;
  PsStats stats_;
  /// What a PUSH does (make_update_rule); declared last: it uses the members above.
  std::unique_ptr<UpdateRule> rule_;
};

}  // namespace dtrain
