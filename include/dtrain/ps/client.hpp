// dtrain/ps/client.hpp — a worker's side of the ps protocol (ps/protocol.hpp): fused push-pull of
// gradient and parameter shards, initial load, snapshots for checkpoints, and DONE.
//
// All buffers are host memory of `total` floats (the full flat parameter buffer); the client sends
// and receives each ps's range of it. Calls block until every ps answered or --timeout passes
// (RuntimeFault naming the ps). Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/ps/protocol.hpp"
#include "dtrain/ps/sharding.hpp"

namespace dtrain {

struct PushResult {
  std::int64_t global_step = 0;   ///< smallest global_step over the ps after this request
  std::int64_t staleness = 0;     ///< max over ps of (global_step at apply − step last seen)
  bool stop_requested = false;    ///< some rank asked to stop (signal)
  bool dropped = false;           ///< some ps did not apply the push (late or past the last step)
};

class PsClient {
 public:
  PsClient(const Cluster& cluster, std::vector<ShardRange> shards, double timeout_s);

  /// Fetches the parameters into params (total floats) once every ps has applied `wait_step`
  /// global steps (or stopped applying). Returns the smallest global_step over the ps.
  PushResult pull(float* params, std::int64_t wait_step = 0);
  /// Sends grads (total floats, gradient of the mean loss over `samples` samples; 0: no gradient,
  /// its values are ignored) and receives the parameters the ps answers with (ps/server.hpp) into
  /// params. `stop` asks every rank to stop. Returns the smallest global_step over the ps.
  PushResult push_pull(const float* grads, int samples, float* params, bool stop);
  /// Chief only, before training: sets every ps's shard, optimizer state (m, v may be nullptr:
  /// zeros) and global_step; `max_steps` caps the pushes each ps applies.
  void load(const float* params, const float* m, const float* v, std::int64_t global_step,
            std::int64_t max_steps);
  /// Chief only: gathers parameters and optimizer state from every ps (each ps answers with its
  /// shard as of its own current step). Returns the smallest global_step over the ps.
  std::int64_t snapshot(float* params, float* m, float* v);
  /// Tells every ps this worker is finished.
  void done();

 private:
  /// Sends `header` (seen_step filled per ps) + each ps's range of every part (nullptr: zeros)
  /// with `tag`, then receives `reply_parts` ranges per ps into `out` (nullptr: dropped).
  PushResult exchange(int tag, MsgHeader header, const std::vector<const float*>& parts,
                      int reply_parts, const std::vector<float*>& out);
  const Cluster& cluster_;
  std::vector<ShardRange> shards_;
  double timeout_;
  std::string peers_;  ///< "ps 0 (rank 3), ..." for watchdog messages
  std::vector<std::int64_t> seen_;  // per ps: global_step in its last reply
  std::vector<std::vector<char>> send_, recv_;
};

}  // namespace dtrain
