// dtrain/optim/dana.cpp — per-worker momentum and the look-ahead position (header for the maths).
#include "dtrain/optim/dana.hpp"

#include <algorithm>
#include <cstring>

#include <omp.h>

#include "dtrain/core/error.hpp"
#include "dtrain/core/simd.hpp"

namespace dtrain {

DanaMomentum::DanaMomentum(const Config& c, Backend& backend, std::size_t n, int workers,
                           std::int64_t total_steps, std::vector<FloatRange> no_decay)
    : c_(c), n_(n), total_steps_(total_steps), sum_(n, 0.0f), look_ahead_(n, 0.0f) {
  DT_REQUIRE(c.optimizer == OptimizerKind::momentum,
             "DANA needs the momentum optimizer, got " + std::string(to_string(c.optimizer)));
  DT_REQUIRE(workers >= 1, "DANA needs at least one worker");
  // DANA's look-ahead reply θ̂ = θ − η·γ·Σ v_j already is the Nesterov step (one worker: NAG):
  // each worker's own update is plain momentum, whatever --nesterov says, or the look-ahead
  // would be taken twice.
  Config plain = c;
  plain.nesterov = false;
  for (int w = 0; w < workers; ++w)
    per_worker_.push_back(std::make_unique<Optimizer>(plain, backend, n, total_steps, no_decay));
}

namespace {
/// Floats per block of DanaMomentum::apply: the six arrays a block touches (g, θ, v_w, its old
/// values, Σ v, θ̂) take 192 KiB, inside any L2 cache.
constexpr std::size_t kBlock = 8192;
/// Blocks below this many floats stay on one thread (starting a team costs more).
constexpr std::size_t kParallelMin = std::size_t{1} << 16;

/// Σ v += v − old; θ̂ = θ − f·Σ v, over n floats (the same operations, in the same order, as
/// two separate loops); with kInto θ̂ is written to `into` as well.
template <bool kInto>
DT_SIMD_CLONES void fold(float* __restrict sum, float* __restrict look_ahead,
                         float* __restrict into, const float* __restrict v,
                         const float* __restrict old, const float* __restrict params, float f,
                         std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float s = sum[i] + (v[i] - old[i]);
    sum[i] = s;
    const float t = params[i] - f * s;
    look_ahead[i] = t;
    if constexpr (kInto) into[i] = t;
  }
}
}  // namespace

bool DanaMomentum::apply(int w, float* params, const float* grads, std::int64_t step,
                         std::size_t begin, std::size_t end) {
  return apply_range(w, params, grads, nullptr, step, begin, end);
}

bool DanaMomentum::apply_into_grads(int w, float* params, float* grads, std::int64_t step,
                                    std::size_t begin, std::size_t end) {
  return apply_range(w, params, grads, grads, step, begin, end);
}

bool DanaMomentum::apply_range(int w, float* params, const float* grads, float* into,
                               std::int64_t step, std::size_t begin, std::size_t end) {
  DT_REQUIRE(begin <= end && end <= n_, "DANA: update range outside the parameters");
  Optimizer& opt = *per_worker_.at(static_cast<std::size_t>(w));
  const float* v = opt.m();
  const float f = learning_rate(c_, step, total_steps_) * c_.momentum;
  // Block by block: v_w's old values, the update and the fold of one block stay in cache, so the
  // update costs one pass over memory, not four. Blocks are independent (element-wise), so they
  // go to the OpenMP threads (--ps-threads) without changing a value.
  const auto blocks = static_cast<std::ptrdiff_t>((end - begin + kBlock - 1) / kBlock);
  const int threads = end - begin >= kParallelMin ? omp_get_max_threads() : 1;
  old_.resize(static_cast<std::size_t>(threads) * kBlock);
  bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite) num_threads(threads)
  for (std::ptrdiff_t k = 0; k < blocks; ++k) {
    const std::size_t b = begin + static_cast<std::size_t>(k) * kBlock;
    const std::size_t e = std::min(end, b + kBlock);
    float* old = old_.data() + static_cast<std::size_t>(omp_get_thread_num()) * kBlock;
    std::memcpy(old, v + b, (e - b) * sizeof(float));
    finite = opt.apply(params, grads + (b - begin), step, b, e) && finite;
    // The block's gradient has been read: with `into`, θ̂ replaces it there.
    if (into)
      fold<true>(sum_.data() + b, look_ahead_.data() + b, into + (b - begin), v + b, old,
                 params + b, f, e - b);
    else
      fold<false>(sum_.data() + b, look_ahead_.data() + b, nullptr, v + b, old, params + b, f,
                  e - b);
  }
  return finite;
}

void DanaMomentum::load(const float* sum, const float* params, std::int64_t step) {
  const float share = 1.0f / static_cast<float>(per_worker_.size());
  for (auto& opt : per_worker_)
    for (std::size_t i = 0; i < n_; ++i) opt->m()[i] = share * sum[i];
  if (sum != sum_.data()) std::memcpy(sum_.data(), sum, n_ * sizeof(float));
  update_look_ahead(params, step, 0, n_);
}

void DanaMomentum::update_look_ahead(const float* params, std::int64_t step, std::size_t begin,
                                     std::size_t end) {
  const float f = learning_rate(c_, step, total_steps_) * c_.momentum;
  for (std::size_t i = begin; i < end; ++i) look_ahead_[i] = params[i] - f * sum_[i];
}

bool uses_dana(const Config& c) {
  return exchange_kind(c) == ExchangeKind::ps_async && c.optimizer == OptimizerKind::momentum &&
         c.async_momentum == AsyncMomentum::dana;
}

}  // namespace dtrain
