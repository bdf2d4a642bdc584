// dtrain/optim/optimizer.cpp — learning-rate schedule and the optimizer state owner; the update
// arithmetic itself is the backend's optimizer_update kernel.
#include "dtrain/optim/optimizer.hpp"

#include <cmath>

#include "dtrain/core/error.hpp"

namespace dtrain {

float learning_rate(const Config& c, std::int64_t step, std::int64_t total_steps) {
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return c.lr * static_cast<float>(step + 1) / static_cast<float>(c.warmup_steps);
  const std::int64_t t = step - c.warmup_steps;
  if (c.lr_schedule == "step") {
    return c.lr * std::pow(c.lr_gamma, static_cast<float>(t / c.lr_step_size));
  }
  if (c.lr_schedule == "cosine") {
    std::int64_t span = c.lr_decay_steps > 0 ? c.lr_decay_steps : total_steps - c.warmup_steps;
    if (span <= 0) span = 1;
    const double frac = std::min<double>(1.0, static_cast<double>(t) / static_cast<double>(span));
    return static_cast<float>(c.lr_min + 0.5 * (c.lr - c.lr_min) * (1.0 + std::cos(M_PI * frac)));
  }
  return c.lr;
}

OptimizerKind optimizer_kind(const std::string& name) {
  if (name == "sgd") return OptimizerKind::sgd;
  if (name == "momentum") return OptimizerKind::momentum;
  if (name == "adam") return OptimizerKind::adam;
  throw InputError("option --optimizer: unknown optimizer '" + name +
                   "' (expected sgd | momentum | adam)");
}

Optimizer::Optimizer(const Config& c, Backend& backend, std::size_t n, std::int64_t total_steps)
    : config_(c), backend_(backend), n_(n), total_steps_(total_steps),
      kind_(optimizer_kind(c.optimizer)) {
  if (kind_ != OptimizerKind::sgd) m_ = DeviceBuffer<float>(backend, n);
  if (kind_ == OptimizerKind::adam) v_ = DeviceBuffer<float>(backend, n);
}

void Optimizer::apply(float* params, const float* grads, std::int64_t step) {
  OptimizerUpdate u;
  u.kind = kind_;
  u.lr = learning_rate(config_, step, total_steps_);
  u.momentum = config_.momentum;
  u.nesterov = config_.nesterov;
  u.beta1 = config_.beta1;
  u.beta2 = config_.beta2;
  u.epsilon = config_.adam_epsilon;
  u.weight_decay = config_.weight_decay;
  u.step = step + 1;
  backend_.optimizer_update(u, params, grads, m_.data(), v_.data(), n_);
}

}  // namespace dtrain
