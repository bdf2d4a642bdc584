// dtrain/train/job.hpp (private) — what run_training's steps hand each other: the checked job
// (roles, plan, model layout, shards), this rank's resources and the resume point.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/files.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/io/checkpoint.hpp"
#include "dtrain/model/pipeline_plan.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/server.hpp"
#include "dtrain/ps/sharding.hpp"
#include "dtrain/train/plan.hpp"
#include "dtrain/train/provenance.hpp"

namespace dtrain {

struct WorkerOutcome;

struct Job {
  int num_ps = 0;  ///< ps ranks (0: allreduce)
  std::unique_ptr<Cluster> cluster;
  TrainPlan plan;
  std::size_t param_count = 0, state_count = 0, activation_bytes = 0;
  std::string signature;     ///< the model's layout (checkpoint compatibility)
  std::string model_report;  ///< layer table and shard table, printed by the chief
  /// --init-from: check_init_from()'s line (--dry-run), or initial_point()'s (the chief's)
  std::string init_report;
  /// Lines after the role table ("\n"-terminated): how --num-ps auto chose, thread pinning
  std::string role_notes;
  std::vector<ShardRange> shards;  ///< ps modes: the ps ranges (of the whole model's buffer)
  /// a pipelined ps job: the stage each ps serves and its range in that stage's buffer
  std::vector<StageShard> stage_shards;
  /// --pipeline-stages P > 1: the model's cut into stages (stages == 1 otherwise)
  PipelinePlan pipeline;
  ShardTensors ps_tensors;  ///< a ps: its shard's ranges without weight decay, (LARS) tensors
  std::unique_ptr<Backend> backend;       ///< a worker's compute backend
  std::string device_name;                ///< "cpu", "cuda:0"
  std::optional<CheckpointState> resume;  ///< the chief's, then every worker's (share_resume_point)
  /// --init-from: the chief's start (initial_point(), read in phase 1), until claim_resources()
  std::optional<CheckpointState> init_point;
  std::optional<FileLock> run_dir_lock;  ///< the chief's, held for the run (lock_run_dir)
  Provenance provenance;                 ///< versions, hosts, threads, config hash (every rank's)
};

/// What the chief reports beyond its own outcome, gathered from every rank.
struct RunStats {
  PsStats ps;  ///< the counters of pushes: ps 0's; the busy fractions: the busiest ps's
  /// each ps's updates, in ps order (sync through the ps: every shard's global steps)
  std::vector<std::int64_t> updates_per_ps;
  double peak_rss_mb = 0;        ///< max over the workers: the whole run
  double train_peak_rss_mb = 0;  ///< max over the workers: up to the last training step
};

/// Collective over MPI_COMM_WORLD: every rank passes its part (a ps its PsStats, a worker its
/// outcome); the chief gets the result, the other ranks an unspecified value. Throws
/// RuntimeFault past --timeout.
RunStats gather_run_stats(const Job& job, const PsStats* ps, const WorkerOutcome* worker);

/// The chief's results.json and closing log line (train/results.cpp).
void write_results(const Config& c, const Job& job, const WorkerOutcome& out, const RunStats& st);

}  // namespace dtrain
