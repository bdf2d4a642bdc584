// dtrain/ps/server_io.cpp — how the ps receives a request's payload and sends its replies
// (ps/protocol.hpp): chunk receives into the shard's arrays or into the worker's ring, reply
// headers, reply chunks from the shard (tracked until settled) or from a ring slot.
//
// kRingSlots (ps/protocol.hpp): chunk buffers per worker that an async push (or any part the ps
// does not keep) is received into, each reused once its chunk is applied: such receives are
// posted this many ahead. The gradient then never leaves the cache between its copy in and the
// update, where a shard-sized buffer sent it to memory and back (comm_bench, 3 ranks, 64 MiB:
// push-pull/bare 0.74–0.76 → 0.85–0.98), and the ps holds no shard-sized buffer for what it reads
// once. A slot is also where its chunk's reply leaves from (the update writes the new parameters
// over the gradient: Optimizer::apply_into_grads), so a worker's copy of a reply reads the slot,
// never the shard: on shared memory the receiver copies, and a parameter line a worker's core
// has read must be taken back from it before the next update can write it — ~7× the update's
// own time where the two cores sit far apart (ps_update_bench --cross-core), while a slot is
// next written by the receive of a chunk, a copy whose full-line stores pay that less. A slot
// takes a new chunk once its reply has left. Slots are used round the ring across requests, so
// the next push of a worker lands beside, not on, the slot its last reply is leaving from.
// A worker on the ps's node has its async pushes' ring in shared memory instead (--ps-shm).
// With a 16-bit --wire-dtype a push's chunk messages over MPI carry 16-bit values: each is
// received into the worker's 16-bit staging (the ring's slots, or a shard for an array) and
// widened into its fp32 place when it arrives, before the update rule sees it (Horovod's
// Compression.fp16: rounded once by the sender, computed on in fp32 by the receiver).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "dtrain/comm/big_message.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/dnn/float16.hpp"
#include "server_core.hpp"
#include "update_rule.hpp"

namespace dtrain {

bool local_worker(const Cluster& cluster, int w) {
  static const bool all_remote = [] {
    const char* v = std::getenv("DTRAIN_TEST_PS_REMOTE");
    return v != nullptr && std::string(v) == "1";
  }();
  const int node = cluster.ranks()[static_cast<std::size_t>(cluster.worker_rank(w))].node;
  return node == cluster.me().node && !all_remote;
}

/// Ring receives posted ahead of the chunk being processed, for a worker on another node: the
/// network moves those chunks while the ps updates (kRingSlots). For a worker on the ps's own
/// node one: on shared memory the receiving process copies a message in itself, inside its MPI
/// progress, so receives posted further ahead only make it copy several chunks before it can
/// update the first and let the worker copy that reply on its own core (comm_bench, 2 ranks,
/// 256 KiB in two chunks: both copied in before the first update, 25 of a 50 µs round trip).
/// DTRAIN_TEST_PS_REMOTE=1 (for tests) counts every worker as remote, so that one machine runs
/// the network's way too (and no ring is shared).
std::size_t ServerCore::ring_ahead(int w) const {
  return local_worker(cluster_, w) ? 1 : kRingSlots;
}

void ServerCore::start(int w, int tag, const MsgHeader& h, Fate fate,
                       std::initializer_list<float*> parts, bool shm) {
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
  r.encoded = tag == kTagPush && !shm && c_.wire_dtype != WireDtype::fp32;
  if (shm) {
    r.ring = slots_[w].shm->data();
  } else if (std::find(r.dest.begin(), r.dest.end(), nullptr) != r.dest.end()) {
    std::vector<float>& ring = slots_[w].ring;
    if (ring.empty()) ring.resize(kRingSlots * chunks_.largest());  // ≤ kRingSlots × --ps-chunk-kb
    r.ring = ring.data();
  }
  if (r.encoded) {
    const std::size_t need = r.ring ? kRingSlots * chunks_.largest() : n_;
    slots_[w].wire.resize(std::max(slots_[w].wire.size(), need));
  }
  r.reqs.assign(r.dest.size() * chunks_.count(), MPI_REQUEST_NULL);
  post_chunks(w);
  if (r.reqs.empty()) complete(w);
}

/// The ring slot of chunk message `at` of request r (if its part goes through the ring).
std::size_t ServerCore::ring_slot(const Incoming& r, std::size_t at) {
  return (r.ring_base + at) % kRingSlots;
}

float* ServerCore::chunk_dest(const Incoming& r, std::size_t at) const {
  float* part = r.dest[at / chunks_.count()];
  if (!part) return r.ring + ring_slot(r, at) * chunks_.largest();
  return part + chunks_.begin(chunks_.travel(at % chunks_.count()));
}

/// Posts the receives of worker w's request that may be posted now, in message order: up to
/// the first one into the ring that is more than ring_ahead() past the chunk being processed or
/// whose slot still has a reply in flight (the event loop then polls that reply: poll_set()).
void ServerCore::post_chunks(int w) {
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
      if (at >= r.done + ring_ahead(w)) break;
      MPI_Request& reply = slots_[w].ring_send[ring_slot(r, at)];
      int gone = 1;
      if (reply != MPI_REQUEST_NULL) DT_CHECK_MPI(MPI_Test(&reply, &gone, MPI_STATUS_IGNORE));
      if (!gone) break;
    }
    const std::size_t floats = chunks_.size(chunks_.travel(at % chunks_.count()));
    void* into = r.encoded ? static_cast<void*>(wire_dest(w, at)) : chunk_dest(r, at);
    const std::size_t bytes = floats * (r.encoded ? wire_bytes(c_.wire_dtype) : sizeof(float));
    irecv_bytes(into, bytes, cluster_.worker_rank(w), 0, cluster_.payload_comm(), &r.reqs[at]);
  }
}

