// dtrain/ps/client.cpp — worker side of the ps protocol: receives posted before sends, one
// outstanding request per ps, payload chunks straight from and into the caller's arrays,
// deadline-aware waits; async pushes to a ps on this node through the ring it shares.
#include "dtrain/ps/client.hpp"

#include <algorithm>
#include <atomic>
#include <functional>
#include <utility>

#include "dtrain/comm/big_message.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/dnn/float16.hpp"
#include "dtrain/ps/protocol.hpp"

namespace dtrain {

double ps_reply_timeout(const Config& c) {
  return exchange_kind(c) == ExchangeKind::ps_async ? c.timeout : 2 * c.timeout;
}

PsClient::PsClient(const Cluster& cluster, std::vector<ShardRange> shards, double timeout_s,
                   std::size_t chunk_bytes, WireDtype push_wire)
    : cluster_(cluster), shards_(std::move(shards)), timeout_(timeout_s),
      answer_timeout_(timeout_s), chunk_bytes_(chunk_bytes), seen_(shards_.size(), 0),
      push_wire_(push_wire) {
  DT_REQUIRE(chunk_bytes_ >= sizeof(float), "ps client: chunks must hold at least one float");
  for (const ShardRange& s : shards_) layouts_.emplace_back(s.size(), chunk_bytes_);
  me_ = cluster_.me().part.empty() ? "worker " + std::to_string(cluster_.me().index)
                                   : cluster_.me().part;
  if (push_wire_ != WireDtype::fp32)
    for (const ShardRange& s : shards_) encoded_.resize(std::max(encoded_.size(), s.end));
  rings_.resize(shards_.size());
  int level = MPI_THREAD_SINGLE;
  DT_CHECK_MPI(MPI_Query_thread(&level));
  threaded_ = level >= MPI_THREAD_MULTIPLE;
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    // "ps 0 (rank 3), ps 1 (rank 2)": names the peers in a watchdog message.
    peers_ += (k ? ", " : "") + ps_name(k);
  }
}

namespace {
const char* tag_name(int tag) {
  switch (tag) {
    case kTagPull:
      return "pulling parameters";
    case kTagPush:
      return "pushing gradients";
    case kTagLoad:
      return "loading parameters";
    case kTagSnapshot:
      return "gathering a checkpoint snapshot";
    case kTagDone:
      return "sending DONE";
    default:
      return "exchanging";
  }
}
}  // namespace

void PsClient::post(int tag, MsgHeader header, int reply_parts, const std::vector<float*>& out) {
  const int K = static_cast<int>(shards_.size());
  const bool answered = tag != kTagDone;
  reqs_.clear();
  headers_in_.resize(K);
  headers_out_.resize(K);
  reply_at_.assign(K, 0);
  sent_.assign(K, 0);
  for (Ring& ring : rings_) {
    ring.in_use = false;
    ring.replied = ring.wanted = 0;
  }
  ring_src_ = nullptr;
  ring_dst_ = answered && reply_parts > 0 ? out[0] : nullptr;
  pushing_ = tag == kTagPush;
  encoding_ = pushing_ && push_wire_ != WireDtype::fp32;
  finite_ = header.samples > 0;
  // Every receive of the replies first (protocol.hpp): the header, then each part's chunks in
  // travel order straight into its array.
  for (int k = 0; k < K && answered; ++k) {
    const ShardRange& s = shards_[k];
    const int ps = cluster_.ps_rank(k);
    reply_at_[k] = reqs_.size();
    reqs_.emplace_back();
    DT_CHECK_MPI(MPI_Irecv(&headers_in_[k], sizeof(MsgHeader), MPI_BYTE, ps, MPI_ANY_TAG,
                           cluster_.world(), &reqs_.back()));
    const ChunkLayout& chunks = layouts_[k];
    Ring& ring = rings_[k];
    ring.in_use = tag == kTagPush && ring.segment.has_value();
    if (ring.in_use) {  // one zero-byte message per reply chunk: its values wait in the slot
      DT_REQUIRE(out[0] != nullptr, "ps client: a reply part without a destination");
      ring.replies.assign(chunks.count(), MPI_REQUEST_NULL);
      for (MPI_Request& r : ring.replies)
        DT_CHECK_MPI(MPI_Irecv(nullptr, 0, MPI_BYTE, ps, 0, cluster_.payload_comm(), &r));
      continue;
    }
    for (int part = 0; part < reply_parts; ++part) {
      DT_REQUIRE(out[part] != nullptr, "ps client: a reply part without a destination");
      for (std::size_t t = 0; t < chunks.count(); ++t) {
        const std::size_t c = chunks.travel(t);
        reqs_.emplace_back();
        irecv_bytes(out[part] + s.begin + chunks.begin(c), chunks.size(c) * sizeof(float), ps, 0,
                    cluster_.payload_comm(), &reqs_.back());
      }
    }
  }
  replies_end_ = reqs_.size();
  const std::int64_t common = seen_.empty() ? 0 : *std::min_element(seen_.begin(), seen_.end());
  const bool may_wait = tag == kTagPush || (tag == kTagPull && header.wait_step > common);
  limit_ = may_wait ? timeout_ : answer_timeout_;
  for (int k = 0; k < K; ++k) {
    headers_out_[k] = header;
    headers_out_[k].seen_step = common_seen_ ? common : seen_[k];
    if (rings_[k].in_use) headers_out_[k].flags |= kFlagShm;
    reqs_.emplace_back();
    DT_CHECK_MPI(MPI_Isend(&headers_out_[k], sizeof(MsgHeader), MPI_BYTE, cluster_.ps_rank(k), tag,
                           cluster_.world(), &reqs_.back()));
  }
}

