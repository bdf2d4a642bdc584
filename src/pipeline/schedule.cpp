// src/pipeline/schedule.cpp — GPipe and 1F1B orders of one stage (see pipeline/schedule.hpp).
#include "dtrain/pipeline/schedule.hpp"

#include <algorithm>

#include "dtrain/core/error.hpp"

namespace dtrain {

int stage_slots(PipelineSchedule schedule, int stage, int stages, int micro_batches) {
  return schedule == PipelineSchedule::gpipe ? micro_batches
                                             : std::min(stages - stage, micro_batches);
}

std::vector<PipelineOp> stage_schedule(PipelineSchedule schedule, int stage, int stages,
                                       int micro_batches) {
  DT_REQUIRE(stages >= 1 && stage >= 0 && stage < stages,
             "pipeline: stage " + std::to_string(stage) + " of " + std::to_string(stages));
  DT_REQUIRE(micro_batches >= 1,
             "option --micro-batches: must be >= 1, got " + std::to_string(micro_batches));
  const int M = micro_batches;
  const int slots = stage_slots(schedule, stage, stages, M);
  const int warm = schedule == PipelineSchedule::gpipe ? M : std::min(stages - stage - 1, M);
  std::vector<PipelineOp> ops;
  auto fwd = [&](int m) { ops.push_back({true, m, m % slots}); };
  auto bwd = [&](int m) { ops.push_back({false, m, m % slots}); };
  for (int m = 0; m < warm; ++m) fwd(m);
  for (int m = warm; m < M; ++m) {  // steady state: one forward, one backward
    fwd(m);
    bwd(m - warm);
  }
  for (int m = std::max(M - warm, 0); m < M; ++m) bwd(m);
  return ops;
}

std::string describe(const std::vector<PipelineOp>& ops) {
  std::string out;
  for (const PipelineOp& op : ops) {
    if (!out.empty()) out += ' ';
    out += op.forward ? 'F' : 'B';
    out += std::to_string(op.micro);
  }
  return out;
}

}  // namespace dtrain
