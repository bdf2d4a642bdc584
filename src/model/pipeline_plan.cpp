// src/model/pipeline_plan.cpp — the pipeline stage planner (see dtrain/model/pipeline_plan.hpp).
#include "dtrain/model/pipeline_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

std::string layer_text(const std::vector<LayerInfo>& layers, std::size_t i) {
  const LayerInfo& l = layers[i];
  return "layer #" + std::to_string(i + 1) + " (" + l.type + (l.name.empty() ? "" : " " + l.name) +
         ")";
}

/// First layer of each stage, from the stage= keys.
std::vector<std::size_t> cuts_from_job(const std::vector<LayerInfo>& layers, int stages) {
  std::vector<std::size_t> first{0};
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const int k = layers[i].stage;
    if (k < 0 || (i == 0 && k == 0)) continue;
    DT_REQUIRE(i > 0, layer_text(layers, i) + " has stage=" + std::to_string(k) +
                          " but the first layer starts stage 0 (stage 0 would be empty)");
    const auto expected = static_cast<int>(first.size());
    DT_REQUIRE(k == expected,
               layer_text(layers, i) + " has stage=" + std::to_string(k) + " but the stage that " +
                   "starts next is " + std::to_string(expected) +
                   (k > expected ? " (stage " + std::to_string(expected) + " would be empty)"
                                 : " (each stage starts once, in order; stage 0 at the first "
                                   "layer)"));
    first.push_back(i);
  }
  DT_REQUIRE(static_cast<int>(first.size()) == stages,
             "the job's stage= keys cut " + std::to_string(first.size()) +
                 " pipeline stages but --pipeline-stages is " + std::to_string(stages));
  return first;
}

/// The earliest layer a stage after the first may start at: past the last layer that reads the
/// network input (only the first stage reads the data; receive_across()).
std::size_t first_cut_allowed(const std::vector<LayerInfo>& layers) {
  std::size_t after = 1;
  for (std::size_t i = 0; i < layers.size(); ++i)
    if (std::find(layers[i].inputs.begin(), layers[i].inputs.end(), 0) != layers[i].inputs.end())
      after = std::max(after, i + 1);
  return after;
}

/// First layer of each stage minimising the most expensive stage, `cost[i]` the cost of layer i,
/// every stage after the first starting at layer `min_cut` or later (exact: best[k][i] is the
/// least bottleneck of layers [0, i) in k stages). Throws InputError where no such cut leaves
/// every stage a layer.
std::vector<std::size_t> balanced_cuts(const std::vector<LayerInfo>& layers,
                                       const std::vector<double>& cost, int stages,
                                       std::size_t min_cut) {
  const std::size_t L = cost.size(), P = static_cast<std::size_t>(stages);
  DT_REQUIRE(P == 1 || min_cut + (P - 1) <= L,
             "option --pipeline-stages " + std::to_string(stages) + ": " +
                 layer_text(layers, min_cut - 1) +
                 " reads the network input, which only the first stage reads, and the " +
                 std::to_string(L - min_cut) + " layers after it cannot make the other " +
                 std::to_string(P - 1) + " stages (fewer stages, or a model that reads data " +
                 "earlier)");
  std::vector<double> prefix(L + 1, 0.0);
  for (std::size_t i = 0; i < L; ++i) prefix[i + 1] = prefix[i] + cost[i];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(P + 1, std::vector<double>(L + 1, kInf));
  std::vector<std::vector<std::size_t>> from(P + 1, std::vector<std::size_t>(L + 1, 0));
  best[0][0] = 0.0;
  for (std::size_t k = 1; k <= P; ++k)
    for (std::size_t i = k; i <= L; ++i)
      for (std::size_t j = k == 1 ? 0 : std::max(k - 1, min_cut); j < i; ++j) {
        const double cost = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (cost < best[k][i]) {
          best[k][i] = cost;
          from[k][i] = j;
        }
      }
  std::vector<std::size_t> first(P);
  std::size_t end = L;
  for (std::size_t k = P; k >= 1; --k) {
    first[k - 1] = from[k][end];
    end = from[k][end];
  }
  return first;
}

/// What crosses into stage `st`: every tensor made before its first layer and read there or
/// later (a residual shortcut passes through a stage that does not read it), as
/// Model::received_tensors(). Only the first stage may read the network input (InputError).
void receive_across(const std::vector<LayerInfo>& layers, PipelineStage& st, bool first_stage) {
  std::vector<bool> crosses(layers.size() + 1, false);
  for (std::size_t i = st.first; i < layers.size(); ++i)
    for (int t : layers[i].inputs) {
      DT_REQUIRE(t != 0 || first_stage || i < st.first,
                 layer_text(layers, i) +
                     " reads the network input but runs after the first "
                     "pipeline stage; only the first stage reads data (move the cut after it)");
      if (t > 0 && static_cast<std::size_t>(t - 1) < st.first)
        crosses[static_cast<std::size_t>(t)] = true;
    }
  if (first_stage) st.receives.push_back(0);  // the data
  for (std::size_t t = 1; t < crosses.size(); ++t) {
    if (!crosses[t]) continue;
    st.receives.push_back(static_cast<int>(t));
    st.receive_elements += layers[t - 1].output.count();
  }
}

}  // namespace