void PsClient::send_chunks(std::size_t k, const float* part, std::size_t upto) {
  if (rings_[k].in_use) {
    ring_src_ = part;
    rings_[k].wanted = std::max(rings_[k].wanted, upto);
    write_ring(k);
    return;
  }
  const ShardRange& s = shards_[k];
  const ChunkLayout& chunks = layouts_[k];
  for (; sent_[k] < upto; ++sent_[k]) {
    const std::size_t c = chunks.travel(sent_[k]);
    const float* from = part ? part + s.begin + chunks.begin(c) : zeros(chunks.size(c));
    const void* data = encoding_ ? static_cast<const void*>(encode_chunk(k, from, c)) : from;
    const std::size_t bytes = chunks.size(c) * (encoding_ ? wire_bytes(push_wire_) : sizeof(float));
    reqs_.emplace_back();
    isend_bytes(data, bytes, cluster_.ps_rank(static_cast<int>(k)), 0, cluster_.payload_comm(),
                &reqs_.back());
    if (pushing_) pushed_bytes_ += static_cast<std::int64_t>(bytes);
  }
}

const std::uint16_t* PsClient::encode_chunk(std::size_t k, const float* from, std::size_t c) {
  const ChunkLayout& chunks = layouts_[k];
  const std::size_t at = shards_[k].begin + chunks.begin(c), len = chunks.size(c);
  std::uint16_t* to = encoded_.data() + at;
  encode_wire(push_wire_, from, to, len);
  if (finite_ && !wire_all_finite(push_wire_, to, len))
    throw RuntimeFault(format_error(me_ + ": a gradient value in [" + std::to_string(at) + ", " +
                                        std::to_string(at + len) + ") does not fit --wire-dtype " +
                                        to_string(push_wire_) +
                                        " (finite values up to 65504); the push would carry Inf " +
                                        "(--wire-dtype bf16 has fp32's range)",
                                    __FILE__, __LINE__));
  return to;
}

void PsClient::write_ring(std::size_t k) {
  const ShardRange& s = shards_[k];
  const ChunkLayout& chunks = layouts_[k];
  const Ring& ring = rings_[k];
  const int ps = cluster_.ps_rank(static_cast<int>(k));
  // Chunk t goes to slot t mod kRingSlots once chunk t − kRingSlots's reply has been copied out.
  for (; sent_[k] < ring.wanted && sent_[k] < ring.replied + kRingSlots; ++sent_[k]) {
    const std::size_t c = chunks.travel(sent_[k]), len = chunks.size(c);
    float* slot = ring.segment->data() + (sent_[k] % kRingSlots) * chunks.largest();
    const float* from = ring_src_ ? ring_src_ + s.begin + chunks.begin(c) : zeros(len);
    if (encoding_) decode_wire(push_wire_, encode_chunk(k, from, c), slot, len);  // rounded
    else std::copy(from, from + len, slot);
    pushed_bytes_ += static_cast<std::int64_t>(len * sizeof(float));
    std::atomic_thread_fence(std::memory_order_release);  // the chunk before its message
    reqs_.emplace_back();
    DT_CHECK_MPI(MPI_Isend(slot, 0, MPI_BYTE, ps, 0, cluster_.payload_comm(), &reqs_.back()));
  }
}

bool PsClient::progress_rings() {
  bool moved = false;
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    Ring& ring = rings_[k];
    if (!ring.in_use) continue;
    const ShardRange& s = shards_[k];
    const ChunkLayout& chunks = layouts_[k];
    while (ring.replied < ring.replies.size()) {  // in order (MPI's non-overtaking rule)
      int flag = 0;
      DT_CHECK_MPI(MPI_Test(&ring.replies[ring.replied], &flag, MPI_STATUS_IGNORE));
      if (!flag) break;
      std::atomic_thread_fence(std::memory_order_acquire);  // the slot's values after the message
      const std::size_t c = chunks.travel(ring.replied);
      const float* slot = ring.segment->data() + (ring.replied % kRingSlots) * chunks.largest();
      std::copy(slot, slot + chunks.size(c), ring_dst_ + s.begin + chunks.begin(c));
      ++ring.replied;
      moved = true;
    }
    const std::size_t before = sent_[k];
    write_ring(k);
    moved = moved || sent_[k] != before;
  }
  return moved;
}

