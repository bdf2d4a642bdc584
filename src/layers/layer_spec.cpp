// src/layers/layer_spec.cpp — the job-file layer syntax ("type key=value ..."), typed argument
// access with range checks, and make_layer's dispatch on the layer type.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <system_error>

#include "layer_args.hpp"

namespace dtrain {

LayerSpec parse_layer_spec(const std::string& text) {
  LayerSpec spec;
  spec.text = text;
  auto fail = [&](const std::string& what) {
    throw InputError(format_error("layer '" + text + "': " + what, __FILE__, __LINE__));
  };
  std::istringstream in(text);
  std::string token;
  if (!(in >> token)) fail("empty layer line; expected 'type key=value ...'");
  if (token.find('=') != std::string::npos) {
    fail("expected a layer type first (e.g. 'conv filters=32'), got '" + token + "'");
  }
  spec.type = token;
  while (in >> token) {
    const auto eq = token.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == token.size() ||
        token.find('=', eq + 1) != std::string::npos) {
      fail("expected key=value (no spaces around '='), got '" + token + "'");
    }
    const std::string key = token.substr(0, eq);
    if (!spec.args.emplace(key, token.substr(eq + 1)).second) {
      fail("argument '" + key + "' given twice");
    }
  }
  return spec;
}

namespace layers {

const std::string* LayerArgs::find(const std::string& key) {
  known_.push_back(key);
  const auto it = spec_.args.find(key);
  return it == spec_.args.end() ? nullptr : &it->second;
}

void LayerArgs::fail(const std::string& what) const {
  throw InputError(format_error("layer '" + spec_.text + "': " + what, __FILE__, __LINE__));
}

namespace {
std::string range_text(double lo, double hi, bool hi_open) {
  std::ostringstream os;
  os << "[" << lo << ", ";
  if (hi >= 2147483647.0) {
    os << "inf)";
  } else {
    os << hi << (hi_open ? ")" : "]");
  }
  return os.str();
}
}  // namespace

int LayerArgs::require_int(const std::string& key, int lo, int hi) {
  const std::string* v = find(key);
  if (v == nullptr) fail("missing required argument " + key + "=<integer>");
  int value = 0;
  const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), value);
  if (ec != std::errc() || end != v->data() + v->size()) {
    fail("bad value " + key + "='" + *v + "': expected an integer in " + range_text(lo, hi, false));
  }
  if (value < lo || value > hi) {
    fail("bad value " + key + "=" + *v + ": expected an integer in " + range_text(lo, hi, false));
  }
  return value;
}

int LayerArgs::get_int(const std::string& key, int def, int lo, int hi) {
  if (spec_.args.count(key) == 0) {
    known_.push_back(key);
    return def;
  }
  return require_int(key, lo, hi);
}

float LayerArgs::get_float(const std::string& key, float def, float lo, float hi, bool hi_open) {
  const std::string* v = find(key);
  if (v == nullptr) return def;
  float value = 0.0f;
  const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), value);
  const bool parsed = ec == std::errc() && end == v->data() + v->size() && std::isfinite(value);
  const bool in_range = value >= lo && (hi_open ? value < hi : value <= hi);
  if (!parsed || !in_range) {
    fail("bad value " + key + "='" + *v + "': expected a number in " + range_text(lo, hi, hi_open));
  }
  return value;
}

void LayerArgs::finish() const {
  for (const auto& [key, value] : spec_.args) {
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    std::string expected;
    for (const auto& k : known_) expected += (expected.empty() ? "" : ", ") + k;
    fail("unknown argument '" + key + "' for " + spec_.type + " (expected " +
         (expected.empty() ? std::string("no arguments") : "one of: " + expected) + ")");
  }
}

std::string format_float(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void check_bind(const std::string& layer, const std::vector<float*>& params,
                const std::vector<float*>& grads, const std::vector<float*>& state, std::size_t np,
                std::size_t ns) {
  auto all_set = [](const std::vector<float*>& v) {
    return std::find(v.begin(), v.end(), nullptr) == v.end();
  };
  DT_ASSERT(params.size() == np && grads.size() == np && state.size() == ns && all_set(params) &&
                all_set(grads) && all_set(state),
            layer + ": bind() expects " + std::to_string(np) + " params/grads and " +
                std::to_string(ns) + " state tensors, all non-null");
}

}  // namespace layers

std::unique_ptr<Layer> make_layer(const LayerSpec& spec, const Shape& input, int num_classes,
                                  Backend& backend) {
  layers::LayerArgs args(spec);
  const std::string& t = spec.type;
  if (t == "conv") return layers::make_conv_layer(args, input, backend);
  if (t == "maxpool") return layers::make_pool_layer(args, PoolKind::max, input, backend);
  if (t == "avgpool") return layers::make_pool_layer(args, PoolKind::avg, input, backend);
  if (t == "relu") return layers::make_activation_layer(args, ActKind::relu, input, backend);
  if (t == "sigmoid") return layers::make_activation_layer(args, ActKind::sigmoid, input, backend);
  if (t == "batchnorm") return layers::make_batchnorm_layer(args, input, backend);
  if (t == "dropout") return layers::make_dropout_layer(args, input, backend);
  if (t == "flatten") return layers::make_flatten_layer(args, input, backend);
  if (t == "dense") return layers::make_dense_layer(args, input, num_classes, backend);
  args.fail("unknown layer type '" + t +
            "' (expected one of: conv, maxpool, avgpool, relu, sigmoid, batchnorm, dropout, "
            "flatten, dense)");
}

}  // namespace dtrain
