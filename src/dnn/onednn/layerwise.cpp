// src/dnn/onednn/layerwise.cpp — the layer-wise optimizers on the CPU (Backend::layerwise_update):
// LARS (You, Gitman, Ginsburg 2017, "Large Batch Training of Convolutional Networks", with the
// momentum arrangement of torchlars and NVIDIA apex's LARC: the trust ratio scales the gradient
// that enters the momentum buffer, the global learning rate multiplies the step) and LAMB (You et
// al. 2020, "Large Batch Optimization for Deep Learning", Algorithm 2 with φ = identity).
// One tensor is one unit of work: its norms are sums in double over its floats in index order
// (the same on every replica and for every thread count), then one elementwise pass updates it.
#include <cmath>

#include "dtrain/core/error.hpp"
#include "onednn_common.hpp"

namespace dtrain::onednn {
namespace {

/// Σ x[i]² over [0, n), in double, in index order.
double sum_squares(const float* x, std::size_t n) {
  double s = 0.0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

/// LARS on one tensor of n floats; returns the OR of nonfinite_bit over g.
std::uint32_t lars_tensor(const OptimizerUpdate& u, bool adapt, float* p, const float* g, float* m,
                          std::size_t n) {
  const float wd = adapt ? u.weight_decay : 0.0f;
  float trust = 1.0f;
  if (adapt) {
    const double wn = std::sqrt(sum_squares(p, n)), gn = std::sqrt(sum_squares(g, n));
    if (wn > 0.0 && gn > 0.0)
      trust = static_cast<float>(u.lars_eta * wn / (gn + u.weight_decay * wn + u.lars_epsilon));
  }
  const float lr = u.lr, mu = u.momentum;
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bad |= nonfinite_bit(g[i]);
    const float gi = trust * (g[i] + wd * p[i]);
    const float vi = mu * m[i] + gi;
    m[i] = vi;
    p[i] -= lr * (u.nesterov ? gi + mu * vi : vi);
  }
  return bad;
}

/// The bias-corrected Adam direction of LAMB with decoupled weight decay, r of the paper.
struct LambDirection {
  float b1, b2, inv_bc1, inv_sqrt_bc2, eps, wd;
  [[nodiscard]] float operator()(float mi, float vi, float pi) const {
    return mi * inv_bc1 / (std::sqrt(vi) * inv_sqrt_bc2 + eps) + wd * pi;
  }
};

/// LAMB on one tensor of n floats: moments and ‖r‖ in one pass, the step in a second (r is
/// recomputed from the new moments, so no scratch buffer); returns the OR of nonfinite_bit over g.
std::uint32_t lamb_tensor(const OptimizerUpdate& u, bool adapt, float* p, const float* g, float* m,
                          float* v, std::size_t n) {
  const LambCorrections bc = lamb_corrections(u);
  const LambDirection r{u.beta1,         u.beta2,   bc.inv_bc1,
                        bc.inv_sqrt_bc2, u.epsilon, adapt ? u.weight_decay : 0.0f};
  std::uint32_t bad = 0;
  double rn2 = 0.0, wn2 = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    bad |= nonfinite_bit(g[i]);
    m[i] = r.b1 * m[i] + (1.0f - r.b1) * g[i];
    v[i] = r.b2 * v[i] + (1.0f - r.b2) * g[i] * g[i];
    const double ri = r(m[i], v[i], p[i]);
    rn2 += ri * ri;
    wn2 += static_cast<double>(p[i]) * p[i];
  }
  // Trust 1 where a norm is zero (a zero-initialised tensor, no gradient), as LARS.
  const bool scale = adapt && wn2 > 0.0 && rn2 > 0.0;
  const float step = u.lr * (scale ? static_cast<float>(std::sqrt(wn2 / rn2)) : 1.0f);
  for (std::size_t i = 0; i < n; ++i) p[i] -= step * r(m[i], v[i], p[i]);
  return bad;
}

}  // namespace

bool layerwise_step(const OptimizerUpdate& u, const std::vector<ParamSegment>& segments, float* p,
                    const float* g, float* m, float* v) {
  (void)check_layerwise(u, segments);
  DT_ASSERT(m != nullptr, "lars and lamb need their state buffer m");
  DT_ASSERT(u.kind != OptimizerKind::lamb || v != nullptr, "lamb needs its state buffer v");
  const auto count = static_cast<std::ptrdiff_t>(segments.size());
  std::uint32_t bad = 0;
#pragma omp parallel for schedule(dynamic) reduction(| : bad) if (count > 1)
  for (std::ptrdiff_t k = 0; k < count; ++k) {
    const ParamSegment& s = segments[static_cast<std::size_t>(k)];
    const std::size_t b = s.begin, n = s.end - s.begin;
    bad |= u.kind == OptimizerKind::lars ? lars_tensor(u, s.adapt, p + b, g + b, m + b, n)
                                         : lamb_tensor(u, s.adapt, p + b, g + b, m + b, v + b, n);
  }
  return bad == 0;
}

}  // namespace dtrain::onednn
