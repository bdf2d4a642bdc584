// dtrain/pipeline/runner.hpp — one rank's pipeline stage at work: the micro-batches of a
// mini-batch in the stage's schedule (pipeline/schedule.hpp), the tensors crossing each cut sent
// forward and their gradients backward with non-blocking MPI point-to-point to the neighbour
// stages (device memory staged through host buffers on GPUs: Debian's Open MPI is not
// CUDA-aware), the gradients accumulated in micro-batch order (Model::accumulate_micro) so that a
// pipeline of P stages gives, bit for bit, the parameters of one rank accumulating the same M
// micro-batches (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2021).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/model/model.hpp"
#include "dtrain/pipeline/schedule.hpp"

namespace dtrain {

/// Where time went in the last train_step() of this stage (seconds; timeline spans
/// "pipeline-wait" too): the bubble is the waits for neighbours.
struct PipelineTimes {
  double compute = 0;  ///< forward_micro + backward_micro + accumulation
  double wait = 0;     ///< waiting for a neighbour's activations or gradients, or own sends
};

class PipelineRunner {
 public:
  /// `stage`: this rank's stage Model (built for its LayerRange with
  /// stage_slots(schedule, s, P, micro_batches) slots); `pipe`: the P ranks of this replica's
  /// pipeline, rank s = stage s (duplicated: the runner's messages never meet another's).
  /// Collective over `pipe`. Throws InputError when the stage's slots are too few for the
  /// schedule, LibraryError when an MPI call fails.
  PipelineRunner(Model& stage, MPI_Comm pipe, PipelineSchedule schedule, int micro_batches);
  ~PipelineRunner();
  PipelineRunner(const PipelineRunner&) = delete;
  PipelineRunner& operator=(const PipelineRunner&) = delete;

  /// One training mini-batch of n samples (every stage of the pipeline passes the same n): x
  /// (first stage: device n×C×H×W in the stage's Model::input_form()) and labels (last stage:
  /// device int32, n) as Model::train_step(); min(M, n) micro-batches of n·m/M… samples. Leaves in
  /// stage.grads() the sum of the micro-batches' grad_scale-weighted gradients; the last stage adds
  /// Σ loss, #correct and #top-5 hits to stats[0..2]. `on_final` is called once, with 0, when they
  /// are final. Dropout keys: micro_batch_seed(step_seed, m). Throws TimeoutError naming the stage
  /// and world rank waited for past comm_timeout(), LibraryError when an MPI or device call fails,
  /// and as Model::train_step().
  void train_step(const void* x, const std::int32_t* labels, int n, float grad_scale,
                  std::uint64_t step_seed, float* stats, const GradsFinal& on_final = {});
  /// Inference forward of n samples through the pipeline (micro-batches of at most the stage's
  /// max_batch, one after another); the last stage adds Σ loss, #correct and #top-5 hits to stats.
  /// Throws as train_step().
  void evaluate(const void* x, const std::int32_t* labels, int n, float* stats);

  [[nodiscard]] int stage() const { return stage_; }    ///< this rank's, 0-based
  [[nodiscard]] int stages() const { return stages_; }  ///< P
  /// Where the last train_step() spent its time (compute and waits, seconds).
  [[nodiscard]] const PipelineTimes& last_times() const { return times_; }

 private:
  struct Slot;
  /// Receives the tensors of micro-batch `m` (rows samples) into `slot`: activations from the
  /// stage before (grad false) or gradients from the stage after.
  void receive(int slot, int m, int rows, bool grad);
  /// Starts sending micro-batch `m`'s tensors from `slot` (non-blocking; waited for before the
  /// slot is written again).
  void send(int slot, int m, int rows, bool grad);
  void wait_sends(int slot);
  void wait_all_sends();
  [[nodiscard]] std::string peer_name(int stage) const;

  Model& model_;
  MPI_Comm pipe_ = MPI_COMM_NULL;
  PipelineSchedule schedule_;
  int micro_batches_;
  int stage_ = 0, stages_ = 1;
  std::vector<int> world_rank_of_;  ///< per stage
  std::vector<Slot> slots_;
  PipelineTimes times_;
};

}  // namespace dtrain
