// dtrain/ps/server.cpp — the ps event loop: one pre-posted receive per worker, MPI_Testany with
// back-off (comm/mpi_check), optimizer applied on the CPU backend to the shard on each push.
#include "dtrain/ps/server.hpp"

#include <cstring>
#include <vector>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/protocol.hpp"

namespace dtrain {
namespace {

/// Bytes of a message with `floats` floats after the header.
std::size_t message_bytes(std::size_t floats) { return sizeof(MsgHeader) + floats * sizeof(float); }

struct WorkerSlot {
  std::vector<char> in, out;
  MPI_Request recv = MPI_REQUEST_NULL, send = MPI_REQUEST_NULL;
  bool done = false;
};

}  // namespace

PsStats run_parameter_server(const Cluster& cluster, const Config& config, const ShardRange& shard,
                             std::int64_t total_steps, const std::atomic<bool>& stop_flag,
                             const std::vector<FloatRange>& no_decay) {
  const int workers = cluster.num_workers();
  const std::size_t n = shard.size();
  const std::string who = "ps " + std::to_string(cluster.me().index);
  auto backend = make_cpu_backend();
  DeviceBuffer<float> params(*backend, n);
  Optimizer opt(config, *backend, n, total_steps, no_decay);
  PsStats stats;
  std::int64_t global_step = 0, max_steps = config.max_steps;
  const double t0 = now_seconds();

  bool stop_seen = false;  // a worker forwarded a stop request: tell every worker
  std::vector<WorkerSlot> slots(workers);
  auto post_recv = [&](int w) {
    DT_CHECK_MPI(MPI_Irecv(slots[w].in.data(), static_cast<int>(slots[w].in.size()), MPI_BYTE,
                           cluster.worker_rank(w), MPI_ANY_TAG, cluster.world(), &slots[w].recv));
  };
  for (int w = 0; w < workers; ++w) {
    slots[w].in.resize(message_bytes(3 * n));
    slots[w].out.resize(message_bytes(3 * n));
    post_recv(w);
  }
  // Sends header + the given float ranges to worker w (after its previous send completed).
  auto reply = [&](int w, int tag, std::int64_t staleness, std::initializer_list<const float*> parts) {
    WorkerSlot& s = slots[w];
    wait_one(s.send, comm_timeout(), who + " sending to worker " + std::to_string(w));
    MsgHeader h;
    h.global_step = global_step;
    h.staleness = staleness;
    h.flags = (stop_flag.load() || stop_seen) ? kFlagStop : 0;
    const std::size_t at = pack_message(s.out.data(), h, parts, 0, n);
    DT_CHECK_MPI(MPI_Isend(s.out.data(), static_cast<int>(at), MPI_BYTE, cluster.worker_rank(w),
                           tag, cluster.world(), &s.send));
  };

  std::vector<MPI_Request> reqs(workers);
  int remaining = workers;
  while (remaining > 0) {
    for (int w = 0; w < workers; ++w) reqs[w] = slots[w].recv;
    MPI_Status st;
    const int w = wait_any(reqs, config.timeout, who + " waiting for worker messages", &st);
    if (w == MPI_UNDEFINED) break;
    slots[w].recv = MPI_REQUEST_NULL;
    WorkerSlot& s = slots[w];
    MsgHeader h;
    std::memcpy(&h, s.in.data(), sizeof h);
    auto* payload = reinterpret_cast<float*>(s.in.data() + sizeof h);
    const double b0 = now_seconds();
    if (h.flags & kFlagStop) stop_seen = true;
    switch (st.MPI_TAG) {
      case kTagPull:
        reply(w, kTagReply, 0, {params.data()});
        break;
      case kTagPush: {
        std::int64_t staleness = 0;
        if (max_steps == 0 || global_step < max_steps) {
          staleness = global_step - h.seen_step;
          opt.apply(params.data(), payload, global_step);
          ++global_step;
          ++stats.pushes;
          stats.staleness_sum += staleness;
          stats.staleness_max = std::max(stats.staleness_max, staleness);
        } else {
          ++stats.ignored;
        }
        reply(w, kTagReply, staleness, {params.data()});
        break;
      }
      case kTagLoad:
        std::memcpy(params.data(), payload, n * sizeof(float));
        if (opt.m()) std::memcpy(opt.m(), payload + n, n * sizeof(float));
        if (opt.v()) std::memcpy(opt.v(), payload + 2 * n, n * sizeof(float));
        global_step = h.global_step;
        max_steps = h.max_steps;
        reply(w, kTagReply, 0, {params.data()});
        break;
      case kTagSnapshot:
        reply(w, kTagState, 0, {params.data(), opt.m(), opt.v()});
        break;
      case kTagDone:
        s.done = true;
        --remaining;
        break;
      default:
        throw Error(format_error(who + ": unexpected message tag " + std::to_string(st.MPI_TAG) +
                                     " from worker " + std::to_string(w), __FILE__, __LINE__));
    }
    stats.busy_seconds += now_seconds() - b0;
    if (!s.done) post_recv(w);
  }
  for (auto& s : slots) wait_one(s.send, config.timeout, who + " flushing replies");
  stats.wall_seconds = now_seconds() - t0;
  return stats;
}

}  // namespace dtrain
