// dtrain/plan/plan_command.hpp — `dtrain plan`: which mode, bucket size and ps count to run a job
// with on a cluster that may not exist yet.
//
//   dtrain plan --config JOB.ini --nodes N --workers-per-node G --network SPEC
//               [--intra-node SPEC] [--mode M --num-ps K] [--profile P.json | --save-profile
//               P.json]
//               [--out PLAN.json]
//
// The worker profile (model/profile.hpp) comes from --profile, or from a short profiling run on
// this machine at the planned per-worker batch (plan/profiler.hpp: --plan-steps timed steps) with
// --threads threads (0: this machine's cores / --workers-per-node, a worker's share of a node).
// The per-worker batch is --global-batch-size / (N·G) when that is set, else --batch-size. The
// model (plan/scaling_model.hpp) prices every candidate — sync flat and hierarchical allreduce
// over bucket sizes (flat also with --bucket-link's latency-aware buckets), async over ps counts;
// with --mode (and --num-ps) on the command line only that mode (and ps count) — and prints a table
// (predicted compute, exposed communication, optimizer, step ms, samples/s, efficiency, what bounds
// the step), the recommended options, and the model's assumptions. --out writes the same as JSON
// (refused if the file exists).
#pragma once

#include "dtrain/core/config.hpp"

namespace dtrain {

/// Runs `dtrain plan` (c.command == Subcommand::plan) as one process. Returns 0. Errors (agreed
/// on every rank, thrown as ReportedError after one message): more than one rank, --nodes or
/// --workers-per-node < 1, a bad --network / --intra-node spec, a per-worker batch that does
/// not divide, --mode sync with --num-ps > 0 (not modelled), an unreadable --profile, --out
/// existing, and what profiling the job throws.
int run_plan(const Config& c);

}  // namespace dtrain
