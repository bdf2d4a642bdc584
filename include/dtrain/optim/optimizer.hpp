// dtrain/optim/optimizer.hpp — SGD, momentum (optionally Nesterov) and Adam (Kingma & Ba 2015) over
// a flat float range, with coupled weight decay (optionally not on biases and batchnorm parameters,
// --no-weight-decay-on); the layer-wise LARS (You et al. 2017) and LAMB (You et al. 2020) over the
// model's tensors; and a learning-rate schedule: linear warm-up, then constant, step decay, cosine
// decay (Loshchilov & Hutter 2017, without restarts) or polynomial decay.
// The same class runs on sync workers (the whole buffer) and on ps ranks (their shard; for
// LARS/LAMB, whose per-tensor norms need whole tensors, a shard of whole tensors updated at once).
#pragma once

#include <cstdint>
#include <vector>

#include "dtrain/core/config.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {

/// Floats [begin, end) of a flat buffer.
struct FloatRange {
  std::size_t begin = 0, end = 0;
  friend bool operator==(const FloatRange&, const FloatRange&) = default;
};

/// The parameters --no-weight-decay-on excludes from weight decay — `bias`: tensors named
/// "*.bias"; `bn`: batchnorm's "*.gamma" and "*.beta" — clipped to the slice [begin, end) of the
/// flat parameter buffer and shifted to start at 0 (a ps shard; [0, param_count) for the whole
/// model). Sorted, adjacent ranges merged; empty when the option is empty. Throws InputError for an
/// item of --no-weight-decay-on other than bias or bn.
std::vector<FloatRange> no_decay_ranges(const Config& c, const std::vector<TensorInfo>& tensors,
                                        std::size_t begin, std::size_t end);

/// Learning rate for 0-based global step `step` of a run with `total_steps` steps:
/// warm-up lr·(step+1)/warmup_steps for step < warmup_steps, then the schedule of
/// `c.lr_schedule` measured from the end of warm-up, t = step − warmup_steps:
///   step    lr·lr_gamma^⌊t / lr_step_size⌋
///   cosine  lr_min + ½·(lr − lr_min)·(1 + cos(π·min(1, t / T))), T = lr_decay_steps if > 0,
///           else total_steps − warmup_steps (at least 1)
///   poly    lr_min + (lr − lr_min)·(1 − min(1, t / T))^lr_power, T as for cosine (the
///           polynomial decay of You et al.'s LARS and LAMB runs, power 2 by default)
///   constant, or any other name (validate_config() refuses those): lr.
/// Pure function.
float learning_rate(const Config& c, std::int64_t step, std::int64_t total_steps);

/// The momentum coefficient an async ps applies at 0-based global step `step` of `total_steps`
/// with `workers` workers (--async-momentum; Mitliagkas et al. 2016): lr-scaled:
/// max(0, μ − (1 − 1/W)·learning_rate(step)/lr); compensated: max(0, μ − (1 − 1/W)); as-given:
/// μ. Other modes (and W = 1): μ. Pure function.
float ps_momentum(const Config& c, int workers, std::int64_t step, std::int64_t total_steps);

/// Whether `kind` is a layer-wise rule (lars, lamb): one update over whole tensors.
inline bool is_layerwise(OptimizerKind kind) {
  return kind == OptimizerKind::lars || kind == OptimizerKind::lamb;
}

/// The tensors of a model with `n` parameters as LARS/LAMB see them: one ParamSegment per tensor
/// in offset order, adapt = false for biases ("*.bias") and batchnorm parameters ("*.gamma",
/// "*.beta"); a gap between tensors becomes a segment with adapt = false. Throws InputError when
/// tensors overlap or reach past n, or when n is 0.
std::vector<ParamSegment> param_segments(const std::vector<TensorInfo>& tensors, std::size_t n);

/// The segments of param_segments(tensors, n) inside floats [begin, end), shifted to start at 0:
/// the tensors of a ps shard cut at tensor boundaries (ps/sharding.hpp tensor_shard_ranges()).
/// Throws InputError when a tensor crosses begin or end (a shard cut inside a tensor), when the
/// range is empty or not inside [0, n), or as param_segments().
std::vector<ParamSegment> param_segments(const std::vector<TensorInfo>& tensors, std::size_t n,
                                         std::size_t begin, std::size_t end);

