// dtrain/ps/client.hpp — a worker's side of the ps protocol (ps/protocol.hpp): fused push-pull of
// gradient and parameter shards, initial load, snapshots for checkpoints, and DONE.
//
// All buffers are host memory of `total` floats (the full flat parameter buffer); the client sends
// each ps's range of it and receives into it in place, in chunks (ps/protocol.hpp). Calls block
// until every ps answered or --timeout passes (TimeoutError, a RuntimeFault, naming the ps). A
// push may also be issued in pieces while backward runs (begin_push / push_ready / finish_push:
// ps-lite's ticketed Push, Wait), a progress thread driving MPI meanwhile. An async push to a ps on
// this rank's node goes through the ring the ps shares with it, once a reply named it
// (ps/shared_ring.hpp): this rank writes the chunks in and copies the replies out. With a 16-bit
// push wire (--wire-dtype bf16|fp16; dnn/float16.hpp) each pushed chunk is rounded once to 16 bits
// as it is handed over: MPI messages carry the 16-bit values (half the bytes), a shared ring slot
// their fp32 values (the slot is also where the fp32 reply comes back and where the ps updates in
// place), so the ps applies the same rounded gradient either way; pulls, replies, LOAD and
// SNAPSHOT stay fp32 (parameters and optimizer state are not rounded). Not thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/core/options.hpp"  // WireDtype
#include "dtrain/ps/protocol.hpp"
#include "dtrain/ps/shared_ring.hpp"
#include "dtrain/ps/sharding.hpp"

namespace dtrain {

struct PushResult {
  std::int64_t global_step = 0;  ///< smallest global_step over the ps after this request
  std::int64_t staleness = 0;    ///< max over ps of (global_step at apply − step last seen)
  bool stop_requested = false;   ///< some rank asked to stop (signal)
  bool dropped = false;          ///< some ps did not apply the push (late or past the last step)
  /// ps 0 did not apply it: with backup workers each ps takes its own first gradients of a step,
  /// and a gradient counts as used (samples) where ps 0, whose counts results.json reports, used it
  bool dropped_first = false;
};

/// A worker's deadline for a ps's answer, in seconds: --timeout; twice that where the ps holds the
/// reply until other workers' pushes make the step's update (sync through the ps, SSP), so that
/// when a worker is stuck the ps, which knows whose push it still needs, times out first and
/// names it, rather than the waiting workers naming the ps (PsClient::set_answer_timeout() keeps
/// --timeout for the replies a ps gives at once).
[[nodiscard]] double ps_reply_timeout(const Config& c);

class PsClient {
 public:
  /// `shards`: one ShardRange per ps, exactly cluster.num_ps() entries (more throw
  /// std::out_of_range here). `timeout_s`: the deadline of every wait, seconds. `chunk_bytes`: the
  /// payload chunk of the protocol (--ps-chunk-kb · 1024; the ps must use the same). Throws
  /// InputError when chunk_bytes holds no float, LibraryError when MPI_Query_thread fails.
  /// `push_wire`: the gradients' format on the wire (--wire-dtype; the ps must use the same).
  PsClient(const Cluster& cluster, std::vector<ShardRange> shards, double timeout_s,
           std::size_t chunk_bytes = kDefaultChunkBytes, WireDtype push_wire = WireDtype::fp32);

  /// Fetches the parameters into params (total floats) once every ps has applied `wait_step`
  /// global steps (or stopped applying). Returns the smallest global_step over the ps. Throws
  /// TimeoutError when a ps does not answer within timeout_s, LibraryError when an MPI call fails.
  PushResult pull(float* params, std::int64_t wait_step = 0);
  /// Sends grads (total floats, gradient of the mean loss over `samples` samples; 0: no gradient,
  /// its values are ignored) and receives the parameters the ps answers with (ps/server.hpp) into
  /// params. `stop` asks every rank to stop. Returns the smallest global_step over the ps. Throws
  /// as pull().
  PushResult push_pull(const float* grads, int samples, float* params, bool stop);

