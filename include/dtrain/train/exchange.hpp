// dtrain/train/exchange.hpp — how a worker turns its local gradient into new parameters: the one
// seam between the training loop and the two training modes.
//   SyncExchange  (--mode sync):  allreduce of the gradient over the workers, then the same
//                                 optimizer step on every worker (bit-identical replicas).
//   AsyncExchange (--mode async): fused push-pull with the parameter servers (Downpour SGD).
#pragma once

#include <cstdint>
#include <memory>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/io/checkpoint.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {

struct ExchangeResult {
  std::int64_t global_step = 0;  ///< after this step
  bool applied = true;           ///< false when the step was skipped (non-finite, --skip-nonfinite)
  bool stop = false;             ///< a rank asked to stop (signal), agreed by all workers
  double staleness = 0;          ///< async: staleness of this push
};

class GradientExchange {
 public:
  virtual ~GradientExchange() = default;
  /// Sets the starting parameters on every worker: from `resume` if given, else the chief's
  /// model.initialize(seed) (sync: broadcast; async: chief loads the ps, workers pull).
  /// Collective over the workers.
  virtual void start(Model& model, const CheckpointState* resume, std::int64_t global_step) = 0;
  /// After model.train_step(): exchanges model.grads() (gradient of this worker's `samples`
  /// samples, pre-scaled) and leaves updated parameters in model.params(). `stop_local` is this
  /// rank's stop request. Throws RuntimeFault on a non-finite gradient unless --skip-nonfinite.
  virtual ExchangeResult step(Model& model, int samples, bool stop_local) = 0;
  /// Makes model.params() the current global parameters (async: pull; sync: no-op) and returns
  /// the current global_step.
  virtual std::int64_t refresh(Model& model) = 0;
  /// Chief only (async) / every worker (sync): fills params, m, v of a checkpoint; returns its
  /// global_step.
  virtual std::int64_t snapshot(Model& model, CheckpointState& s) = 0;
  /// Ends the exchange (async: DONE to every ps).
  virtual void finish() = 0;
  [[nodiscard]] virtual std::int64_t skipped_steps() const = 0;
};

std::unique_ptr<GradientExchange> make_sync_exchange(const Config& c, const Cluster& cluster,
                                                     Model& model, std::int64_t total_steps);
std::unique_ptr<GradientExchange> make_async_exchange(const Config& c, const Cluster& cluster,
                                                      Model& model);

/// Name of the first parameter tensor holding a non-finite value in host buffer `grads`, or "".
std::string first_nonfinite_tensor(const Model& model, const float* grads);

}  // namespace dtrain
