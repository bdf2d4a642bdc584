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

#include "dtrain/core/config.hpp"
#include "dtrain/train/plan.hpp"

namespace dtrain {

/// Runs this rank's role on MPI_COMM_WORLD and returns the process exit code (0, or kExitSignalled
/// after a signal-triggered checkpoint). Throws on errors (ReportedError when already printed).
int run_training(const Config& config);

}  // namespace dtrain
