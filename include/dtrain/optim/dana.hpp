// dtrain/optim/dana.hpp — DANA at an async ps (Hakimi, Barkai, Gabel, Schuster 2019, "Taming
// Momentum in a Distributed Asynchronous Environment", DANA-Zero).
//
// Downpour with one momentum vector at the ps lets every stale gradient feed the momentum of all
// workers: asynchrony adds momentum on top of --momentum (Mitliagkas et al. 2016) and the gradients
// were computed at positions the parameters have long left. DANA keeps one momentum vector v_w per
// worker and sends each worker the position the parameters are heading to:
//     push from w:  v_w ← γ·v_w + g (+ weight decay, as the momentum optimizer);  θ ← θ − η·v_w
//     reply to w:   θ̂ = θ − η·γ·Σ_j v_j   (where θ will be once every worker's next update has
//                                          applied its momentum part: a Nesterov look-ahead)
// so w's next gradient is computed close to where it will be applied. γ = --momentum, η the
// schedule's rate at this update (optim/optimizer.hpp). Element-wise, so a ps applies it chunk by
// chunk as a push arrives.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dtrain/core/config.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/optim/optimizer.hpp"

namespace dtrain {

class DanaMomentum {
 public:
  /// A shard of `n` floats served to `workers` workers, on `backend` (host memory: the ps's CPU
  /// backend); `no_decay` as for Optimizer. The momenta start at 0 and the look-ahead at 0: call
  /// load() once the parameters are set. Holds workers + 2 shard-sized vectors.
  /// Throws InputError unless c.optimizer is momentum and workers ≥ 1 (or for a bad no_decay
  /// range, as Optimizer), LibraryError when the momenta cannot be allocated.
  DanaMomentum(const Config& c, Backend& backend, std::size_t n, int workers,
               std::int64_t total_steps, std::vector<FloatRange> no_decay = {});

  /// Applies worker w's gradient for the range (`grads`: its end − begin floats, host; `params`:
  /// the shard's n floats) to params[begin, end) with w's
  /// momentum at 0-based global step `step`, and recomputes look_ahead()[begin, end), in
  /// cache-sized blocks over the OpenMP threads (one pass over memory). Returns whether the
  /// gradient values were finite (Optimizer::apply). Throws InputError unless begin ≤ end ≤ n,
  /// std::out_of_range for w outside [0, workers).
  bool apply(int w, float* params, const float* grads, std::int64_t step, std::size_t begin,
             std::size_t end);

  /// apply(w, params, grads, step, begin, end), after which grads[0, end − begin) holds θ̂ of the
  /// range, look_ahead()[begin, end) (an async ps replies from the buffer the chunk arrived in:
  /// Backend::optimizer_update_into_grad). Throws as apply().
  bool apply_into_grads(int w, float* params, float* grads, std::int64_t step, std::size_t begin,
                        std::size_t end);
  /// θ̂ (n floats) as of the last apply() of each range; what a push's reply carries.
  [[nodiscard]] const float* look_ahead() const { return look_ahead_.data(); }
  /// Σ_j v_j (n floats): the optimizer state a checkpoint keeps as its momentum.
  [[nodiscard]] float* momentum_sum() { return sum_.data(); }
  /// After a LOAD: sets every v_w = sum / W (the checkpoint kept only the sum; its total is kept)
  /// and θ̂ = θ − η(step)·γ·sum for `params` (n floats). `sum` may be momentum_sum() itself
  /// (a ps receives a LOAD's momentum straight into it).
  void load(const float* sum, const float* params, std::int64_t step);

 private:
  /// apply's work; into: nullptr, or grads itself (apply_into_grads).
  bool apply_range(int w, float* params, const float* grads, float* into, std::int64_t step,
                   std::size_t begin, std::size_t end);
  void update_look_ahead(const float* params, std::int64_t step, std::size_t begin,
                         std::size_t end);
  Config c_;
  std::size_t n_;
  std::int64_t total_steps_;
  std::vector<std::unique_ptr<Optimizer>> per_worker_;  ///< each owns v_w as its momentum
  std::vector<float> sum_, look_ahead_;
  std::vector<float> old_;  ///< per OpenMP thread: one block of v_w before its update
};

/// Whether a run of `c` applies DANA at its ps: async (ExchangeKind::ps_async) with the momentum
/// optimizer and --async-momentum dana (its checkpoint's m is the workers' momentum sum).
[[nodiscard]] bool uses_dana(const Config& c);

}  // namespace dtrain
