// dtrain/ps/sharding.cpp — balanced range partition of the flat parameter buffer, over floats or
// (a layer-wise optimizer) over whole tensors.
#include "dtrain/ps/sharding.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "dtrain/core/error.hpp"
#include "dtrain/optim/optimizer.hpp"

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

/// Segments [first, last) of a tensor cut: one ps's tensors.
struct TensorRun {
  std::size_t first = 0, last = 0;
};

/// The parts a greedy fill of whole segments in order makes when none may pass `cap` floats
/// (cap ≥ the largest segment).
std::vector<TensorRun> greedy_runs(const std::vector<std::size_t>& sizes, std::size_t cap) {
  std::vector<TensorRun> runs{{0, 0}};
  std::size_t fill = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (fill + sizes[i] > cap) {
      runs.push_back({i, i});
      fill = 0;
    }
    fill += sizes[i];
    runs.back().last = i + 1;
  }
  return runs;
}

/// Splits the run with the most floats among those of two or more segments at the boundary that
/// makes its larger half smallest (ties: the first): one part more, the largest no larger.
void split_largest(const std::vector<std::size_t>& prefix, std::vector<TensorRun>& runs) {
  auto floats = [&](const TensorRun& r) { return prefix[r.last] - prefix[r.first]; };
  std::size_t pick = runs.size();
  for (std::size_t k = 0; k < runs.size(); ++k)
    if (runs[k].last - runs[k].first >= 2 &&
        (pick == runs.size() || floats(runs[k]) > floats(runs[pick])))
      pick = k;
  const TensorRun r = runs[pick];
  std::size_t cut = r.first + 1, best = SIZE_MAX;
  for (std::size_t j = r.first + 1; j < r.last; ++j) {
    const std::size_t worse = std::max(prefix[j] - prefix[r.first], prefix[r.last] - prefix[j]);
    if (worse < best) best = worse, cut = j;
  }
  runs[pick].last = cut;
  runs.insert(runs.begin() + static_cast<std::ptrdiff_t>(pick) + 1, TensorRun{cut, r.last});
}

}  // namespace

std::vector<ShardRange> tensor_shard_ranges(const std::vector<ParamSegment>& segments, int num_ps) {
  const std::size_t count = segments.size();
  DT_REQUIRE(num_ps >= 1 && static_cast<std::size_t>(num_ps) <= count,
             "option --num-ps: " + std::to_string(num_ps) +
                 " parameter servers but the model has " + std::to_string(count) +
                 " parameter tensors, and a layer-wise optimizer (--optimizer lars | lamb) keeps "
                 "each tensor whole on one ps (need 1 <= --num-ps <= " +
                 std::to_string(count) + ")");
  std::vector<std::size_t> sizes, prefix{0};
  for (const ParamSegment& s : segments) {
    DT_REQUIRE(s.begin == prefix.back() && s.end > s.begin,
               "ps sharding: tensor ranges must be non-empty and contiguous from 0");
    sizes.push_back(s.end - s.begin);
    prefix.push_back(s.end);
  }
  // The smallest cap whose greedy fill needs at most num_ps parts: the optimal largest shard.
  std::size_t lo = *std::max_element(sizes.begin(), sizes.end()), hi = prefix.back();
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (greedy_runs(sizes, mid).size() <= static_cast<std::size_t>(num_ps)) hi = mid;
    else lo = mid + 1;
  }
  std::vector<TensorRun> runs = greedy_runs(sizes, lo);
  while (runs.size() < static_cast<std::size_t>(num_ps)) split_largest(prefix, runs);
  std::vector<ShardRange> out;
  for (const TensorRun& r : runs) out.push_back({prefix[r.first], prefix[r.last]});
  return out;
}

std::vector<ShardRange> ps_shard_ranges(const Config& c, const std::vector<TensorInfo>& tensors,
                                        std::size_t total, int num_ps) {
  if (!is_layerwise(c.optimizer)) return shard_ranges(total, num_ps);
  return tensor_shard_ranges(param_segments(tensors, total), num_ps);
}