  /// push_pull in pieces, so that its chunks leave while backward still produces the gradient:
  /// begin_push posts the receives of the replies (into params) and sends the headers;
  /// push_ready(from) sends every chunk lying inside grads[from, total) not sent yet (call it as
  /// the gradients from `from` on become final; `from` only decreases); finish_push sends the
  /// rest, waits for the replies and returns what push_pull does. From begin_push to finish_push
  /// grads[from, total) must stay unchanged once handed over, params[from, total) is written by
  /// the replies at any time (neither may be read or written by the caller), and no other call
  /// may be made. With MPI_THREAD_MULTIPLE a progress thread polls the requests meanwhile, so that
  /// the replies (which this rank copies, on shared memory) and the ps's sends complete while the
  /// caller computes; otherwise push_ready polls them. finish_push throws as push_pull does, and
  /// LibraryError when the progress thread's MPI_Testsome failed (or rethrows what its copies
  /// through a shared ring threw); the failure is reported once. begin_push and push_ready throw
  /// LibraryError when an MPI call fails (push_ready's own MPI_Testsome runs only without
  /// MPI_THREAD_MULTIPLE).
  void begin_push(const float* grads, int samples, float* params, bool stop);
  void push_ready(std::size_t from);
  PushResult finish_push();
  /// Chief only, before training: sets every ps's shard, optimizer state (m, v may be nullptr:
  /// zeros) and global_step; `max_steps` caps the pushes each ps applies. Throws as pull().
  void load(const float* params, const float* m, const float* v, std::int64_t global_step,
            std::int64_t max_steps);
  /// Chief only: gathers parameters and optimizer state from every ps (each ps answers with its
  /// shard as of its own current step) into params, m and v, each non-null and of `total` floats
  /// (a ps whose optimizer has no m or v sends zeros). Returns the smallest global_step over the
  /// ps. The model's step (the seen_step of the next push) is unchanged. Throws InputError for a
  /// null array, else as pull().
  std::int64_t snapshot(float* params, float* m, float* v);
  /// Tells every ps this worker is finished (waits until the headers are sent). Throws as pull().
  void done();
  /// From now on every push names, to every ps, one step for the parameters it was computed on:
  /// the smallest global step over the ps (PushResult::global_step), not each ps's own. Sync
  /// through the ps (without a pipeline) counts a global step as an update of every shard, which
  /// the ps ranks make together (ServerCore::agree_on_step): with backup workers a reply can come
  /// from a ps that has made the next update while another is still agreeing on it, and the push
  /// must then join the same step everywhere.
  void use_common_seen_step() { common_seen_ = true; }
  /// The deadline, seconds, for a reply every ps gives as the request arrives: a pull of a global
  /// step every ps has reached (by the last replies), SNAPSHOT, LOAD. Default: the constructor's
  /// timeout_s, which stays the deadline of a push (in sync through the ps and SSP its reply waits
  /// for other workers' pushes) and of a pull the ps may hold. Set to --timeout where timeout_s
  /// is longer (ps_reply_timeout()): a worker whose ps does not answer at once names it before
  /// the other ps ranks, whose held replies wait for this worker's push, name this worker.
  void set_answer_timeout(double seconds) { answer_timeout_ = seconds; }
  /// Pushes sent through a shared ring so far (all ps together; one per ps per push).
  [[nodiscard]] std::int64_t shared_ring_pushes() const { return shared_pushes_; }
  /// Gradient bytes pushed so far, all ps together: MPI payload (4 or 2 bytes a value, the push
  /// wire's) plus shared ring slots written (4 bytes a value).
  [[nodiscard]] std::int64_t pushed_bytes() const { return pushed_bytes_; }
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

