// dtrain/optim/optimizer.hpp — SGD, momentum (optionally Nesterov) and Adam (Kingma & Ba 2015) over
// a flat float range, with coupled weight decay and a learning-rate schedule: linear warm-up, then
// constant, step decay or cosine decay (Loshchilov & Hutter 2017, without restarts).
// The same class runs on sync workers (the whole buffer) and on ps ranks (their shard).
#pragma once

#include <cstdint>

#include "dtrain/core/config.hpp"
#include "dtrain/dnn/backend.hpp"

namespace dtrain {

/// Learning rate for 0-based global step `step` of a run with `total_steps` steps:
/// warm-up lr·(step+1)/warmup_steps for step < warmup_steps, then the schedule of
/// `c.lr_schedule` measured from the end of warm-up. Pure function.
float learning_rate(const Config& c, std::int64_t step, std::int64_t total_steps);

/// OptimizerKind from "sgd" | "momentum" | "adam". Throws InputError otherwise.
OptimizerKind optimizer_kind(const std::string& name);

class Optimizer {
 public:
  /// Allocates zeroed state for `n` parameters on `backend` (momentum: n floats; Adam: 2n).
  Optimizer(const Config& c, Backend& backend, std::size_t n, std::int64_t total_steps);

  /// Applies one update for 0-based global step `step`: params -= f(grads). Both device pointers
  /// of n floats.
  void apply(float* params, const float* grads, std::int64_t step);

  /// Optimizer state for checkpoints: first moment / momentum (n floats or empty) and second
  /// moment (n floats, Adam only, or empty). Device pointers.
  [[nodiscard]] float* m() const { return m_.data(); }
  [[nodiscard]] float* v() const { return v_.data(); }
  [[nodiscard]] std::size_t size() const { return n_; }
  [[nodiscard]] OptimizerKind kind() const { return kind_; }
  [[nodiscard]] std::int64_t total_steps() const { return total_steps_; }

 private:
  Config config_;
  Backend& backend_;
  std::size_t n_;
  std::int64_t total_steps_;
  OptimizerKind kind_;
  DeviceBuffer<float> m_, v_;
};

}  // namespace dtrain