bool has_stage_keys(const std::vector<LayerInfo>& layers) {
  return std::any_of(layers.begin(), layers.end(), [](const LayerInfo& l) { return l.stage >= 0; });
}

PipelinePlan plan_pipeline(const std::vector<LayerInfo>& layers, int stages, int micro_batches,
                           PipelineSchedule schedule, const std::vector<double>& layer_ms) {
  DT_REQUIRE(stages >= 1, "option --pipeline-stages: must be >= 1, got " + std::to_string(stages));
  DT_REQUIRE(micro_batches >= 1,
             "option --micro-batches: must be >= 1, got " + std::to_string(micro_batches));
  DT_REQUIRE(static_cast<std::size_t>(stages) <= layers.size(),
             "option --pipeline-stages " + std::to_string(stages) + ": the model has only " +
                 std::to_string(layers.size()) + " layers, and every stage needs one");
  PipelinePlan plan;
  plan.stages = stages;
  plan.micro_batches = micro_batches;
  plan.schedule = schedule;
  plan.from_job = has_stage_keys(layers);
  plan.by_time = !layer_ms.empty();
  DT_REQUIRE(!plan.by_time || layer_ms.size() == layers.size(),
             "option --pipeline-profile: " + std::to_string(layer_ms.size()) +
                 " measured layers for a model of " + std::to_string(layers.size()));
  DT_REQUIRE(!(plan.by_time && plan.from_job),
             "option --pipeline-profile: the job's stage= keys already cut the model; give one or "
             "the other");
  std::vector<double> cost = layer_ms;
  if (!plan.by_time)
    for (const LayerInfo& l : layers) cost.push_back(l.forward_flops);
  const std::vector<std::size_t> first =
      plan.from_job ? cuts_from_job(layers, stages)
                    : balanced_cuts(layers, cost, stages, first_cut_allowed(layers));
  std::vector<int> stage_of(layers.size());
  for (std::size_t s = 0; s < first.size(); ++s) {
    PipelineStage st;
    st.first = first[s];
    st.last = s + 1 < first.size() ? first[s + 1] - 1 : layers.size() - 1;
    st.in_flight = schedule == PipelineSchedule::gpipe
                       ? micro_batches
                       : std::min(micro_batches, stages - static_cast<int>(s));
    for (std::size_t i = st.first; i <= st.last; ++i) {
      stage_of[i] = static_cast<int>(s);
      st.params += layers[i].params;
      st.flops += 3.0 * layers[i].forward_flops;
      if (plan.by_time) st.measured_ms += layer_ms[i];
      st.stash_elements += layers[i].output.count();
    }
    receive_across(layers, st, s == 0);
    st.stash_elements += st.receive_elements;
    plan.stage.push_back(st);
  }
  plan.bubble = static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
  return plan;
}

std::string describe_pipeline(const PipelinePlan& plan, const std::vector<LayerInfo>& layers,
                              int batch, std::size_t act_bytes) {
  const int micro = batch / std::max(plan.micro_batches, 1);
  char line[300];
  std::snprintf(line, sizeof line,
                "# pipeline: %d stages x %d micro-batches of %d samples, %s, cut %s; bubble "
                "(P-1)/(M+P-1) = %.3f\n",
                plan.stages, plan.micro_batches, micro, to_string(plan.schedule),
                plan.from_job  ? "at the job's stage= keys"
                : plan.by_time ? "balanced by measured time"
                               : "balanced by flops",
                plan.bubble);
  std::string out = line;
  out += "#  stage  layers       params    GFLOP/batch  receives (per micro-batch)       "
         "activations held\n";
  for (std::size_t s = 0; s < plan.stage.size(); ++s) {
    const PipelineStage& st = plan.stage[s];
    std::string from;
    for (int t : st.receives) {
      const std::string& name = t == 0 ? "data" : layers[static_cast<std::size_t>(t - 1)].name;
      if (!from.empty()) from += ',';
      from += name.empty() ? '#' + std::to_string(t) : name;
    }
    const double recv_mib =
        static_cast<double>(st.receive_elements) * micro * act_bytes / (1 << 20);
    const double held_mib =
        static_cast<double>(st.stash_elements) * micro * st.in_flight * act_bytes / (1 << 20);
    std::snprintf(line, sizeof line,
                  "#  %5zu  %4zu-%-6zu %9zu  %11.2f  %-20s %7.2f MiB  %7.1f MiB (%d in flight)\n",
                  s, st.first + 1, st.last + 1, st.params, st.flops * batch / 1e9,
                  from.substr(0, 20).c_str(), recv_mib, held_mib, st.in_flight);
    out += line;
  }
  if (plan.by_time) {
    out += "#  measured forward + backward ms per stage (--pipeline-profile):";
    for (const PipelineStage& st : plan.stage) {
      std::snprintf(line, sizeof line, " %.2f", st.measured_ms);
      out += line;
    }
    out += "\n";
  }
  return out;
}

}  // namespace dtrain
