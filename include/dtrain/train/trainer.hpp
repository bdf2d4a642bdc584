// dtrain/train/trainer.hpp — one rank's part of a training job (between-graph replication: every
// rank runs this same program and takes its role from the Cluster split).
//
// The chief (worker 0) plays MonitoredTrainingSession's part: it initialises (or restores) the
// parameters, logs, evaluates (with all workers), checkpoints, and writes metrics.csv and
// results.json. Stop-at-step (--max-steps), per-epoch evaluation and checkpoint hooks run at step
// boundaries.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/train/plan.hpp"

namespace dtrain {

/// This rank's share of its node's CPUs: Cluster::node_cpus() (the CPUs the node's ranks may run
/// on together) over its ranks (at least 1), never more than the CPUs the launcher bound the rank
/// to. Throws LibraryError when the rank's affinity cannot be read (allowed_cpus()).
int rank_cores(const Cluster& cluster);

/// Sets this rank's OpenMP threads: --threads (a ps: --ps-threads), 0 meaning rank_cores(),
/// never more than the cores the launcher bound the rank to unless --threads asks (then warns).
/// The node's first rank also warns when the node's CPU ranks together start more OpenMP threads
/// than the node has cores (and than it has ranks: one thread each is the least they can run).
void set_threads(const Config& c, const Cluster& cluster);

/// This rank's decode threads for encoded images: --data-threads, or for 0 (auto) on a rank that
/// trains on a GPU (`gpu`) rank_cores() − 1 — one core drives the GPU, the others decode (one
/// H200's ResNet-50 rate needs about 4–6 cores of decoding) — at least 1; on the CPU 1, its
/// cores running the model (decoding takes under 1 % of a CPU worker's ResNet-50 step). Both
/// figures: docs/results/input/.
int data_threads(const Config& c, const Cluster& cluster, bool gpu);

/// --pin-threads, after set_threads(), collective over the world: pins this rank's threads to its
/// block of its node's CPUs (comm/affinity.hpp plan_cores; ranks of a node that the launcher gave
/// the same CPUs split them by node-local rank, a rank the launcher bound keeps its own CPUs):
/// the calling thread to the whole compute block, OpenMP thread i to compute CPU i mod n, and
/// --threads 0 (a ps: --ps-threads 0) becomes one thread per compute CPU. Records what every
/// rank's threads may run on, read back from /proc, and a worker's communication CPU
/// (allreduce) in the cluster (Cluster::set_cpus); appends the chief's note for the role table to
/// `notes`. Warns where the kernel refuses a mask. Throws as Cluster::set_cpus.
void pin_rank_threads(const Config& c, Cluster& cluster, std::string& notes);

/// "# --pin-threads, the chief's threads: dtrain on 0 (x2), dtrain-comm on 1, ...": this process's
/// threads grouped by name and CPUs (comm/affinity.hpp process_threads), for the log at the end.
std::string describe_pinned_threads(const std::string& who);

/// The GPU this rank trains on for --device, as make_backend() will pick it, without creating
/// anything: -1 for the CPU (every ps, --device cpu, --device auto without a usable GPU), else the
/// node-local worker rank modulo the node's GPUs (select_gpu_for_local_rank). Throws InputError
/// when --device cuda finds no GPU or more local workers than GPUs without --allow-gpu-sharing.
/// Used by the job check, so --dry-run refuses what a real run would.
int planned_gpu(const Config& c, const Cluster& cluster);

/// This rank's compute backend (nullptr on a ps) and its device name for the role table ("cpu",
/// "cuda:N"): --device, one GPU per node-local worker, with --math, --layout and --precision set.
/// Throws InputError when --device cuda finds no GPU or more local workers than GPUs without
/// --allow-gpu-sharing, or for --math tf32 or --precision bf16 on a GPU older than compute
/// capability 8.0; LibraryError when a CUDA, cuDNN, cuBLAS or oneDNN set-up call fails.
std::unique_ptr<Backend> make_backend(const Config& c, const Cluster& cluster, std::string& name);

/// --layout on a backend of `device`. auto: NHWC on the CPU — oneDNN's jit batchnorm and its wide
/// convolutions read NHWC in place, where NCHW goes through reorders to their blocked layouts
/// (measured when NCHW batchnorm still ran oneDNN's plain ncsp loop: Fashion-MNIST CNN ×1.24
/// samples/s, ResNet-20 ×1.20, ResNet-50 ×1.08; docs/design.md). On GPUs NHWC too — what
/// tensor-core convolutions read, and where cuDNN fuses batchnorm with relu and with add + relu
/// (H200, tests/benchmarks/gpu_bench.sh: ResNet-50 TF32 ×1.64, Fashion-MNIST CNN ×1.14 at batch 64,
/// ×1.18 at 512) — except with --math fp32 in fp32 precision, where FMA convolutions run NCHW
/// about twice as fast (ResNet-50 988 against 511 samples/s; docs/gpu.md).
[[nodiscard]] inline Layout layout_of(const Config& c, Device device) {
  if (c.layout == LayoutOption::nhwc) return Layout::nhwc;
  if (c.layout == LayoutOption::nchw) return Layout::nchw;
  if (device == Device::cpu) return Layout::nhwc;
  return c.math == MathOption::fp32 && c.precision != Precision::bf16 ? Layout::nchw : Layout::nhwc;
}

/// Runs this rank's role on MPI_COMM_WORLD and returns the process exit code (0, or kExitSignalled
/// after a signal-triggered checkpoint). Throws on errors (ReportedError when already printed).
int run_training(const Config& config);

}  // namespace dtrain
