// dtrain/ps/client.hpp — a worker's side of the ps protocol (ps/protocol.hpp): fused push-pull of
// gradient and parameter shards, initial load, snapshots for checkpoints, and DONE.
//
// All buffers are host memory of `total` floats (the full flat parameter buffer); the client sends
// each ps's range of it and receives into it in place, in chunks (ps/protocol.hpp). Calls block
// until every ps answered or --timeout passes (RuntimeFault naming the ps). Not thread-safe.
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
  /// `chunk_bytes`: the payload chunk of the protocol (--ps-chunk-kb · 1024; the ps must use the
  /// same). Throws Error when it holds no float.
  PsClient(const Cluster& cluster, std::vector<ShardRange> shards, double timeout_s,
           std::size_t chunk_bytes = kDefaultChunkBytes);

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
  /// with `tag`, then (unless tag is DONE) receives each ps's reply header and `reply_parts`
  /// ranges per ps straight into `out` (protocol.hpp).
  PushResult exchange(int tag, MsgHeader header, const std::vector<const float*>& parts,
                      int reply_parts, const std::vector<float*>& out);
  /// A chunk of `floats` zeros to send for a nullptr part.
  const float* zeros(std::size_t floats);
  const Cluster& cluster_;
  std::vector<ShardRange> shards_;
  double timeout_;
  std::string peers_;  ///< "ps 0 (rank 3), ..." for watchdog messages
  std::size_t chunk_bytes_;
  std::vector<std::int64_t> seen_;  // per ps: global_step in its last reply
  std::vector<MsgHeader> headers_in_, headers_out_;  // per ps, for the request in flight
  std::vector<MPI_Request> reqs_;
  ZeroChunk zeros_;
};

}  // namespace dtrain
