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
};

/// Whether worker w runs on this ps's node (DTRAIN_TEST_PS_REMOTE=1: never, for tests).
bool local_worker(const Cluster& cluster, int w);

/// The ps rank. Not copyable (the timeout message and the rule point at it). Not thread-safe: one
/// thread runs the loop, and the rule's calls come from it.
class ServerCore {
 public:
  /// Throws as run_parameter_server() does for its set-up (ps/server.hpp).
  ServerCore(const Cluster& cluster, const Config& c, const ShardRange& shard,
             std::int64_t total_steps, const std::atomic<bool>& stop_flag,
             const ShardTensors& tensors);
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
  [[nodiscard]] bool finished() const;
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
  void hold(int w, std::int64_t wait_step, std::int64_t staleness) {
    held_.push_back({w, wait_step, staleness});
  }
  /// Waits for the reply chunks still being sent from chunk c of the shard's arrays: call before
  /// changing them (their receives are posted, so they complete: protocol.hpp).
  void settle(std::size_t c);
  void settle_all();

 private:
  void share_rings();
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
  bool stop_seen_ = false;  ///< a worker forwarded a stop request: tell every worker
  std::vector<HeldReply> held_;
  ZeroChunk zeros_;                                ///< SNAPSHOT without m / v
  std::vector<std::vector<MPI_Request>> sending_;  ///< per chunk: reply sends in flight
  std::vector<MPI_Request> polled_;                ///< the event loop's requests this round
  /// Per polled request: worker w's chunk (w), its header (−1 − w), the reply leaving the slot
  /// its next chunk needs (workers_ + w).
  std::vector<int> owner_;
  const std::function<std::string()> waiting_for_{[this] { return waiting_for(); }};
  std::vector<WorkerSlot> slots_;
  PsStats stats_;
  /// What a PUSH does (make_update_rule); declared last: it uses the members above.
  std::unique_ptr<UpdateRule> rule_;
};

}  // namespace dtrain
