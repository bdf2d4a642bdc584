// dtrain/train/trainer.hpp — one rank's part of a training job (between-graph replication: every
// rank runs this same program and takes its role from the Cluster split).
//
// The chief (worker 0) plays MonitoredTrainingSession's part: it initialises (or restores) the
// parameters, logs, evaluates (with all workers), checkpoints, and writes metrics.csv and
// results.json. Stop-at-step (--max-steps), per-epoch evaluation and checkpoint hooks run at step
// boundaries.
#pragma once

#include <cstdint>
#include <string>

#include <memory>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/io/dataset.hpp"

namespace dtrain {

/// What every rank computes identically before training (no communication needed).
struct TrainPlan {
  DatasetInfo train;
  DatasetInfo test;              ///< num_samples == 0 when no --test-data
  bool has_test = false;
  bool synthetic = false;        ///< --synthetic: no files; test = one batch per worker
  int workers = 1;
  int batch = 1;                 ///< per worker
  std::int64_t steps_per_epoch = 0;  ///< global steps of one epoch
  std::int64_t total_steps = 0;  ///< min(epochs × steps_per_epoch, max_steps)
};

/// Validates the datasets and sizes against the configuration and a world of `workers` workers.
/// Throws InputError naming the file/option at fault.
TrainPlan make_plan(const Config& c, int workers);

/// Local steps worker w takes in one epoch (sync: the same for all workers).
std::int64_t worker_steps_per_epoch(const TrainPlan& p, const std::string& mode, int worker);

/// Samples all workers together process in local step `s` of an epoch (sync mode).
std::int64_t global_samples_at(const TrainPlan& p, std::int64_t s);

/// Sets this rank's OpenMP threads: --threads, or the node's cores shared by its ranks (ps: 1),
/// never more than the cores the launcher bound the rank to unless --threads asks (then warns).
void set_threads(const Config& c, const Cluster& cluster);

/// This rank's compute backend (nullptr on a ps) and its device name for the role table ("cpu",
/// "cuda:N"): --device, one GPU per node-local worker. Throws InputError when --device cuda finds
/// no GPU or more local workers than GPUs without --allow-gpu-sharing.
std::unique_ptr<Backend> make_backend(const Config& c, const Cluster& cluster, std::string& name);

/// Runs this rank's role on MPI_COMM_WORLD and returns the process exit code (0, or kExitSignalled
/// after a signal-triggered checkpoint). Throws on errors (ReportedError when already printed).
int run_training(const Config& config);

}  // namespace dtrain