void PsClient::drain_rings(const std::string& what) {
  std::vector<MPI_Request> next;
  std::vector<std::size_t> ps;
  for (;;) {
    progress_rings();
    next.clear();
    ps.clear();
    for (std::size_t k = 0; k < shards_.size(); ++k) {
      const Ring& ring = rings_[k];
      if (!ring.in_use || ring.replied == ring.replies.size()) continue;
      next.push_back(ring.replies[ring.replied]);
      ps.push_back(k);
    }
    if (next.empty()) return;
    // A timeout names the ps whose ring replies are still missing.
    const std::function<std::string()> name = [&] {
      std::string list;
      for (std::size_t k : ps) list += (list.empty() ? "" : ", ") + ps_name(k);
      return what + " (the replies in the shared ring of " + list + ")";
    };
    const int i = wait_any(next, limit_, name, nullptr);
    Ring& done = rings_[ps[static_cast<std::size_t>(i)]];
    done.replies[done.replied] = MPI_REQUEST_NULL;  // completed: progress_rings copies it out
  }
}

void PsClient::map_ring(std::size_t k, const MsgHeader& h) {
  Ring& ring = rings_[k];
  if (ring.tried || h.ring_fd < 0 || h.ring_pid <= 0) return;
  ring.tried = true;
  std::string why;
  ring.segment = SharedRing::open(h.ring_pid, h.ring_fd, shared_ring_bytes(layouts_[k].largest()),
                                  h.ring_token, &why);
  if (!ring.segment)
    log_warn(me_ + ": cannot map the ring ps " + std::to_string(k) + " shares (" + why +
             "); pushes to it travel as MPI messages");
}

PushResult PsClient::wait(int tag) {
  const std::string what = me_ + " " + tag_name(tag) + " with " + peers_;
  drain_rings(what);
  try {
    wait_all(reqs_, limit_, what);
  } catch (const TimeoutError& e) {  // name the ps whose reply has not come, or not whole
    std::string none, part;
    const std::size_t K = shards_.size();
    for (std::size_t k = 0; k < K && tag != kTagDone; ++k) {
      const auto begin = reqs_.begin() + static_cast<std::ptrdiff_t>(reply_at_[k]);
      const auto end =
          reqs_.begin() + static_cast<std::ptrdiff_t>(k + 1 < K ? reply_at_[k + 1] : replies_end_);
      std::string& list = *begin != MPI_REQUEST_NULL ? none : part;  // its header, or payload
      if (std::any_of(begin, end, [](MPI_Request r) { return r != MPI_REQUEST_NULL; }))
        list += (list.empty() ? "" : ", ") + ps_name(k);
    }
    if ((none.empty() && part.empty()) || K == 1) throw;
    throw TimeoutError(
        e.seconds(),
        what + (none.empty() ? "" : " (no reply from " + none + ")") +
            (part.empty() ? "" : " (part of the reply of " + part + " still missing)"));
  }
  PushResult r;
  for (std::size_t k = 0; k < shards_.size() && tag != kTagDone; ++k) {
    const MsgHeader& h = headers_in_[k];
    map_ring(k, h);
    if (rings_[k].in_use) ++shared_pushes_;
    rings_[k].in_use = false;
    // The step whose parameters the model now holds: a snapshot's go to a checkpoint, not to the
    // model, whose next push still carries the step of its last pull (else a backup worker's
    // stale gradient would pass as fresh, and staleness read low, after every checkpoint).
    if (tag != kTagSnapshot) seen_[k] = h.global_step;
    r.global_step = k == 0 ? h.global_step : std::min(r.global_step, h.global_step);
    r.staleness = std::max(r.staleness, h.staleness);
    r.stop_requested = r.stop_requested || (h.flags & kFlagStop);
    r.dropped = r.dropped || (h.flags & kFlagDropped);
    if (k == 0) r.dropped_first = (h.flags & kFlagDropped) != 0;
  }
  return r;
}

PushResult PsClient::exchange(int tag, MsgHeader header, const std::vector<const float*>& parts,
                              int reply_parts, const std::vector<float*>& out) {
  post(tag, header, reply_parts, out);
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    for (const float* part : parts) {  // part by part: each part's chunks from the start
      sent_[k] = 0;
      send_chunks(k, part, layouts_[k].count());
    }
  }
  return wait(tag);
}