std::uint16_t* ServerCore::wire_dest(int w, std::size_t at) {
  const Incoming& r = slots_[w].req;
  std::uint16_t* wire = slots_[w].wire.data();
  if (!r.dest[at / chunks_.count()]) return wire + ring_slot(r, at) * chunks_.largest();
  return wire + chunks_.begin(chunks_.travel(at % chunks_.count()));  // a push has one part
}

/// The next chunk message of worker w's request has arrived (its ring slot, if it used one, is
/// free again once the chunk is applied).
void ServerCore::on_chunk(int w) {
  Incoming& r = slots_[w].req;
  const std::size_t at = r.done++;
  r.reqs[at] = MPI_REQUEST_NULL;
  const std::size_t c = chunks_.travel(at % chunks_.count());
  if (r.shm) std::atomic_thread_fence(std::memory_order_acquire);  // the worker's chunk
  if (r.encoded) decode_wire(c_.wire_dtype, wire_dest(w, at), chunk_dest(r, at), chunks_.size(c));
  if (r.tag == kTagPush) rule_->on_chunk(w, c, at);
  post_chunks(w);
  if (r.done == r.reqs.size()) complete(w);
}

/// Worker w's request has been received whole: answer, hold or aggregate it, then take its
/// next request.
void ServerCore::complete(int w) {
  Incoming& r = slots_[w].req;
  if (r.tag == kTagLoad) on_loaded(w);
  else rule_->on_pushed(w);
  if (r.shm) ++stats_.shared_ring_pushes;
  else slots_[w].ring_next = r.ring_base + r.reqs.size();
  r.active = false;
  post_recv(w);
}

/// Sends chunk c of `part` (a shard array; nullptr: zeros) to worker w; it stays in flight
/// until settle(c).
void ServerCore::send_chunk(int w, const float* part, std::size_t c) {
  const std::size_t b = chunks_.begin(c), len = chunks_.size(c);
  const float* from = part ? part + b : zeros_.get(len, chunks_.largest());
  std::vector<MPI_Request>& sending = sending_[c];
  // Replies with no update in between (pulls, held replies) pile up here: keep the list short.
  if (sending.size() >= 2 * static_cast<std::size_t>(workers_)) settle(c);
  sending.push_back(MPI_REQUEST_NULL);
  isend_bytes(from, len * sizeof(float), cluster_.worker_rank(w), 0, cluster_.payload_comm(),
              &sending.back());
}

void ServerCore::settle(std::size_t c) {
  wait_all(sending_[c], comm_timeout(), who_ + " sending parameters");
  sending_[c].clear();
}

void ServerCore::settle_all() {
  for (std::size_t c = 0; c < chunks_.count(); ++c) settle(c);
}

void ServerCore::reply_header(int w, int tag, std::int64_t global_step, std::int64_t staleness,
                              int flags) {
  WorkerSlot& s = slots_[w];
  wait_one(s.send, comm_timeout(), who_ + " sending to worker " + std::to_string(w));
  s.out = MsgHeader{};
  s.out.global_step = global_step;
  s.out.staleness = staleness;
  // Where the ps ranks agree on the last step, a stop is told once agreed: a worker that stops
  // on it pushes no more, and the step it would have pushed must not wait for it.
  s.out.flags = flags | (stop_in_force() ? kFlagStop : 0);
  if (s.shm) {
    s.out.ring_pid = static_cast<std::int32_t>(getpid());
    s.out.ring_fd = s.shm->fd();
    s.out.ring_token = s.shm->token();
  }
  DT_CHECK_MPI(MPI_Isend(&s.out, sizeof(MsgHeader), MPI_BYTE, cluster_.worker_rank(w), tag,
                         cluster_.world(), &s.send));
}

/// Sends header + the given shard arrays (nullptr: zeros) to worker w, all chunks at once.
void ServerCore::reply(int w, int tag, std::int64_t staleness, int flags,
                       std::initializer_list<const float*> parts) {
  reply_header(w, tag, global_step_, staleness, flags);
  for (const float* part : parts)  // protocol.hpp: part by part, each chunk in travel order
    for (std::size_t t = 0; t < chunks_.count(); ++t) send_chunk(w, part, chunks_.travel(t));
}

void ServerCore::reply_params(int w, std::int64_t staleness, int flags) {
  reply(w, kTagReply, staleness, flags, {params_.data()});
  rule_->on_sent(w, params_.data(), 0, n_);
}

void ServerCore::send_slot(int w, std::size_t at, float* g, std::size_t floats) {
  const Incoming& r = slots_[w].req;
  MPI_Request& send = slots_[w].ring_send[ring_slot(r, at)];
  if (!r.shm) {
    isend_bytes(g, floats * sizeof(float), cluster_.worker_rank(w), 0, cluster_.payload_comm(),
                &send);
    return;
  }
  wait_one(send, comm_timeout(),
           who_ + " handing a shared ring slot to worker " +
               std::to_string(w));                      // its last zero-byte message
  std::atomic_thread_fence(std::memory_order_release);  // the slot's values before the message
  DT_CHECK_MPI(
      MPI_Isend(g, 0, MPI_BYTE, cluster_.worker_rank(w), 0, cluster_.payload_comm(), &send));
}

}  // namespace dtrain
