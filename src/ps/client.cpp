// dtrain/ps/client.cpp — worker side of the ps protocol: receives posted before sends, one
// outstanding request per ps, deadline-aware waits.
#include "dtrain/ps/client.hpp"

#include <cstring>

#include "dtrain/comm/big_message.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/ps/protocol.hpp"

namespace dtrain {

PsClient::PsClient(const Cluster& cluster, std::vector<ShardRange> shards, double timeout_s)
    : cluster_(cluster), shards_(std::move(shards)), timeout_(timeout_s),
      seen_(shards_.size(), 0), send_(shards_.size()), recv_(shards_.size()) {
  // The message buffers grow on first use (exchange): a worker's pushes and pulls need one part
  // per ps, only the chief's LOAD and SNAPSHOT three.
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    // "ps 0 (rank 3), ps 1 (rank 2)": names the peers in a watchdog message.
    peers_ += (k ? ", ps " : "ps ") + std::to_string(k) + " (rank " +
              std::to_string(cluster_.ps_rank(static_cast<int>(k))) + ")";
  }
}

namespace {
const char* tag_name(int tag) {
  switch (tag) {
    case kTagPull: return "pulling parameters";
    case kTagPush: return "pushing gradients";
    case kTagLoad: return "loading parameters";
    case kTagSnapshot: return "gathering a checkpoint snapshot";
    case kTagDone: return "sending DONE";
    default: return "exchanging";
  }
}
}  // namespace

PushResult PsClient::exchange(int tag, MsgHeader header, const std::vector<const float*>& parts,
                              int reply_parts, const std::vector<float*>& out) {
  const int K = static_cast<int>(shards_.size());
  std::vector<MPI_Request> reqs;
  reqs.reserve(2 * K);
  // Message sizes in bytes (std::size_t: a LOAD or SNAPSHOT of a large shard passes 2 GiB;
  // comm/big_message posts those as one derived datatype).
  const auto bytes = [&](int k, std::size_t n_parts) {
    return sizeof(MsgHeader) + n_parts * shards_[k].size() * sizeof(float);
  };
  for (int k = 0; k < K && reply_parts > 0; ++k) {
    const std::size_t capacity = bytes(k, static_cast<std::size_t>(reply_parts));
    if (recv_[k].size() < capacity) recv_[k].resize(capacity);
    reqs.emplace_back();
    irecv_bytes(recv_[k].data(), capacity, cluster_.ps_rank(k), MPI_ANY_TAG, cluster_.world(),
                &reqs.back());
  }
  for (int k = 0; k < K; ++k) {
    const ShardRange& s = shards_[k];
    header.seen_step = seen_[k];
    if (send_[k].size() < bytes(k, parts.size())) send_[k].resize(bytes(k, parts.size()));
    const std::size_t at = pack_message(send_[k].data(), header, parts, s.begin, s.size());
    reqs.emplace_back();
    isend_bytes(send_[k].data(), at, cluster_.ps_rank(k), tag, cluster_.world(), &reqs.back());
  }
  wait_all(reqs, timeout_, "worker " + std::to_string(cluster_.me().index) + " " + tag_name(tag) +
                              " with " + peers_);
  PushResult r;
  for (int k = 0; k < K && reply_parts > 0; ++k) {
    const ShardRange& s = shards_[k];
    MsgHeader h;
    std::memcpy(&h, recv_[k].data(), sizeof h);
    seen_[k] = h.global_step;
    r.global_step = k == 0 ? h.global_step : std::min(r.global_step, h.global_step);
    r.staleness = std::max(r.staleness, h.staleness);
    r.stop_requested = r.stop_requested || (h.flags & kFlagStop);
    r.dropped = r.dropped || (h.flags & kFlagDropped);
    const char* src = recv_[k].data() + sizeof h;
    for (int part = 0; part < reply_parts; ++part) {
      if (out[part])
        std::memcpy(out[part] + s.begin, src + part * s.size() * sizeof(float),
                    s.size() * sizeof(float));
    }
  }
  return r;
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

void PsClient::load(const float* params, const float* m, const float* v, std::int64_t global_step,
                    std::int64_t max_steps) {
  MsgHeader h;  // LOAD carries the resume point in global_step / max_steps
  h.global_step = global_step;
  h.max_steps = max_steps;
  exchange(kTagLoad, h, {params, m, v}, 1, {nullptr});
  // LOAD comes once per run: give back its three-part send buffers (pushes regrow one part).
  for (auto& b : send_) std::vector<char>().swap(b);
}

std::int64_t PsClient::snapshot(float* params, float* m, float* v) {
  return exchange(kTagSnapshot, {}, {}, 3, {params, m, v}).global_step;
}

void PsClient::done() { exchange(kTagDone, {}, {}, 0, {}); }

}  // namespace dtrain
