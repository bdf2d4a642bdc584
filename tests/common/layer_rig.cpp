// tests/common/layer_rig.cpp — LayerRig and the finite-difference gradient check (see header).
#include "common/layer_rig.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace dtrain::test {

std::vector<float> uniform_values(std::size_t n, std::uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<float> distinct_values(std::size_t n, std::uint64_t seed, float lo, float step) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = lo + step * static_cast<float>(i);
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

DeviceBuffer<float> to_device(Backend& be, const std::vector<float>& host) {
  DeviceBuffer<float> d(be, host.size());
  if (!host.empty()) be.copy_to_device(d.data(), host.data(), host.size() * sizeof(float));
  return d;
}

std::vector<float> to_host(Backend& be, const float* p, std::size_t n) {
  std::vector<float> v(n);
  if (n != 0) be.copy_to_host(v.data(), p, n * sizeof(float));
  be.synchronize();
  return v;
}

LayerRig::LayerRig(Backend& be, const std::string& line, const Shape& input, int num_classes,
                   std::uint64_t seed)
    : LayerRig(be, line, std::vector<Shape>{input}, num_classes, seed) {}

LayerRig::LayerRig(Backend& be, const std::string& line, const std::vector<Shape>& inputs,
                   int num_classes, std::uint64_t seed)
    : be_(be), layer_(make_layer(parse_layer_spec(line), inputs, num_classes, &be)) {
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    xs_.push_back(to_device(be, uniform_values(inputs[k].count(), seed + 7919 * k, -1.0f, 1.0f)));
    dxs_.emplace_back(be, inputs[k].count());
  }
  y_ = DeviceBuffer<float>(be, layer_->output_shape().count());
  dy_ = DeviceBuffer<float>(be, layer_->output_shape().count());
  std::vector<float*> p, g, s;
  std::uint64_t k = seed * 1000;
  for (const ParamDef& def : layer_->param_defs()) {
    const float lo = def.init == Init::ones ? 0.5f : -1.0f;
    params_.push_back(to_device(be, uniform_values(def.shape.count(), ++k, lo, lo + 1.0f)));
    grads_.emplace_back(be, def.shape.count());
    p.push_back(params_.back().data());
    g.push_back(grads_.back().data());
  }
  for (const ParamDef& def : layer_->state_defs()) {
    const float v = def.init == Init::ones ? 1.0f : 0.0f;
    state_.push_back(to_device(be, std::vector<float>(def.shape.count(), v)));
    s.push_back(state_.back().data());
  }
  layer_->bind(p, g, s);
}

void LayerRig::set_input(std::size_t k, const std::vector<float>& x) {
  EXPECT_EQ(x.size(), xs_.at(k).size());
  be_.copy_to_device(xs_.at(k).data(), x.data(), xs_.at(k).bytes());
}
std::vector<float> LayerRig::input(std::size_t k) const {
  return to_host(be_, xs_.at(k).data(), xs_.at(k).size());
}

void LayerRig::set_param(std::size_t i, const std::vector<float>& v) {
  EXPECT_EQ(v.size(), params_.at(i).size());
  be_.copy_to_device(params_.at(i).data(), v.data(), params_.at(i).bytes());
}
std::vector<float> LayerRig::param(std::size_t i) const {
  return to_host(be_, params_.at(i).data(), params_.at(i).size());
}
std::vector<float> LayerRig::grad(std::size_t i) const {
  return to_host(be_, grads_.at(i).data(), grads_.at(i).size());
}
void LayerRig::set_state(std::size_t i, const std::vector<float>& v) {
  EXPECT_EQ(v.size(), state_.at(i).size());
  be_.copy_to_device(state_.at(i).data(), v.data(), state_.at(i).bytes());
}
std::vector<float> LayerRig::state(std::size_t i) const {
  return to_host(be_, state_.at(i).data(), state_.at(i).size());
}

float* LayerRig::target(std::size_t i) const {
  if (i > npos - xs_.size()) return xs_.at(npos - i).data();
  return params_.at(i).data();
}
void LayerRig::set_element(std::size_t i, std::size_t k, float v) {
  be_.copy_to_device(target(i) + k, &v, sizeof(float));
}
float LayerRig::element(std::size_t i, std::size_t k) const {
  return to_host(be_, target(i) + k, 1)[0];
}

