// dtrain/ps/update_rule.hpp (private) — what a ps does with a worker's PUSH: the one seam between
// the ps's event loop (ps/server_core.hpp) and the training modes, and the only ps code that
// knows the mode, as GradientExchange (train/exchange.hpp) is on the worker's side. One class per
// ExchangeKind, chosen once by make_update_rule() (ps/server.hpp has each mode's rule):
//   AsyncApplier       ps_async: each push applied chunk by chunk on arrival (LARS, LAMB: once
//                      whole), one global step (Downpour SGD; DANA, DC-ASGD, --stale-lr
//                      inverse)                                            ps/async_applier.cpp
//   SyncAggregator     ps_sync: the first R pushes computed on step t's parameters make step t's
//                      update, later ones dropped (SyncReplicasOptimizer)   ps/step_aggregator.cpp
//   BoundedAggregator  ps_bounded: worker w's c-th push joins step c, its reply held until the
//                      parameters are at most S steps behind (SSP)        ps/step_aggregator.cpp
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/protocol.hpp"
#include "server_core.hpp"

namespace dtrain {

/// The ps's update rule. Every call comes from the ServerCore's loop, on its thread.
class UpdateRule {
 public:
  virtual ~UpdateRule() = default;
  /// Worker w's PUSH header `h` arrived: starts receiving its payload (ServerCore::start) and
  /// decides, or leaves undecided, what becomes of it. Throws Error for a malformed request.
  virtual void on_push(int w, const MsgHeader& h) = 0;
  /// Chunk c of worker w's push (chunk message `at`, at ServerCore::chunk_dest) has arrived.
  /// Default: nothing (the gradient is used whole, by on_pushed()).
  virtual void on_chunk(int w, std::size_t c, std::size_t at);
  /// Worker w's push has arrived whole: answers it, or holds its reply (ServerCore::hold).
  virtual void on_pushed(int w) = 0;
  /// A LOAD has set the parameters, the optimizer state (state_m(), state_v()) and global_step.
  virtual void on_load() = 0;
  /// The ps stopped applying updates (ServerCore::finished) and released every held reply:
  /// gradients still waiting for an update are let go. Default: nothing.
  virtual void on_finished() {}
  /// The optimizer's first moment or momentum that a LOAD fills and a SNAPSHOT carries (n floats;
  /// nullptr: none).
  [[nodiscard]] virtual float* state_m() = 0;
  /// Adam's second moment, the same way.
  [[nodiscard]] virtual float* state_v() = 0;
  /// The shard's floats [begin, end) went to worker w in a reply, `values` (n floats) as sent.
  /// Default: nothing.
  virtual void on_sent(int w, const float* values, std::size_t begin, std::size_t end);
  /// Whether a stop waits for the ps ranks' verdict on each global step
  /// (ServerCore::agree_on_step): the modes with one update per global step. Default: no (a stop
  /// ends the updates at once).
  [[nodiscard]] virtual bool agrees_on_stop() const { return false; }
  /// The ps ranks' verdict on the step agreed last has arrived (ServerCore::agree_on_step).
  /// Default: nothing.
  virtual void on_agreed() {}
  /// Whether a worker on the ps's node pushes through a ring shared with it (--ps-shm, async).
  [[nodiscard]] virtual bool shares_rings() const { return false; }
};

/// The rule of exchange_kind(core.config()). `total_steps` sizes the cosine schedule; tensors as
/// run_parameter_server(). Throws InputError from the optimizer, DANA or delay-compensation set-up,
/// Error for the allreduce mode (no ps).
std::unique_ptr<UpdateRule> make_update_rule(ServerCore& core, std::int64_t total_steps,
                                             const ShardTensors& tensors);

/// ps_async (ps/async_applier.cpp).
std::unique_ptr<UpdateRule> make_async_applier(ServerCore& core, std::int64_t total_steps,
                                               const ShardTensors& tensors);
/// ps_sync: R = min(--replicas-to-aggregate, workers), all workers when 0 (ps/step_aggregator.cpp).
std::unique_ptr<UpdateRule> make_sync_aggregator(ServerCore& core, std::int64_t total_steps,
                                                 const ShardTensors& tensors);
/// ps_bounded: S = --max-staleness (ps/step_aggregator.cpp).
std::unique_ptr<UpdateRule> make_bounded_aggregator(ServerCore& core, std::int64_t total_steps,
                                                    const ShardTensors& tensors);

}  // namespace dtrain
