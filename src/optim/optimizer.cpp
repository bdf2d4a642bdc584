// dtrain/optim/optimizer.cpp — learning-rate schedule and the optimizer state owner; the update
// arithmetic itself is the backend's optimizer_update kernel.
#include "dtrain/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

/// min(1, t / T) of the cosine and polynomial schedules: T = lr_decay_steps if > 0, else the
/// steps after warm-up (at least 1).
double decay_fraction(const Config& c, std::int64_t t, std::int64_t total_steps) {
  std::int64_t span = c.lr_decay_steps > 0 ? c.lr_decay_steps : total_steps - c.warmup_steps;
  if (span <= 0) span = 1;
  return std::min<double>(1.0, static_cast<double>(t) / static_cast<double>(span));
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool is_bias(const TensorInfo& t) { return ends_with(t.name, ".bias"); }
bool is_bn(const TensorInfo& t) {
  return ends_with(t.name, ".gamma") || ends_with(t.name, ".beta");
}

}  // namespace

float learning_rate(const Config& c, std::int64_t step, std::int64_t total_steps) {
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return c.lr * static_cast<float>(step + 1) / static_cast<float>(c.warmup_steps);
  const std::int64_t t = step - c.warmup_steps;
  if (c.lr_schedule == LrSchedule::step) {
    return c.lr * std::pow(c.lr_gamma, static_cast<float>(t / c.lr_step_size));
  }
  if (c.lr_schedule == LrSchedule::cosine) {
    const double frac = decay_fraction(c, t, total_steps);
    return static_cast<float>(c.lr_min + 0.5 * (c.lr - c.lr_min) * (1.0 + std::cos(M_PI * frac)));
  }
  if (c.lr_schedule == LrSchedule::poly) {
    const double frac = decay_fraction(c, t, total_steps);
    return static_cast<float>(c.lr_min + (c.lr - c.lr_min) * std::pow(1.0 - frac, c.lr_power));
  }
  return c.lr;
}

float ps_momentum(const Config& c, int workers, std::int64_t step, std::int64_t total_steps) {
  if (exchange_kind(c) != ExchangeKind::ps_async || c.async_momentum == AsyncMomentum::as_given ||
      c.async_momentum == AsyncMomentum::dana || workers < 1)
    return c.momentum;
  float implicit = 1.0f - 1.0f / static_cast<float>(workers);
  if (c.async_momentum == AsyncMomentum::lr_scaled)
    implicit *= std::clamp(learning_rate(c, step, total_steps) / c.lr, 0.0f, 1.0f);
  return std::max(0.0f, c.momentum - implicit);
}

std::vector<ParamSegment> param_segments(const std::vector<TensorInfo>& tensors, std::size_t n) {
  DT_REQUIRE(n > 0, "lars/lamb: the model has no parameters");
  std::vector<const TensorInfo*> order;
  for (const TensorInfo& t : tensors)
    if (t.count > 0) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  std::vector<ParamSegment> out;
  std::size_t at = 0;
  for (const TensorInfo* t : order) {
    DT_REQUIRE(t->offset >= at && t->offset + t->count <= n,
               "lars/lamb: parameter tensor " + t->name + " overlaps another or lies outside the " +
                   std::to_string(n) + " parameters");
    if (t->offset > at) out.push_back({at, t->offset, false});
    out.push_back({t->offset, t->offset + t->count, !is_bias(*t) && !is_bn(*t)});
    at = t->offset + t->count;
  }
  if (at < n) out.push_back({at, n, false});
  return out;
}

std::vector<ParamSegment> param_segments(const std::vector<TensorInfo>& tensors, std::size_t n,
                                         std::size_t begin, std::size_t end) {
  DT_REQUIRE(begin < end && end <= n, "lars/lamb: shard [" + std::to_string(begin) + ", " +
                                          std::to_string(end) + ") is empty or outside the " +
                                          std::to_string(n) + " parameters");
  std::vector<ParamSegment> out;
  for (const ParamSegment& s : param_segments(tensors, n)) {
    if (s.end <= begin || s.begin >= end) continue;
    DT_REQUIRE(s.begin >= begin && s.end <= end,
               "lars/lamb: the shard [" + std::to_string(begin) + ", " + std::to_string(end) +
                   ") cuts the tensor at [" + std::to_string(s.begin) + ", " +
                   std::to_string(s.end) + "): its trust ratio needs it whole on one ps");
    out.push_back({s.begin - begin, s.end - begin, s.adapt});
  }
  return out;
}

