// comm/network.cpp — link specs: presets and `alpha_us=..,beta_gbps=..[,shared=..]`.
#include "dtrain/comm/network.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

constexpr std::array kPresets = {
    Link{25, 25, false, "25gbe"},
    Link{2, 200, false, "hdr-ib"},
    Link{3, 3600, false, "nvlink"},
    Link{2, 49.6, true, "shm"},
};

[[noreturn]] void bad_spec(const std::string& option, const std::string& spec,
                           const std::string& why) {
  throw InputError(
      "option " + option + " '" + spec + "': " + why + " (expected a preset: " + link_presets() +
      ", or alpha_us=A,beta_gbps=B[,shared=0|1]: latency in µs, " + "bandwidth in Gb/s)");
}

/// A finite number from `text`, or the error naming the key.
double number(const std::string& option, const std::string& spec, const std::string& key,
              const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    bad_spec(option, spec, key + " '" + text + "' is not a number");
  return v;
}

}  // namespace

double Link::seconds(double bytes, int streams) const {
  return alpha_us * 1e-6 + bytes * std::max(streams, 1) / bytes_per_second();
}

std::string link_presets() {
  std::string s;
  for (const Link& l : kPresets) s += (s.empty() ? "" : ", ") + l.name;
  return s;
}

Link parse_link(const std::string& spec, const std::string& option) {
  for (const Link& l : kPresets)
    if (spec == l.name) return l;
  if (spec.find('=') == std::string::npos) bad_spec(option, spec, "unknown preset");
  Link link;
  link.name = spec;
  bool alpha = false, beta = false;
  // getline drops a trailing empty item: a trailing comma is refused here, the others below.
  if (spec.back() == ',') bad_spec(option, spec, "an empty item (a trailing comma)");
  std::set<std::string> keys;
  std::stringstream in(spec);
  for (std::string item; std::getline(in, item, ',');) {
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (!keys.insert(key).second) bad_spec(option, spec, "'" + key + "' given twice");
    if (key == "alpha_us") {
      link.alpha_us = number(option, spec, key, value);
      // Bounded to what a link can be (1000 s of latency at most), so that the plan's and the
      // buckets' arithmetic stays finite.
      if (link.alpha_us < 0 || link.alpha_us > 1e9)
        bad_spec(option, spec, "alpha_us must be from 0 to 1e9 µs");
      alpha = true;
    } else if (key == "beta_gbps") {
      link.beta_gbps = number(option, spec, key, value);
      if (link.beta_gbps < 1e-6 || link.beta_gbps > 1e9)
        bad_spec(option, spec, "beta_gbps must be from 1e-6 to 1e9 Gb/s");
      beta = true;
    } else if (key == "shared" && (value == "0" || value == "1")) {
      link.shared = value == "1";
    } else {
      bad_spec(option, spec, "unknown item '" + item + "'");
    }
  }
  if (!alpha || !beta) bad_spec(option, spec, "alpha_us and beta_gbps are both required");
  return link;
}

}  // namespace dtrain