/// The optimizer of `n` parameters on one backend: owns the state (m, v) and turns the global step
/// into an OptimizerUpdate (learning_rate(), momentum) run by Backend::optimizer_update.
class Optimizer {
 public:
  /// Allocates zeroed state for `n` parameters on `backend` (momentum, LARS: n floats; Adam,
  /// LAMB: 2n). no_decay: ranges of [0, n) updated without weight decay (from no_decay_ranges();
  /// not used by LARS/LAMB). segments: the tensors (param_segments()), which LARS and LAMB
  /// need and the other rules ignore. Throws InputError for an unknown c.optimizer, a no_decay
  /// range that is empty or not inside [0, n), LARS/LAMB without segments covering [0, n), and
  /// LibraryError when the state cannot be allocated.
  Optimizer(const Config& c, Backend& backend, std::size_t n, std::int64_t total_steps,
            std::vector<FloatRange> no_decay = {}, std::vector<ParamSegment> segments = {});

  /// Applies one update for 0-based global step `step`: params -= f(grads). Both device pointers
  /// of n floats. With no_decay ranges, one backend update per run of equal decay. Returns
  /// whether every grads value was finite (Backend::optimizer_update: read in the update's pass;
  /// the update is applied either way).
  /// `lr_scale` multiplies the step's learning rate (an async ps's --stale-lr inverse: 1/τ).
  bool apply(float* params, const float* grads, std::int64_t step, float lr_scale = 1.0f);
  /// The same update restricted to floats [begin, end) of the n: `params` still points at float
  /// 0, `grads` at the range's end − begin floats (a ps's chunk as it arrives, wherever it was
  /// received). The values there are exactly those apply() gives, so a ps can update a shard
  /// chunk by chunk. Throws InputError unless begin ≤ end ≤ n, and for LARS/LAMB unless the
  /// range is the whole [0, n) (their trust ratios need whole tensors).
  bool apply(float* params, const float* grads, std::int64_t step, std::size_t begin,
             std::size_t end);
  /// apply(params, grads, step, begin, end), after which grads[0, end − begin) holds the
  /// range's updated parameters, params[begin, end) (Backend::optimizer_update_into_grad: an
  /// async ps replies from the buffer the chunk arrived in). Throws InputError unless
  /// begin ≤ end ≤ n, and always for LARS/LAMB.
  bool apply_into_grads(float* params, float* grads, std::int64_t step, std::size_t begin,
                        std::size_t end, float lr_scale = 1.0f);

  /// From now on the momentum coefficient of each step is ps_momentum(config, workers, step,
  /// total_steps) instead of --momentum (an async ps).
  void use_async_momentum(int workers) { async_workers_ = workers; }

  /// Optimizer state for checkpoints: first moment / momentum (n floats or empty) and second
  /// moment (n floats, Adam and LAMB only, or empty). Device pointers.
  [[nodiscard]] float* m() const { return m_.data(); }
  [[nodiscard]] float* v() const { return v_.data(); }
  [[nodiscard]] std::size_t size() const { return n_; }
  [[nodiscard]] OptimizerKind kind() const { return kind_; }
  [[nodiscard]] std::int64_t total_steps() const { return total_steps_; }

 private:
  /// apply's range update; into: nullptr, or grads itself (apply_into_grads).
  bool apply_range(float* params, const float* grads, float* into, std::int64_t step,
                   std::size_t begin, std::size_t end, float lr_scale = 1.0f);
  Config config_;
  Backend& backend_;
  std::size_t n_;
  std::int64_t total_steps_;
  OptimizerKind kind_;
  std::vector<FloatRange> no_decay_;
  std::vector<ParamSegment> segments_;  ///< LARS/LAMB: the tensors
  DeviceBuffer<float> m_, v_;
  int async_workers_ = 0;  ///< > 0: momentum from ps_momentum()
};

}  // namespace dtrain
