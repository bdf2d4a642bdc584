// dtrain/ps/server.hpp — the parameter-server loop of one ps rank (async mode).
//
// The ps owns one contiguous shard of the flat parameter buffer and its optimizer state. It applies
// every gradient on arrival (no waiting for other workers), counts global_step (one per push, so
// every ps counts the same pushes), stops applying once global_step reaches --max-steps, and exits
// after DONE from every worker. See ps/protocol.hpp for the messages.
#pragma once

#include <atomic>
#include <cstdint>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/sharding.hpp"

namespace dtrain {

struct PsStats {
  std::int64_t pushes = 0;          ///< gradients applied
  std::int64_t ignored = 0;         ///< pushes after max_steps, not applied
  std::int64_t staleness_sum = 0;   ///< Σ staleness over applied pushes
  std::int64_t staleness_max = 0;
  double busy_seconds = 0;          ///< time spent applying updates and replying
  double wall_seconds = 0;
};

/// Serves until every worker sent DONE. `total_steps` sizes the cosine schedule.
/// `stop_flag` (set by the signal handler) is forwarded to workers in every reply.
/// `no_decay`: ranges of the shard (0-based) without weight decay (no_decay_ranges()).
/// Throws RuntimeFault when no message arrives for --timeout seconds.
PsStats run_parameter_server(const Cluster& cluster, const Config& config, const ShardRange& shard,
                             std::int64_t total_steps, const std::atomic<bool>& stop_flag,
                             const std::vector<FloatRange>& no_decay = {});

}  // namespace dtrain
