// dtrain/model/pipeline_plan.hpp — how a model is cut into pipeline stages (--pipeline-stages P,
// --micro-batches M, --schedule): P contiguous stages of the layer order, balanced by cost or
// given by the job's `stage=` keys, with what each stage receives from earlier stages (every
// tensor live across a cut — a residual or Inception branch crosses with the main path), its
// parameters and the activations it holds at M micro-batches under GPipe (Huang et al. 2019: all
// M in flight before the flush) or 1F1B (Narayanan et al. 2021, PipeDream-Flush: stage s holds at
// most P − s), and the bubble (P − 1)/(M + P − 1) of a synchronous flush.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "dtrain/core/options.hpp"  // PipelineSchedule (--schedule)
#include "dtrain/model/model.hpp"

namespace dtrain {

/// One stage: layers [first, last] (indices in line order).
struct PipelineStage {
  std::size_t first = 0, last = 0;
  std::size_t params = 0;  ///< trainable floats
  /// Forward + backward floating-point operations per sample (3 × Model's forward_flops: the
  /// backward computes two products per forward one, input and weight gradients).
  double flops = 0;
  /// With --pipeline-profile: the stage's layers' measured forward + backward ms at the profile's
  /// batch (0 otherwise).
  double measured_ms = 0;
  /// Tensors this stage reads that earlier stages produce (ids as LayerInfo::inputs; 0 = the
  /// network input, which the first stage reads from the data), and their elements per sample —
  /// what arrives per micro-batch, and the size of the gradients sent back.
  std::vector<int> receives;
  std::size_t receive_elements = 0;
  /// Activations of one sample the stage keeps for its backward: its layers' outputs and what it
  /// receives (an upper bound: the memory plan reuses buffers inside a stage).
  std::size_t stash_elements = 0;
  int in_flight = 0;  ///< micro-batches whose activations it holds at once
};

struct PipelinePlan {
  int stages = 1;
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  bool from_job = false;  ///< cut by the job's stage= keys (else balanced by cost)
  bool by_time = false;   ///< balanced by measured forward + backward ms (else by flops)
  std::vector<PipelineStage> stage;
  double bubble = 0;  ///< (P − 1)/(M + P − 1): the idle fraction of each stage per mini-batch
};

/// Whether any layer carries a job's stage= key (LayerInfo::stage ≥ 0): the job cuts the stages.
bool has_stage_keys(const std::vector<LayerInfo>& layers);

/// Cuts `layers` (Model::layers()) into `stages` contiguous stages: at the job's stage= keys where
/// any layer has one (stage K starts at the layer marked stage=K; K = 1 .. P − 1 each once, in
/// order), else minimising the largest stage's cost (exact dynamic programme over the cut
/// points, ties to the earliest cut) among the cuts that keep every layer reading the network
/// input in the first stage. The cost of a layer is `layer_ms[i]`, its measured forward +
/// backward milliseconds (model/profile.hpp: layer_costs(), from --pipeline-profile), or, when
/// `layer_ms` is empty, its forward flops. Throws InputError for stages < 1, micro_batches < 1,
/// more stages than layers, `layer_ms` of another length than `layers`, measured times together
/// with the job's stage= keys, stage= keys that skip, repeat or reorder a stage, cut another
/// number of stages than `stages` or put a layer reading the network input after the first stage
/// (the message names the layer line), or, without stage= keys, too few layers after the last
/// one reading the network input for the other stages.
PipelinePlan plan_pipeline(const std::vector<LayerInfo>& layers, int stages, int micro_batches,
                           PipelineSchedule schedule, const std::vector<double>& layer_ms = {});

/// The --dry-run table: per stage its layers, parameters, GFLOP per mini-batch, what it receives
/// per micro-batch and the activations it holds (MiB at act_bytes per element), then the bubble.
/// `batch`: samples per mini-batch of one replica (divisible by micro_batches).
std::string describe_pipeline(const PipelinePlan& plan, const std::vector<LayerInfo>& layers,
                              int batch, std::size_t act_bytes);

}  // namespace dtrain