namespace {
/// How many ps each stage gets: one each, then every further ps to the stage with the most floats
/// per ps (compared as a·q > b·p for a/p > b/q: exact in integers) among those below their cap
/// (`cap`: a stage's tensors for a layer-wise optimizer; empty: no cap).
std::vector<int> ps_per_stage(const std::vector<std::size_t>& stage_params, int num_ps,
                              const std::vector<std::size_t>& cap) {
  const auto P = static_cast<int>(stage_params.size());
  std::vector<int> count(static_cast<std::size_t>(P), 1);
  auto open = [&](std::size_t s) {
    return cap.empty() || static_cast<std::size_t>(count[s]) < cap[s];
  };
  for (int extra = num_ps - P; extra > 0; --extra) {
    std::size_t best = count.size();
    for (std::size_t s = 0; s < count.size(); ++s)
      if (open(s) &&
          (best == count.size() || stage_params[s] * static_cast<std::size_t>(count[best]) >
                                       stage_params[best] * static_cast<std::size_t>(count[s])))
        best = s;
    if (best == count.size()) break;  // every stage at its cap: stage_tensors() refused this
    ++count[best];
  }
  return count;
}

/// Every stage has ps of its own, and parameters for them.
void check_stages(const std::vector<std::size_t>& stage_params, int num_ps) {
  const auto P = static_cast<int>(stage_params.size());
  DT_REQUIRE(num_ps >= P, "option --num-ps " + std::to_string(num_ps) + " with --pipeline-stages " +
                              std::to_string(P) +
                              ": every stage needs parameter servers of its own "
                              "(need --num-ps >= --pipeline-stages)");
  for (std::size_t s = 0; s < stage_params.size(); ++s)
    DT_REQUIRE(stage_params[s] > 0,
               "option --pipeline-stages: pipeline stage " + std::to_string(s) +
                   " has no parameters, so no parameter server could serve it; move the cut "
                   "(stage= on a layer line) or use --mode sync --num-ps 0");
}

/// Each stage's tensors (of `tensors`, the whole model's param_segments()) shifted to start at
/// the stage's first float. Throws InputError when num_ps exceeds their total (a ps must own at
/// least one tensor), naming --num-ps and the counts, and when a tensor crosses a stage boundary.
std::vector<std::vector<ParamSegment>> stage_tensors(const std::vector<std::size_t>& stage_params,
                                                     int num_ps,
                                                     const std::vector<ParamSegment>& tensors) {
  std::vector<std::vector<ParamSegment>> out(stage_params.size());
  std::string counts;
  std::size_t first = 0, total = 0, t = 0;
  for (std::size_t s = 0; s < stage_params.size(); ++s) {
    const std::size_t last = first + stage_params[s];
    for (; t < tensors.size() && tensors[t].end <= last; ++t) {
      DT_REQUIRE(tensors[t].begin >= first, "ps sharding: a parameter tensor crosses the start "
                                            "of pipeline stage " +
                                                std::to_string(s));
      out[s].push_back({tensors[t].begin - first, tensors[t].end - first, tensors[t].adapt});
    }
    counts += (s ? ", " : "") + std::to_string(out[s].size());
    total += out[s].size();
    first = last;
  }
  DT_REQUIRE(t == tensors.size() && (tensors.empty() || tensors.back().end == first),
             "ps sharding: the parameter tensors do not tile the pipeline stages' parameters");
  DT_REQUIRE(static_cast<std::size_t>(num_ps) <= total,
             "option --num-ps: " + std::to_string(num_ps) +
                 " parameter servers but the pipeline's stages have " + std::to_string(total) +
                 " parameter tensors (" + counts +
                 " by stage), and a layer-wise optimizer (--optimizer lars | lamb) keeps each "
                 "tensor whole on one ps (need --num-ps <= " +
                 std::to_string(total) + ")");
  return out;
}
}  // namespace

std::vector<StageShard> stage_shards(const std::vector<std::size_t>& stage_params, int num_ps,
                                     const std::vector<ParamSegment>& tensors) {
  std::vector<std::vector<ParamSegment>> whole;
  std::vector<std::size_t> cap;
  check_stages(stage_params, num_ps);
  if (!tensors.empty()) {
    whole = stage_tensors(stage_params, num_ps, tensors);
    for (const auto& w : whole) cap.push_back(w.size());
  }
  const std::vector<int> count = ps_per_stage(stage_params, num_ps, cap);
  std::vector<StageShard> out;
  std::size_t first = 0;
  for (std::size_t s = 0; s < count.size(); ++s) {
    DT_REQUIRE(stage_params[s] >= static_cast<std::size_t>(count[s]),
               "option --num-ps " + std::to_string(num_ps) + ": pipeline stage " +
                   std::to_string(s) + " has " + std::to_string(stage_params[s]) +
                   " parameters for its " + std::to_string(count[s]) +
                   " parameter servers (each must own at least one)");
    const std::vector<ShardRange> local = whole.empty() ? shard_ranges(stage_params[s], count[s])
                                                        : tensor_shard_ranges(whole[s], count[s]);
    for (const ShardRange& r : local)
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