void PsClient::begin_push(const float* grads, int samples, float* params, bool stop) {
  MsgHeader h;
  h.samples = samples;
  h.flags = stop ? kFlagStop : 0;
  post(kTagPush, h, 1, {params});
  push_grads_ = grads;
  if (threaded_) {
    polling_ = true;
    progress_ = std::thread([this] { progress_loop(); });
  }
}

void PsClient::push_ready(std::size_t from) {
  const std::lock_guard<std::mutex> lock(mu_);
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    // Chunks travel last first: count those whose start lies at or past `from`.
    const ShardRange& s = shards_[k];
    const ChunkLayout& chunks = layouts_[k];
    std::size_t upto = sent_[k];
    while (upto < chunks.count() && s.begin + chunks.begin(chunks.travel(upto)) >= from) ++upto;
    send_chunks(k, push_grads_, upto);
  }
  if (!threaded_) {  // drive the transfers in flight from here
    progress_rings();
    int count = 0;
    index_.resize(reqs_.size());
    DT_CHECK_MPI(MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &count, index_.data(),
                              MPI_STATUSES_IGNORE));
  }
}

PushResult PsClient::finish_push() {
  push_ready(0);
  if (progress_.joinable()) {
    polling_ = false;
    progress_.join();
  }
  push_grads_ = nullptr;
  if (progress_failure_) std::rethrow_exception(std::exchange(progress_failure_, nullptr));
  if (progress_error_ != MPI_SUCCESS)
    throw LibraryError(
        format_error("MPI_Testsome on a push in flight failed: " +
                         mpi_error_string(std::exchange(progress_error_, MPI_SUCCESS)),
                     __FILE__, __LINE__));
  return wait(kTagPush);
}

void PsClient::progress_loop() {
  // Back to back while requests complete, then sleeps doubling from 20 µs to 500 µs: a reply
  // chunk is copied by this rank when it polls, and the ps waits for it before it changes that
  // chunk again; the caller's compute keeps the core otherwise.
  int sleep_us = 20;
  std::vector<int> index;
  while (polling_) {
    int count = 0;
    bool ring_moved = false;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      try {  // copies the replies out of shared rings and writes the chunks they free
        ring_moved = progress_rings();
      } catch (...) {  // finish_push rethrows it
        progress_failure_ = std::current_exception();
        return;
      }
      index.resize(reqs_.size());
      const int rc = MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &count,
                                  index.data(), MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {  // finish_push reports it; its wait_all fails the same way
        progress_error_ = rc;
        return;
      }
    }
    if (ring_moved || (count > 0 && count != MPI_UNDEFINED)) {
      sleep_us = 20;
      continue;
    }
    nap_us(sleep_us);
    sleep_us = std::min(2 * sleep_us, 500);
  }
}

std::string PsClient::ps_name(std::size_t k) const {
  const int world =
      cluster_.ranks()[static_cast<std::size_t>(cluster_.ps_rank(static_cast<int>(k)))].rank;
  return "ps " + std::to_string(k) + " (rank " + std::to_string(world) + ")";
}

const float* PsClient::zeros(std::size_t floats) {
  std::size_t largest = 1;  // the largest shard has the largest chunks (ChunkLayout)
  for (const ShardRange& s : shards_) largest = std::max(largest, s.size());
  return zeros_.get(floats, ChunkLayout(largest, chunk_bytes_).largest());
}

PushResult PsClient::pull(float* params, std::int64_t wait_step) {
  MsgHeader h;
  h.wait_step = wait_step;
  return exchange(kTagPull, h, {}, 1, {params});
}

PushResult PsClient::push_pull(const float* grads, int samples, float* params, bool stop) {
  MsgHeader h;
  h.samples = samples;
  h.flags = stop ? kFlagStop : 0;
  return exchange(kTagPush, h, {grads}, 1, {params});
}

PsClient::~PsClient() {
  if (progress_.joinable()) {  // unwinding from an issued push
    polling_ = false;
    progress_.join();
  }
}

void PsClient::load(const float* params, const float* m, const float* v, std::int64_t global_step,
                    std::int64_t max_steps) {
  MsgHeader h;  // LOAD carries the resume point in global_step / max_steps
  h.global_step = global_step;
  h.max_steps = max_steps;
  exchange(kTagLoad, h, {params, m, v}, 0, {});
  zeros_.release();  // LOAD comes once per run
}

std::int64_t PsClient::snapshot(float* params, float* m, float* v) {
  return exchange(kTagSnapshot, {}, {}, 3, {params, m, v}).global_step;
}

void PsClient::done() { exchange(kTagDone, {}, {}, 0, {}); }

}  // namespace dtrain
