// dtrain/ps/protocol.hpp — the worker ⇄ ps wire protocol (Downpour SGD, Dean et al. 2012, in the
// fused push-pull shape of ps-lite), pipelined in chunks.
//
// A request or reply is a fixed MsgHeader on MPI_COMM_WORLD (the request's tag says what it is),
// followed by its payload — zero or more "parts", each the shard's n floats — on the cluster's
// payload communicator (Cluster::payload_comm), cut into chunks of at most `chunk` floats
// (--ps-chunk-kb, default 1 MiB; ChunkLayout): part 0's chunks in travel order — last chunk first,
// because backward produces a gradient from its end (ChunkLayout::travel) — then part 1's, ...
// With a 16-bit --wire-dtype a PUSH's chunk messages carry 2 bytes a value (dnn/float16.hpp; both
// sides read the dtype from the configuration), every other payload 4.
// Every size follows from the header's tag and the shard table, so no size is read back from MPI,
// and no message is larger than one chunk (a shard of any size, past 2 GiB included, travels as
// chunks; comm/big_message still carries a chunk above a lowered test count limit).
// Chunks go straight from and into the callers' arrays (no packing copy), and they pipeline: a
// ps applies the optimizer to a chunk of a push and sends that chunk of the reply while the next
// is still arriving, so the worker's copy of the reply overlaps the ps's update — and a worker
// may send a push's chunks while backward still runs, each as soon as its gradients are final
// (PsClient::begin_push), the ps serving the chunks of several workers' pushes interleaved.
//   worker → ps  PULL        header                       ps → worker REPLY  header + shard params
//                (answered once the ps's global_step ≥ header.wait_step)
//   worker → ps  PUSH        header + shard gradient      ps → worker REPLY  header + fresh shard
//   params
//                (sync through the ps / bounded staleness: once the update the push joins allows;
//                ps/server.hpp)
//   chief  → ps  LOAD        header + params, m, v        ps → chief  REPLY  header + shard params
//   chief  → ps  SNAPSHOT    header                       ps → chief  STATE  header + params, m, v
//                (LOAD and SNAPSHOT come from the chief, worker 0, only; LOAD at most once per
//                run, before any PUSH)
//   worker → ps  DONE        header                       (no reply; the ps exits after DONE from
//   all)
// Why it cannot deadlock: a worker posts all receives of a reply (header and chunks) before it
// sends, and has at most one request outstanding per ps; a ps keeps one pre-posted header receive
// per worker, posts the receives of a request's chunks when its header arrives (the worker sends
// them, then or later; an async push's a few at a time into a ring of chunk buffers, the next
// as each is applied and the reply sent from its slot has left, so its later sends wait only for
// the ps's loop, which always polls the request's next chunk or that reply — whose receive the
// worker has posted, so it completes), and re-posts that worker's header receive once the
// request's payload is in, so every send has a matching posted receive. A ps never changes
// parameters a reply is still being sent from: before it updates (or loads) a range it waits for
// the in-flight reply chunks that overlap it (their receives are posted, so they complete). A reply
// the ps holds back (waiting for other workers' pushes) keeps that worker's one request
// outstanding; the ps answers every held request when it stops applying updates (--max-steps, stop
// request), so no worker waits for a push that will never come. MPI's non-overtaking rule keeps
// each worker's messages, and each request's chunks, in order. A worker on the ps's own node pushes
// async gradients through a ring shared with the ps (ps/shared_ring.hpp) once a reply header has
// named it (ring_pid, ring_fd, ring_token): its PUSH header carries kFlagShm, chunk message t is a
// zero-byte message sent after the worker wrote the chunk into slot t mod kRingSlots, and the ps
// answers each chunk with a zero-byte message once it wrote the reply's values into that slot (the
// updated parameters, or the current ones for a push it does not apply). A slot changes hands only
// by these messages: the worker writes chunk t only after it copied out the reply of chunk t −
// kRingSlots, so no deadline is lost and the order argument above holds unchanged.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtrain/core/error.hpp"