 private:
  /// Sends `header` (seen_step filled per ps) + each ps's range of every part (nullptr: zeros)
  /// with `tag`, then (unless tag is DONE) receives each ps's reply header and `reply_parts`
  /// ranges per ps straight into `out` (protocol.hpp).
  PushResult exchange(int tag, MsgHeader header, const std::vector<const float*>& parts,
                      int reply_parts, const std::vector<float*>& out);
  /// Posts the receives of each ps's reply (header + `reply_parts` ranges into `out`, unless tag
  /// is DONE) and sends the request headers.
  void post(int tag, MsgHeader header, int reply_parts, const std::vector<float*>& out);
  /// Sends ps k's range of `part` (nullptr: zeros), chunks [sent_[k], upto) in travel order.
  void send_chunks(std::size_t k, const float* part, std::size_t upto);
  /// Waits for every request, then reads the reply headers (and maps a shared ring one names).
  PushResult wait(int tag);
  /// Shared rings: copies out every reply chunk that has come and writes the chunks whose slots
  /// that freed (up to Ring::wanted). True when it did either.
  bool progress_rings();
  /// Writes ps k's chunks [sent_[k], Ring::wanted) into free slots of its ring, each followed by
  /// its zero-byte message.
  void write_ring(std::size_t k);
  /// Waits (deadline: limit_) until every shared-ring chunk of the request has been answered
  /// and copied out; `what` names the operation in a TimeoutError.
  void drain_rings(const std::string& what);
  /// Maps the ring a reply header names, once per ps; logs why not where it cannot.
  void map_ring(std::size_t k, const MsgHeader& h);
  void progress_loop();  ///< the progress thread of an issued push
  /// "ps K (rank R)", ps k with its world rank, for messages (a pipeline stage's cluster numbers
  /// its own ranks).
  [[nodiscard]] std::string ps_name(std::size_t k) const;
  /// A chunk of `floats` zeros to send for a nullptr part.
  const float* zeros(std::size_t floats);
  /// Chunk c of ps k's range rounded to the push wire: the 16-bit encoding of `from` (the chunk's
  /// values) in encoded_, which stays there until the next push. Throws RuntimeFault when a value
  /// of a push with samples does not fit the wire (fp16: |x| ≥ 65520 becomes Inf).
  const std::uint16_t* encode_chunk(std::size_t k, const float* from, std::size_t c);
  const Cluster& cluster_;
  std::vector<ShardRange> shards_;
  double timeout_;
  double answer_timeout_;  // set_answer_timeout()
  double limit_ = 0;       // the deadline of the request in flight: timeout_ or answer_timeout_
  std::string peers_;      ///< "ps 0 (rank 3), ..." for watchdog messages
  /// "worker 1", or a pipeline stage's worker "stage 0/2, replica 1" (its index in the stage's
  /// cluster is its replica's, not its worker index): this worker in messages
  std::string me_;
  std::size_t chunk_bytes_;
  std::vector<std::int64_t> seen_;  // per ps: global_step of the parameters the model holds
  bool common_seen_ = false;        // use_common_seen_step()
  std::vector<MsgHeader> headers_in_, headers_out_;  // per ps, for the request in flight
  std::vector<ChunkLayout> layouts_;                 // per ps: its shard's chunks
  std::vector<MPI_Request> reqs_;
  std::vector<std::size_t> reply_at_;  // per ps: the index in reqs_ of its reply header's receive
  std::size_t replies_end_ = 0;        // reqs_[reply_at_[k], next ps's or this): ps k's reply
  std::vector<int> index_;             // MPI_Testsome's output
  ZeroChunk zeros_;
  /// What this rank shares with one ps: the ring, and the request in flight through it.
  struct Ring {
    std::optional<SharedRing> segment;  ///< empty: MPI messages only
    bool tried = false;                 ///< a header named the ring: mapped, or refused once
    bool in_use = false;                ///< the request in flight goes through it
    std::vector<MPI_Request> replies;   ///< its zero-byte reply messages, one per chunk
    std::size_t replied = 0;            ///< reply chunks copied out
    std::size_t wanted = 0;             ///< chunks handed over (push_ready)
  };
  std::vector<Ring> rings_;          // per ps
  const float* ring_src_ = nullptr;  // the pushed gradient, for the chunks still to be written
  float* ring_dst_ = nullptr;        // the parameters the replies go to
  std::int64_t shared_pushes_ = 0;
  // An issued push (begin_push .. finish_push).
  const float* push_grads_ = nullptr;
  std::vector<std::size_t> sent_;  // per ps: chunks sent, in travel order
  // The push wire: the request in flight is a push (pushing_) whose chunks are rounded to 16
  // bits (encoding_) into encoded_ (a copy of the whole gradient's encoding); finite_: it has
  // samples, so its values must fit the wire.
  WireDtype push_wire_;
  bool pushing_ = false, encoding_ = false, finite_ = false;
  std::vector<std::uint16_t> encoded_;
  std::int64_t pushed_bytes_ = 0;
  bool threaded_ = false;  // MPI_THREAD_MULTIPLE: a progress thread may poll
  std::mutex mu_;          // reqs_ between the caller and the progress thread
  std::atomic<bool> polling_{false};
  int progress_error_ = MPI_SUCCESS;     // the progress thread's MPI failure (read after join)
  std::exception_ptr progress_failure_;  // the progress thread's exception (read after join)
  std::thread progress_;
};

}  // namespace dtrain
