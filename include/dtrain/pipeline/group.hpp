// dtrain/pipeline/group.hpp — a pipelined job's ranks: the W workers as D data-parallel replicas
// × P stages (--pipeline-stages P), the communicators that joins them, and the checkpoint state
// cut into stages and put back together (a checkpoint keeps the whole model's format, so a run
// saved with P stages resumes with any other P, and `dtrain predict` reads it).
//
// Placement: worker w is replica w / P, stage P − 1 − w mod P. The stages of a replica are
// neighbouring world ranks (their point-to-point traffic stays on a node where it can), and worker
// 0 — the chief, which logs, evaluates and writes checkpoints — runs the last stage, where the
// loss and the accuracy are.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/io/checkpoint.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/model/pipeline_plan.hpp"

namespace dtrain {

/// Where worker `worker` of `workers` sits with `stages` stages.
struct PipelinePlace {
  int stage = 0, replica = 0, stages = 1, replicas = 1;
  [[nodiscard]] bool last() const { return stage + 1 == stages; }  ///< the stage with the loss
};

/// Throws InputError naming --pipeline-stages unless `stages` divides `workers`.
PipelinePlace pipeline_place(int worker, int workers, int stages);

/// A pipelined ps job's stage as a cluster of its own (Cluster's part constructor; collective over
/// cluster.world(), every rank calls it): the ps k with stage_of_ps[k] == s and stage s's D
/// replicas (workers, in replica order), s being this rank's stage (a ps: stage_of_ps[its index]).
/// Its chief is the stage's replica 0 (the stage leader); the stage's ps see its D replicas as an
/// ordinary set of workers. Throws as pipeline_place(), LibraryError when an MPI call fails.
std::unique_ptr<Cluster> stage_ps_cluster(const Cluster& cluster, int stages,
                                          const std::vector<int>& stage_of_ps);

/// One worker's pipeline: its place, its stage's layers and slice of the flat buffers, and the
/// communicators.
class PipelineGroup {
 public:
  /// Collective over the workers (cluster.role_comm()). `whole`: the model's layout (the
  /// layout-only Model), `plan`: its cut. Throws InputError as pipeline_place(), LibraryError
  /// when an MPI call fails.
  PipelineGroup(const Cluster& cluster, const Model& whole, const PipelinePlan& plan);
  ~PipelineGroup();
  PipelineGroup(const PipelineGroup&) = delete;
  PipelineGroup& operator=(const PipelineGroup&) = delete;

  [[nodiscard]] const PipelinePlace& place() const { return place_; }  ///< this worker's
  [[nodiscard]] const PipelinePlan& plan() const { return plan_; }
  /// The layer lines of this worker's stage: plan().stage[place().stage]'s first and last.
  [[nodiscard]] LayerRange layers() const;
  /// The stage's parameters: its slice of the whole model's flat buffer, in floats.
  [[nodiscard]] std::size_t param_count() const { return param_end_ - param_begin_; }
  /// This replica's P stages, rank = stage (PipelineRunner's).
  [[nodiscard]] MPI_Comm pipe() const { return pipe_; }
  /// This stage's D replicas as a cluster of D workers, no ps (the gradient exchange's; its
  /// chief, replica 0, is the stage's leader).
  [[nodiscard]] const Cluster& stage_cluster() const { return *stage_cluster_; }
  [[nodiscard]] const Model& whole() const { return whole_; }

  /// The stage's part of a whole-model checkpoint state: its parameters and optimizer state, and
  /// of every batch-norm row its statistics (state_rows unchanged).
  [[nodiscard]] CheckpointState slice(const CheckpointState& whole) const;
  /// On the stage leaders (replica 0 of every stage, collective over them): gathers the stages'
  /// parts `s` (params, m, v; state_rows rows of the stage's statistics) to the chief (stage
  /// P − 1), which gets the whole model's state in `s`; returns true there. Throws TimeoutError
  /// past --timeout, LibraryError when an MPI call fails.
  bool assemble(CheckpointState& s) const;

 private:
  const Model& whole_;
  PipelinePlan plan_;
  PipelinePlace place_;
  std::size_t param_begin_ = 0, param_end_ = 0, state_begin_ = 0, state_end_ = 0;
  MPI_Comm pipe_ = MPI_COMM_NULL, replicas_ = MPI_COMM_NULL;
  std::unique_ptr<Cluster> stage_cluster_;
};

}  // namespace dtrain