namespace dtrain {

enum PsTag : int {
  kTagPull = 101,
  kTagPush = 102,
  kTagLoad = 103,
  kTagSnapshot = 104,
  kTagDone = 105,
  kTagReply = 110,
  kTagState = 111,
  kTagAgree = 120,  ///< ps → ps: its say on a global step's update (sync, SSP), on their own
                    ///< communicator
};

enum PsFlag : std::int32_t {
  kFlagStop = 1,     ///< a rank asked to stop (signal): checkpoint and exit at the next boundary
  kFlagDropped = 2,  ///< ps → worker: the push was not applied (late, or after the last step)
  kFlagShm = 4,      ///< worker → ps PUSH: its chunks lie in the shared ring (zero-byte messages)
};

/// Chunk slots of a worker's ring on the ps (an async push is received, updated and answered a
/// chunk at a time through them), private or shared with a worker on the ps's node.
inline constexpr std::size_t kRingSlots = 4;

struct MsgHeader {
  std::int64_t global_step =
      0;  ///< ps → worker: pushes applied by this ps; LOAD: step to resume at
  std::int64_t seen_step = 0;   ///< worker → ps: this ps's global_step at the worker's last reply
  std::int64_t staleness = 0;   ///< ps → worker: global_step at apply − seen_step
  std::int32_t samples = 0;     ///< worker → ps: samples behind this gradient (0: none, ignored)
  std::int32_t flags = 0;       ///< PsFlag bits
  std::int64_t max_steps = 0;   ///< LOAD: the run's --max-steps (0: none)
  std::int64_t wait_step = 0;   ///< PULL: answer once global_step ≥ wait_step
  std::int32_t ring_pid = 0;    ///< ps → worker: the process holding the shared ring (0: none)
  std::int32_t ring_fd = -1;    ///< ps → worker: its descriptor of the ring (SharedRing::open)
  std::int64_t ring_token = 0;  ///< ps → worker: the token the ring starts with
};
static_assert(sizeof(MsgHeader) == 64, "MsgHeader must keep the float payload 16-byte aligned");

/// Usable bytes of a worker's shared ring: kRingSlots chunks of `largest_chunk` floats
/// (ChunkLayout::largest() of the ps's shard).
[[nodiscard]] inline std::size_t shared_ring_bytes(std::size_t largest_chunk) {
  return kRingSlots * largest_chunk * sizeof(float);
}

/// The default payload chunk (--ps-chunk-kb 1024): 1 MiB.
inline constexpr std::size_t kDefaultChunkBytes = std::size_t{1} << 20;

/// The smallest chunk ChunkLayout picks unless the --ps-chunk-kb limit is smaller: 128 KiB (each
/// message costs a few µs: smaller chunks measured slower in tests/benchmarks/comm_bench.sh).
inline constexpr std::size_t kMinChunkBytes = std::size_t{128} << 10;
/// How one part of `n` floats is cut into chunks: chunk i covers floats [begin(i), begin(i) +
/// size(i)); every chunk but the last is full. A chunk holds at most `chunk_bytes` (the
/// --ps-chunk-kb limit) and, for parts of more than 8 × kMinChunkBytes, about n / 8 floats, so that
/// a 1 MiB push still pipelines in 8 steps; never less than kMinChunkBytes unless the limit is
/// smaller. n = 0: no chunk. Both sides derive the same layout from n.
struct ChunkLayout {
  /// n: floats in the part; per: floats in a full chunk (all but possibly the last; ≥ 1).
  std::size_t n = 0, per = 1;
  /// `chunk_bytes` ≥ sizeof(float) (a smaller value is taken as one float).
  ChunkLayout(std::size_t floats, std::size_t chunk_bytes) : n(floats) {
    const std::size_t limit = std::max<std::size_t>(1, chunk_bytes / sizeof(float));
    const std::size_t eighth = std::max(kMinChunkBytes / sizeof(float), (floats + 7) / 8);
    per = std::min(limit, eighth);
  }
  /// Number of chunks, ceil(n / per); 0 when n = 0.
  [[nodiscard]] std::size_t count() const { return (n + per - 1) / per; }
  /// The chunk that travels t-th (0 ≤ t < count()): the last one first.
  [[nodiscard]] std::size_t travel(std::size_t t) const { return count() - 1 - t; }
  /// Floats in the largest chunk (the first), at least 1.
  [[nodiscard]] std::size_t largest() const { return std::max<std::size_t>(1, std::min(n, per)); }
  /// Index of chunk i's first float in the part: i × per.
  [[nodiscard]] std::size_t begin(std::size_t i) const { return i * per; }
  /// Floats in chunk i: per, less for the last chunk, 0 for i ≥ count().
  [[nodiscard]] std::size_t size(std::size_t i) const {
    return i * per >= n ? 0 : (n - i * per < per ? n - i * per : per);
  }
};

/// Zeros sent for a part the sender does not hold (a LOAD or SNAPSHOT of an optimizer without m or
/// v). Allocated once, for the protocol's largest chunk, so every send posted from it stays valid
/// while it is in flight.
class ZeroChunk {
 public:
  /// `floats` zeros, from a buffer of `largest` floats (the same value on every call until
  /// release()). Throws InputError when floats exceeds the buffer (the first call's `largest`).
  const float* get(std::size_t floats, std::size_t largest) {
    if (zeros_.empty()) zeros_.assign(largest, 0.0f);
    DT_REQUIRE(floats <= zeros_.size(), "ps protocol: a chunk larger than the protocol's");
    return zeros_.data();
  }
  /// Gives the buffer back (no send from it may be in flight).
  void release() { std::vector<float>().swap(zeros_); }

 private:
  std::vector<float> zeros_;
};

}  // namespace dtrain
