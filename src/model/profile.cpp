// model/profile.cpp — a worker profile to and from JSON (nlohmann::json).
#include "dtrain/model/profile.hpp"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "dtrain/core/error.hpp"
#include "dtrain/core/files.hpp"

namespace dtrain {
namespace {

constexpr const char* kFormat = "dtrain-profile-1";

nlohmann::ordered_json layer_json(const LayerCost& l) {
  return {{"name", l.name},
          {"forward_ms", l.forward_ms},
          {"backward_ms", l.backward_ms},
          {"param_offset", l.param_offset},
          {"param_floats", l.param_floats}};
}

/// At most 1e9 ms (11.6 days) a pass or an update: the sums over layers and stages stay finite.
constexpr double kMaxMs = 1e9;
/// At most 2^16 OpenMP threads a profiled rank: a node's cores price T × its compute.
constexpr int kMaxThreads = 1 << 16;
/// At most 2^40 floats (4 TiB of fp32) a layer: beyond any model, and the sums stay exact.
constexpr std::uint64_t kMaxFloats = std::uint64_t{1} << 40;

/// Layer field `key` of a profile as a count of floats: a JSON integer from 0 to kMaxFloats (a
/// negative one would wrap as std::size_t, a huge one exhaust memory). Throws InputError naming
/// `where`, the layer and the field.
std::size_t float_count(const nlohmann::json& layer, const char* key, const std::string& where) {
  const nlohmann::json& v = layer.at(key);
  DT_REQUIRE(v.is_number_unsigned() && v.get<std::uint64_t>() <= kMaxFloats,
             where + ": layer '" + layer.value("name", std::string("?")) + "' has " + key + " " +
                 v.dump() + ", expected an integer from 0 to 2^40");
  return static_cast<std::size_t>(v.get<std::uint64_t>());
}

/// Field `key` of a profile as an int from `lo` to `hi` (`fallback` when absent; required
/// without one): a JSON integer, not a fraction nor one an int would wrap or cut short. Throws
/// InputError naming `where` and the field.
int int_field(const nlohmann::json& j, const char* key, int lo, int hi, std::optional<int> fallback,
              const std::string& where) {
  if (fallback && !j.contains(key)) return *fallback;
  const nlohmann::json& v = j.at(key);
  // An unsigned one above 2^63 reads as negative, below lo ≥ 0.
  DT_REQUIRE(v.is_number_integer() && v.get<std::int64_t>() >= lo && v.get<std::int64_t>() <= hi,
             where + ": " + key + " is " + v.dump() + ", expected an integer from " +
                 std::to_string(lo) + " to " + std::to_string(hi));
  return static_cast<int>(v.get<std::int64_t>());
}

/// The layers' times are ≥ 0, not all 0, and their parameter ranges tile the buffer in line order.
void check_layers(const WorkerProfile& p, const std::string& where) {
  DT_REQUIRE(!p.layers.empty(), where + ": no layers");
  std::size_t next = 0;
  for (const LayerCost& l : p.layers) {
    DT_REQUIRE(std::isfinite(l.forward_ms) && std::isfinite(l.backward_ms) && l.forward_ms >= 0 &&
                   l.backward_ms >= 0 && l.forward_ms <= kMaxMs && l.backward_ms <= kMaxMs,
               where + ": layer '" + l.name +
                   "' has a negative, non-finite or implausible time (expected 0 to 1e9 ms)");
    DT_REQUIRE(l.param_floats == 0 || l.param_offset == next,
               where + ": layer '" + l.name + "' starts its parameters at float " +
                   std::to_string(l.param_offset) + ", expected " + std::to_string(next) +
                   " (parameter ranges tile the gradient buffer in line order)");
    next += l.param_floats;
  }
  DT_REQUIRE(p.forward_ms() + p.backward_ms() > 0,
             where + ": every layer's forward_ms and backward_ms is 0, expected a step that takes "
                     "time (the plan divides by it)");
}

}  // namespace

double WorkerProfile::forward_ms() const {
  return std::accumulate(layers.begin(), layers.end(), 0.0,
                         [](double s, const LayerCost& l) { return s + l.forward_ms; });
}

double WorkerProfile::backward_ms() const {
  return std::accumulate(layers.begin(), layers.end(), 0.0,
                         [](double s, const LayerCost& l) { return s + l.backward_ms; });
}

std::size_t WorkerProfile::param_floats() const {
  return std::accumulate(layers.begin(), layers.end(), std::size_t{0},
                         [](std::size_t s, const LayerCost& l) { return s + l.param_floats; });
}

void save_profile(const WorkerProfile& p, const std::string& path, const std::string& option) {
  nlohmann::ordered_json j = {
      {"format", kFormat},  {"job", p.job},         {"batch", p.batch},
      {"device", p.device}, {"threads", p.threads}, {"precision", p.precision},
      {"steps", p.steps},   {"step_ms", p.step_ms}, {"optimizer_ms", p.optimizer_ms}};
  j["layers"] = nlohmann::ordered_json::array();
  for (const LayerCost& l : p.layers) j["layers"].push_back(layer_json(l));
  try {
    // "job" is a path, bytes on Linux: one not in UTF-8 reads as U+FFFD.
    create_new_file(path, [&](std::ostream& out) {
      out << j.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n';
    });
  } catch (const LibraryError& e) {  // a full disk stays a system failure (exit 3)
    throw LibraryError("option " + option + " '" + path +
                       "': cannot write the profile: " + e.what());
  }
}

WorkerProfile load_profile(const std::string& path, const std::string& option) {
  const std::string where = "option " + option + " '" + path + "'";
  std::error_code ec;
  DT_REQUIRE(!std::filesystem::is_directory(path, ec),
             where + ": is a directory, expected a profile file (dtrain plan --save-profile)");
  std::ifstream in(path);
  DT_REQUIRE(in.good(), where + ": cannot read the profile (does the file exist?)");
  WorkerProfile p;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    DT_REQUIRE(j.value("format", std::string()) == kFormat,
               where + ": not a dtrain profile (expected \"format\": \"" + kFormat + "\")");
    p.batch = int_field(j, "batch", 1, std::numeric_limits<int>::max(), std::nullopt, where);
    p.job = j.value("job", std::string());
    p.device = j.value("device", std::string("cpu"));
    p.threads = int_field(j, "threads", 1, kMaxThreads, 1, where);
    p.precision = j.value("precision", std::string("fp32"));
    p.steps = int_field(j, "steps", 0, std::numeric_limits<int>::max(), 0, where);
    p.step_ms = j.value("step_ms", 0.0);
    j.at("optimizer_ms").get_to(p.optimizer_ms);
    for (const nlohmann::json& l : j.at("layers"))
      p.layers.push_back({l.at("name").get<std::string>(), l.at("forward_ms").get<double>(),
                          l.at("backward_ms").get<double>(), float_count(l, "param_offset", where),
                          float_count(l, "param_floats", where)});
  } catch (const nlohmann::json::exception& e) {
    throw InputError(where + ": " + e.what());
  }
  DT_REQUIRE(std::isfinite(p.optimizer_ms) && p.optimizer_ms >= 0 && p.optimizer_ms <= kMaxMs,
             where + ": optimizer_ms must be from 0 to 1e9 ms");
  check_layers(p, where);
  return p;
}

