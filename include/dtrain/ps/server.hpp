// dtrain/ps/server.hpp — the parameter-server loop of one ps rank.
//
// The ps owns one contiguous shard of the flat parameter buffer and its optimizer state, and
// serves the workers' PULL / PUSH / LOAD / SNAPSHOT / DONE messages (ps/protocol.hpp) until every
// worker sent DONE. It polls every worker's header and the payload chunks of every request in
// progress together, so several workers' pushes arrive — and, async, are applied — interleaved
// chunk by chunk (a worker may send its chunks while its backward still runs). How a push
// becomes an update depends on exchange_kind(config), one update rule per mode chosen once at
// start (src/ps/update_rule.hpp: AsyncApplier, SyncAggregator, BoundedAggregator):
//   ps_async    every push is applied on arrival, one global step each (Downpour SGD), chunk by
//               chunk as it arrives, each chunk's reply sent at once; the push takes its global
//               step, and its staleness, when its first chunk arrives. A SNAPSHOT taken
//               meanwhile may hold a push in part (as TensorFlow's async checkpoints may). The
//               momentum rule is --async-momentum: dana (default; per-worker momentum, the reply
//               is the look-ahead position, optim/dana.hpp) or one momentum (lr-scaled,
//               compensated, as-given); --delay-compensation λ0 corrects the gradient for its
//               staleness first (DC-ASGD, optim/delay_compensation.hpp); with --stale-lr inverse
//               it is divided by its staleness τ ≥ 1 (Zhang et al. 2016). With --optimizer
//               lars | lamb the push is applied once it has arrived whole (the trust ratios
//               need whole tensors, and a shard holds whole tensors: tensor_shard_ranges), its
//               step taken then, and the reply is the shard's new parameters.
//   ps_sync     a push computed on the parameters of global step t joins step t's aggregate once
//               its whole gradient is in; the first R (--replicas-to-aggregate) make one update
//               (their mean, weighted by samples) and every waiting worker gets the new
//               parameters; a push for a step already applied is dropped (late: backup workers)
//               and answered at once (TensorFlow's SyncReplicasOptimizer, Chen et al. 2016).
//   ps_bounded  worker w's c-th push joins step c's aggregate, applied once all workers' c-th
//               pushes are in; the reply waits until the parameters are at most S
//               (--max-staleness) steps behind w's next push (stale synchronous parallel, Ho et
//               al. 2013). S = 0 is bulk synchronous, identical to ps_sync with R = all workers.
// Aggregates sum in worker order, so an update does not depend on arrival order. After
// --max-steps updates, or once a stop was requested, pushes are answered without being applied.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/sharding.hpp"

namespace dtrain {

/// Bins of PsStats::staleness_histogram: staleness 0 .. kStalenessBins − 2, then "at least
/// kStalenessBins − 1".
inline constexpr int kStalenessBins = 33;

struct PsStats {
  std::int64_t pushes = 0;         ///< gradients used in updates
  std::int64_t updates = 0;        ///< optimizer steps applied (global steps of this run)
  std::int64_t ignored = 0;        ///< pushes after --max-steps or a stop request, not applied
  std::int64_t dropped = 0;        ///< sync through the ps: late gradients, not applied
  std::int64_t staleness_sum = 0;  ///< Σ staleness over used gradients
  std::int64_t staleness_max = 0;
  std::vector<std::int64_t> staleness_histogram;  ///< kStalenessBins counts of used gradients
  std::vector<std::int64_t> worker_pushes;        ///< per worker: gradients used
  std::vector<std::int64_t> worker_dropped;       ///< per worker: late gradients dropped
  double busy_seconds = 0;                        ///< time spent applying updates and replying
  double optimizer_seconds = 0;  ///< of busy_seconds: in the optimizer (the updates themselves)
  double wall_seconds = 0;
  std::int64_t shared_ring_pushes = 0;  ///< async pushes that came through a shared ring (--ps-shm)
};

/// What a ps's optimizer needs of the model's tensors, in the shard's own coordinates (0-based).
struct ShardTensors {
  std::vector<FloatRange> no_decay;  ///< ranges without weight decay (no_decay_ranges())
  /// --optimizer lars | lamb: the shard's whole tensors (param_segments(tensors, n, begin, end)
  /// of a shard from tensor_shard_ranges()); empty for the other optimizers
  std::vector<ParamSegment> segments;
};

/// Serves until every worker sent DONE. `total_steps` sizes the cosine schedule.
/// `stop_flag` (set by the signal handler) is forwarded to workers in every reply (in sync through
/// the ps without backup workers and SSP: once the ps ranks agree on the step it ends at).
/// `tensors`: the shard's ranges without weight decay and (LARS, LAMB) its tensors.
/// `all_ps`: every ps rank of the job (MPI_COMM_NULL: cluster.role_comm(); a pipeline's stage
/// passes the whole job's), which in the sync and SSP modes agree on the step a stop ends the
/// updates at, so that every shard of a checkpoint holds the same step.
/// Throws TimeoutError (a RuntimeFault) when no message arrives for --timeout seconds (with several
/// ps ranks 1.25 × --timeout, and with no worker request in progress or reply held here
/// ps_reply_timeout() + --timeout: longer than a worker waits for another, stuck ps; sync and SSP
/// with several ps ranks, another ps rank's say on a step for 1.5 × comm_timeout()), Error on a
/// malformed message, InputError from the optimizer, DANA or delay-compensation set-up (unknown
/// --optimizer, a no_decay range outside the shard, LARS/LAMB without segments covering the
/// shard, an invalid λ0), LibraryError when an MPI call or an allocation fails.
PsStats run_parameter_server(const Cluster& cluster, const Config& config, const ShardRange& shard,
                             std::int64_t total_steps, const std::atomic<bool>& stop_flag,
                             const ShardTensors& tensors = {}, MPI_Comm all_ps = MPI_COMM_NULL);

}  // namespace dtrain