std::vector<float> LayerRig::forward(bool training, std::uint64_t seed) {
  StepContext ctx;
  ctx.training = training;
  ctx.seed = seed;
  std::vector<const void*> x;
  for (const auto& b : xs_) x.push_back(b.data());
  layer_->forward(x, y_.data(), ctx);
  return to_host(be_, y_.data(), y_.size());
}

std::vector<float> LayerRig::backward(const std::vector<float>& dy) {
  EXPECT_EQ(dy.size(), dy_.size());
  be_.copy_to_device(dy_.data(), dy.data(), dy_.bytes());
  std::vector<const void*> x;
  std::vector<void*> dx;
  for (std::size_t k = 0; k < xs_.size(); ++k) {
    x.push_back(xs_[k].data());
    dx.push_back(dxs_[k].data());
  }
  layer_->backward(x, y_.data(), dy_.data(), dx);
  return input_grad(0);
}

std::vector<float> LayerRig::input_grad(std::size_t k) const {
  return to_host(be_, dxs_.at(k).data(), dxs_.at(k).size());
}

bool close_enough(double analytic, double numeric, double atol, double rtol) {
  return std::abs(analytic - numeric) <=
         atol + rtol * std::max(std::abs(analytic), std::abs(numeric));
}

namespace {

double objective(const std::vector<float>& y, const std::vector<float>& r) {
  double l = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) l += static_cast<double>(y[i]) * r[i];
  return l;
}

/// Checks one tensor (i == npos: the input) against `analytic`; returns coordinates checked.
std::size_t check_tensor(LayerRig& rig, std::size_t i, const std::vector<float>& analytic,
                         const std::vector<float>& r, const GradCheckOptions& opt,
                         const std::string& name) {
  std::vector<std::size_t> coords(analytic.size());
  std::iota(coords.begin(), coords.end(), std::size_t{0});
  if (coords.size() > opt.max_coords) {
    std::mt19937_64 rng(1234 + i);
    std::shuffle(coords.begin(), coords.end(), rng);
    coords.resize(opt.max_coords);
  }
  int failures = 0;
  double max_numeric = 0.0;
  for (std::size_t k : coords) {
    const float orig = rig.element(i, k);
    rig.set_element(i, k, static_cast<float>(orig + opt.eps));
    const double lp = objective(rig.forward(opt.training, opt.seed), r);
    rig.set_element(i, k, static_cast<float>(orig - opt.eps));
    const double lm = objective(rig.forward(opt.training, opt.seed), r);
    rig.set_element(i, k, orig);
    const double numeric = (lp - lm) / (2.0 * opt.eps);
    max_numeric = std::max(max_numeric, std::abs(numeric));
    if (!close_enough(analytic[k], numeric, opt.atol, opt.rtol) && ++failures <= 5) {
      ADD_FAILURE() << rig.layer().describe() << ": d" << name << "[" << k << "] analytic "
                    << analytic[k] << " vs numeric " << numeric;
    }
  }
  // A check against an all-zero gradient would prove nothing.
  EXPECT_GT(max_numeric, 1e-2) << rig.layer().describe() << ": d" << name << " is ~0";
  EXPECT_EQ(failures, 0) << rig.layer().describe() << ": d" << name << " mismatches";
  return coords.size();
}

}  // namespace

std::size_t check_layer_gradients(LayerRig& rig, const GradCheckOptions& opt) {
  const std::vector<float> y = rig.forward(opt.training, opt.seed);
  const std::vector<float> r = uniform_values(y.size(), 99, -1.0f, 1.0f);
  const std::vector<float> dx = rig.backward(r);
  std::vector<std::vector<float>> grads;
  for (std::size_t i = 0; i < rig.num_params(); ++i) grads.push_back(rig.grad(i));

  std::size_t checked = check_tensor(rig, LayerRig::npos, dx, r, opt, "x");
  for (std::size_t k = 1; k < rig.num_inputs(); ++k)
    checked += check_tensor(rig, LayerRig::input_id(k), rig.input_grad(k), r, opt,
                            'x' + std::to_string(k));
  const auto defs = rig.layer().param_defs();
  for (std::size_t i = 0; i < rig.num_params(); ++i) {
    checked += check_tensor(rig, i, grads[i], r, opt, defs[i].name);
  }
  return checked;
}

}  // namespace dtrain::test
