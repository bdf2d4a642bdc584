// dtrain/optim/dana.cpp — per-worker momentum and the look-ahead position (header for the maths).
#include "dtrain/optim/dana.hpp"

#include <algorithm>
#include <cstring>

#include "dtrain/core/error.hpp"

namespace dtrain {

DanaMomentum::DanaMomentum(const Config& c, Backend& backend, std::size_t n, int workers,
                           std::int64_t total_steps, std::vector<FloatRange> no_decay)
    : c_(c), n_(n), total_steps_(total_steps), sum_(n, 0.0f), look_ahead_(n, 0.0f), old_(n) {
  DT_REQUIRE(optimizer_kind(c.optimizer) == OptimizerKind::momentum,
             "DANA needs the momentum optimizer, got " + c.optimizer);
  DT_REQUIRE(workers >= 1, "DANA needs at least one worker");
  for (int w = 0; w < workers; ++w)
    per_worker_.push_back(std::make_unique<Optimizer>(c, backend, n, total_steps, no_decay));
}

bool DanaMomentum::apply(int w, float* params, const float* grads, std::int64_t step,
                         std::size_t begin, std::size_t end) {
  Optimizer& opt = *per_worker_.at(static_cast<std::size_t>(w));
  float* v = opt.m();
  std::memcpy(old_.data() + begin, v + begin, (end - begin) * sizeof(float));
  const bool finite = opt.apply(params, grads, step, begin, end);
  for (std::size_t i = begin; i < end; ++i) sum_[i] += v[i] - old_[i];
  update_look_ahead(params, step, begin, end);
  return finite;
}

void DanaMomentum::load(const float* sum, const float* params, std::int64_t step) {
  const float share = 1.0f / static_cast<float>(per_worker_.size());
  for (auto& opt : per_worker_)
    for (std::size_t i = 0; i < n_; ++i) opt->m()[i] = share * sum[i];
  std::memcpy(sum_.data(), sum, n_ * sizeof(float));
  update_look_ahead(params, step, 0, n_);
}

void DanaMomentum::update_look_ahead(const float* params, std::int64_t step, std::size_t begin,
                                     std::size_t end) {
  const float f = learning_rate(c_, step, total_steps_) * c_.momentum;
  for (std::size_t i = begin; i < end; ++i) look_ahead_[i] = params[i] - f * sum_[i];
}

}  // namespace dtrain
