// dtrain/pipeline/schedule.hpp — the order in which one pipeline stage runs the forward and
// backward passes of a mini-batch's M micro-batches, and which activation slot each uses.
//   GPipe (Huang et al. 2019): F0 … F(M−1), then B0 … B(M−1) — all M micro-batches' activations
//     are held at once (torch.distributed.pipelining's ScheduleGPipe runs its backwards in the
//     same order; micro-batch order also keeps the gradient sums bit-identical to accumulation).
//   1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s of P runs min(P − s − 1, M) warm-up
//     forwards, then alternates one forward and one backward, then drains the backwards — at
//     most P − s micro-batches in flight, the same bubble (P − 1)/(M + P − 1) as GPipe.
// Both are synchronous: one optimizer step per mini-batch, after every backward.
#pragma once

#include <string>
#include <vector>

#include "dtrain/model/pipeline_plan.hpp"

namespace dtrain {

struct PipelineOp {
  bool forward = true;
  int micro = 0;  ///< micro-batch index in [0, M)
  int slot = 0;   ///< activation slot (Model::forward_micro / backward_micro): micro % slots
};

/// The ops of stage `stage` of `stages` for `micro_batches` micro-batches: every micro-batch's
/// forward once and backward once, its forward first, backwards in micro-batch order. Throws
/// InputError for stages < 1, stage outside [0, stages) or micro_batches < 1.
std::vector<PipelineOp> stage_schedule(PipelineSchedule schedule, int stage, int stages,
                                       int micro_batches);

/// Activation slots stage `stage` needs: the most micro-batches it holds between their forward
/// and backward (GPipe: M; 1F1B: min(P − stage, M)).
int stage_slots(PipelineSchedule schedule, int stage, int stages, int micro_batches);

/// "F0 F1 B0 …": the ops as text (logs and tests).
std::string describe(const std::vector<PipelineOp>& ops);

}  // namespace dtrain