std::vector<FloatRange> no_decay_ranges(const Config& c, const std::vector<TensorInfo>& tensors,
                                        std::size_t begin, std::size_t end) {
  bool bias = false, bn = false;
  std::stringstream list(c.no_weight_decay_on);
  for (std::string item; std::getline(list, item, ',');) {
    if (item == "bias") bias = true;
    else if (item == "bn") bn = true;
    else if (!item.empty())
      throw InputError("option --no-weight-decay-on: unknown parameter kind '" + item +
                       "' (expected a comma-separated list of bias, bn)");
  }
  std::vector<FloatRange> found;
  for (const TensorInfo& t : tensors) {
    const bool skip = (bias && is_bias(t)) || (bn && is_bn(t));
    const std::size_t b = std::max(t.offset, begin), e = std::min(t.offset + t.count, end);
    if (skip && b < e) found.push_back({b - begin, e - begin});
  }
  std::sort(found.begin(), found.end(),
            [](const FloatRange& a, const FloatRange& b) { return a.begin < b.begin; });
  std::vector<FloatRange> out;
  for (const FloatRange& r : found) {
    if (!out.empty() && out.back().end == r.begin) out.back().end = r.end;
    else out.push_back(r);
  }
  return out;
}

Optimizer::Optimizer(const Config& c, Backend& backend, std::size_t n, std::int64_t total_steps,
                     std::vector<FloatRange> no_decay, std::vector<ParamSegment> segments)
    : config_(c), backend_(backend), n_(n), total_steps_(total_steps), kind_(c.optimizer),
      no_decay_(std::move(no_decay)) {
  for (const FloatRange& r : no_decay_)
    DT_REQUIRE(r.begin < r.end && r.end <= n_, "optimizer: no-decay range outside the parameters");
  if (is_layerwise(kind_)) {
    segments_ = std::move(segments);
    OptimizerUpdate u;
    u.kind = kind_;
    DT_REQUIRE(!segments_.empty() && check_layerwise(u, segments_) == n_,
               "optimizer: " + std::string(to_string(c.optimizer)) +
                   " needs the tensors covering all " + std::to_string(n_) + " parameters");
  }
  if (kind_ != OptimizerKind::sgd) m_ = DeviceBuffer<float>(backend, n);
  if (kind_ == OptimizerKind::adam || kind_ == OptimizerKind::lamb)
    v_ = DeviceBuffer<float>(backend, n);
}

bool Optimizer::apply(float* params, const float* grads, std::int64_t step, float lr_scale) {
  return apply_range(params, grads, nullptr, step, 0, n_, lr_scale);
}

bool Optimizer::apply(float* params, const float* grads, std::int64_t step, std::size_t begin,
                      std::size_t end) {
  return apply_range(params, grads, nullptr, step, begin, end);
}

bool Optimizer::apply_into_grads(float* params, float* grads, std::int64_t step, std::size_t begin,
                                 std::size_t end, float lr_scale) {
  return apply_range(params, grads, grads, step, begin, end, lr_scale);
}

bool Optimizer::apply_range(float* params, const float* grads, float* into, std::int64_t step,
                            std::size_t begin, std::size_t end, float lr_scale) {
  DT_REQUIRE(begin <= end && end <= n_, "optimizer: update range outside the parameters");
  OptimizerUpdate u;
  u.kind = kind_;
  u.lr = learning_rate(config_, step, total_steps_) * lr_scale;
  u.momentum = async_workers_ > 0 ? ps_momentum(config_, async_workers_, step, total_steps_)
                                  : config_.momentum;
  u.nesterov = config_.nesterov;
  u.beta1 = config_.beta1;
  u.beta2 = config_.beta2;
  u.epsilon = config_.adam_epsilon;
  u.weight_decay = config_.weight_decay;
  u.step = step + 1;
  u.lars_eta = config_.lars_eta;
  u.lars_epsilon = config_.lars_epsilon;
  if (is_layerwise(kind_)) {
    DT_REQUIRE(begin == 0 && end == n_ && into == nullptr,
               "optimizer: " + std::string(to_string(config_.optimizer)) +
                   " updates all parameters at once (its trust "
                   "ratios need whole tensors), not a range or a ps chunk");
    return backend_.layerwise_update(u, segments_, params, grads, m_.data(), v_.data());
  }
  // The update is elementwise, so running it per range (of equal decay, or a ps's chunk) changes
  // no value.
  bool finite = true;
  auto update = [&](std::size_t b, std::size_t e, float wd) {
    b = std::max(b, begin);
    e = std::min(e, end);
    if (b >= e) return;
    u.weight_decay = wd;
    float* m = m_.data() ? m_.data() + b : nullptr;
    float* v = v_.data() ? v_.data() + b : nullptr;
    const bool ok =
        into ? backend_.optimizer_update_into_grad(u, params + b, into + (b - begin), m, v, e - b)
             : backend_.optimizer_update(u, params + b, grads + (b - begin), m, v, e - b);
    finite = ok && finite;
  };
  const float wd = config_.weight_decay;
  if (no_decay_.empty() || wd == 0.0f) {
    update(begin, end, wd);
    return finite;
  }
  std::size_t at = 0;
  for (const FloatRange& r : no_decay_) {
    update(at, r.begin, wd);
    update(r.begin, r.end, 0.0f);
    at = r.end;
  }
  update(at, n_, wd);
  return finite;
}

}  // namespace dtrain
