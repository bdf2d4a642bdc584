// dtrain/ps/sharding.cpp — balanced range partition of the flat parameter buffer.
#include "dtrain/ps/sharding.hpp"

#include <sstream>

#include "dtrain/core/error.hpp"

namespace dtrain {

std::vector<ShardRange> shard_ranges(std::size_t total, int num_ps) {
  DT_REQUIRE(num_ps >= 1,
             "option --num-ps: need at least one parameter server, got " + std::to_string(num_ps));
  DT_REQUIRE(static_cast<std::size_t>(num_ps) <= total,
             "option --num-ps: " + std::to_string(num_ps) +
                 " parameter servers but the model has only " + std::to_string(total) +
                 " parameters to split over them (each ps must own at least one)");
  std::vector<ShardRange> out(num_ps);
  const std::size_t base = total / num_ps, extra = total % num_ps;
  std::size_t at = 0;
  for (int k = 0; k < num_ps; ++k) {
    const std::size_t len = base + (static_cast<std::size_t>(k) < extra ? 1 : 0);
    out[k] = {at, at + len};
    at += len;
  }
  return out;
}

namespace {
/// How many ps each stage gets: one each, then every further ps to the stage with the most floats
/// per ps (compared as a·q > b·p for a/p > b/q: exact in integers).
std::vector<int> ps_per_stage(const std::vector<std::size_t>& stage_params, int num_ps) {
  const auto P = static_cast<int>(stage_params.size());
  DT_REQUIRE(num_ps >= P, "option --num-ps " + std::to_string(num_ps) + " with --pipeline-stages " +
                              std::to_string(P) +
                              ": every stage needs parameter servers of its own "
                              "(need --num-ps >= --pipeline-stages)");
  std::vector<int> count(static_cast<std::size_t>(P), 1);
  for (int extra = num_ps - P; extra > 0; --extra) {
    std::size_t best = 0;
    for (std::size_t s = 1; s < count.size(); ++s)
      if (stage_params[s] * static_cast<std::size_t>(count[best]) >
          stage_params[best] * static_cast<std::size_t>(count[s]))
        best = s;
    ++count[best];
  }
  return count;
}
}  // namespace

std::vector<StageShard> stage_shards(const std::vector<std::size_t>& stage_params, int num_ps) {
  const std::vector<int> count = ps_per_stage(stage_params, num_ps);
  std::vector<StageShard> out;
  std::size_t first = 0;
  for (std::size_t s = 0; s < count.size(); ++s) {
    const std::string stage = "pipeline stage " + std::to_string(s);
    DT_REQUIRE(stage_params[s] > 0,
               "option --pipeline-stages: " + stage +
                   " has no parameters, so no parameter server could serve it; move the cut "
                   "(stage= on a layer line) or use --mode sync --num-ps 0");
    DT_REQUIRE(stage_params[s] >= static_cast<std::size_t>(count[s]),
               "option --num-ps " + std::to_string(num_ps) + ": " + stage + " has " +
                   std::to_string(stage_params[s]) + " parameters for its " +
                   std::to_string(count[s]) + " parameter servers (each must own at least one)");
    for (const ShardRange& r : shard_ranges(stage_params[s], count[s]))
      out.push_back({static_cast<int>(s), {first + r.begin, first + r.end}, r});
    first += stage_params[s];
  }
  return out;
}

std::string describe_shards(const std::vector<ShardRange>& shards,
                            const std::vector<TensorInfo>& tensors,
                            const std::vector<int>& stage_of) {
  std::ostringstream os;
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const auto& s = shards[k];
    os << "# ps " << k;
    if (k < stage_of.size()) os << " (stage " << stage_of[k] << ")";
    os << ": floats [" << s.begin << ", " << s.end << ") = " << s.size() * 4 << " bytes:";
    for (const auto& t : tensors) {
      const std::size_t b = std::max(s.begin, t.offset), e = std::min(s.end, t.offset + t.count);
      if (b >= e) continue;
      os << " " << t.name;
      if (e - b != t.count) os << "[" << (b - t.offset) << ":" << (e - t.offset) << "]";
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace dtrain