void require_profile_of(const WorkerProfile& p, const std::vector<std::string>& keys,
                        const std::string& what) {
  DT_REQUIRE(p.layers.size() == keys.size(),
             what + ": a profile of " + std::to_string(p.layers.size()) +
                 " layers, but the job's model has " + std::to_string(keys.size()) +
                 " (profile this job with dtrain plan --save-profile)");
  for (std::size_t i = 0; i < keys.size(); ++i)
    DT_REQUIRE(p.layers[i].name == keys[i], what + ": layer " + std::to_string(i + 1) + " is " +
                                                p.layers[i].name + " in the profile but " +
                                                keys[i] + " in the job");
}

void require_profile_params(const WorkerProfile& p, const std::vector<LayerInfo>& layers,
                            const std::string& what) {
  for (std::size_t i = 0; i < layers.size() && i < p.layers.size(); ++i)
    DT_REQUIRE(p.layers[i].param_floats == layers[i].params,
               what + ": layer " + std::to_string(i + 1) + " (" + p.layers[i].name + ") has " +
                   std::to_string(p.layers[i].param_floats) + " parameters in the profile but " +
                   std::to_string(layers[i].params) +
                   " in the job (profile this job with dtrain plan --save-profile)");
}

std::vector<double> layer_costs(const WorkerProfile& p, const std::vector<LayerInfo>& layers,
                                const std::string& path) {
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < layers.size(); ++i)
    keys.push_back(layer_key(i, layers[i].type, layers[i].name));
  require_profile_of(p, keys, "--pipeline-profile " + path);
  require_profile_params(p, layers, "--pipeline-profile " + path);
  std::vector<double> ms;
  for (const LayerCost& l : p.layers) ms.push_back(l.forward_ms + l.backward_ms);
  return ms;
}

}  // namespace dtrain
