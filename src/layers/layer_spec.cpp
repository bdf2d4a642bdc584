// src/layers/layer_spec.cpp — the job-file layer syntax ("type key=value ..."), typed argument
// access with range checks, and make_layer's dispatch on the layer type.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <sstream>
#include <system_error>

#include "layer_args.hpp"

namespace dtrain {

namespace {
bool valid_name(const std::string& s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.';
  });
}
}  // namespace

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
    const std::string value = token.substr(eq + 1);
    if (spec.args.count(key) || (key == "name" && !spec.name.empty()) ||
        (key == "input" && !spec.inputs.empty()) || (key == "stage" && spec.stage >= 0)) {
      fail("argument '" + key + "' given twice");
    }
    if (key == "name") {
      if (!valid_name(value))
        fail("bad name '" + value + "': use letters, digits, '_', '-' and '.'");
      if (value == kInputName) fail("name '" + value + "' is reserved for the network input");
      spec.name = value;
    } else if (key == "input") {
      std::size_t start = 0;
      for (;;) {
        const auto comma = value.find(',', start);
        const std::string one = value.substr(start, comma - start);
        if (one.empty() || !valid_name(one))
          fail("bad input list '" + value +
               "': expected NAME or NAME,NAME,... of earlier layers "
               "(or '" +
               std::string(kInputName) + "')");
        spec.inputs.push_back(one);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (key == "stage") {
      int k = -1;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), k);
      if (ec != std::errc() || end != value.data() + value.size() || k < 0 || k > 4096)
        fail("bad stage '" + value + "': expected a pipeline stage number 0..4096");
      spec.stage = k;
    } else {
      spec.args.emplace(key, value);
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

Hw LayerArgs::get_hw(const std::string& key, Hw def, int lo, int hi) {
  const std::string* v = find(key);
  if (v == nullptr) return def;
  auto parse = [&](const std::string& part, int& out) {
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), out);
    return ec == std::errc() && end == part.data() + part.size() && !part.empty() && out >= lo &&
           out <= hi;
  };
  const auto x = v->find('x');
  Hw out;
  const bool ok = x == std::string::npos
                      ? parse(*v, out.h) && (out.w = out.h, true)
                      : parse(v->substr(0, x), out.h) && parse(v->substr(x + 1), out.w);
  if (!ok)
    fail("bad value " + key + "='" + *v + "': expected an integer in " + range_text(lo, hi, false) +
         " or HxW (height x width, e.g. 1x7)");
  return out;
}

bool LayerArgs::get_bool(const std::string& key, bool def) {
  const std::string* v = find(key);
  if (v == nullptr) return def;
  if (*v == "true" || *v == "1") return true;
  if (*v == "false" || *v == "0") return false;
  fail("bad value " + key + "='" + *v + "': expected true or false");
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

std::string Layer::describe() const {
  std::string s = type();
  const auto args = arguments();
  for (std::size_t i = 0; i < args.size(); ++i)
    s += (i ? "," : "(") + args[i].first + "=" + args[i].second;
  return args.empty() ? s : s + ")";
}

std::unique_ptr<Layer> make_layer(const LayerSpec& spec, const std::vector<Shape>& inputs,
                                  int num_classes, Backend* backend) {
  layers::LayerArgs args(spec);
  const std::string& t = spec.type;
  const bool merge = t == "add" || t == "concat";
  if (merge && inputs.size() < 2)
    args.fail(t + " needs two or more inputs (input=a,b,...), got " +
              std::to_string(inputs.size()));
  if (!merge && inputs.size() != 1)
    args.fail(t + " takes one input, got " + std::to_string(inputs.size()) +
              " (only add and concat take several)");
  if (t == "add") return layers::make_add_layer(args, inputs, backend);
  if (t == "concat") return layers::make_concat_layer(args, inputs, backend);
  const Shape& in = inputs[0];
  if (t == "conv") return layers::make_conv_layer(args, in, backend);
  if (t == "maxpool") return layers::make_pool_layer(args, PoolKind::max, in, backend);
  if (t == "avgpool") return layers::make_pool_layer(args, PoolKind::avg, in, backend);
  if (t == "globalavgpool") return layers::make_global_avgpool_layer(args, in, backend);
  if (t == "relu") return layers::make_activation_layer(args, ActKind::relu, in, backend);
  if (t == "sigmoid") return layers::make_activation_layer(args, ActKind::sigmoid, in, backend);
  if (t == "batchnorm") return layers::make_batchnorm_layer(args, in, backend);
  if (t == "dropout") return layers::make_dropout_layer(args, in, backend);
  if (t == "flatten") return layers::make_flatten_layer(args, in, backend);
  if (t == "dense") return layers::make_dense_layer(args, in, num_classes, backend);
  if (t == "zeropad") return layers::make_zeropad_layer(args, in, backend);
  args.fail("unknown layer type '" + t +
            "' (expected one of: conv, maxpool, avgpool, globalavgpool, relu, sigmoid, batchnorm, "
            "dropout, flatten, dense, add, concat, zeropad)");
}

}  // namespace dtrain
