// dtrain/train/ps_count.hpp — `--num-ps auto`: how many of the world's ranks become parameter
// servers, so that no ps serves more gradient bytes per second than it can while the workers
// compute (the question behind TensorFlow's advice to add ps until they stop being the
// bottleneck, and BytePS's bandwidth argument, here as one closed form).
//
// Every worker step, each of the W workers pushes its gradient (G bytes at the --wire-dtype:
// G_push = P · wire bytes) and receives its shard's parameters back (G_reply = 4P bytes), so each
// of K ps serves (W / K) · (G_push + G_reply) bytes per worker step, and a worker step takes
// F · b / R (F: forward + backward flops per sample, 3 × the model's forward flops; b: the batch
// per worker; R: a worker's flop rate). A ps serving B bytes/s keeps up when
//     (W / K) · (G_push + G_reply) / B ≤ F · b / R   ⇔   K ≥ W · ρ,
//     ρ = β · (G_push + G_reply) / (F · b),   β = R / B  (flops a worker does per byte a ps
//     serves).
// With W = N − K (N: the world size) the smallest such K is K = ⌈N · ρ / (1 + ρ)⌉, kept within
// [1, N − 1]; with --global-batch-size, b = global / W changes with K, so K is the smallest one
// (from 1 up) with K ≥ (N − K) · ρ(N − K). Every rank computes the same K from the job alone,
// before the world is split, so the role table agrees everywhere.
//
// β is kFlopsPerPsByte, from the 16-core lent machine's ResNet-50 sweep (issue 36): one worker
// core computed ~100 GFLOP/s (24 samples × 24.6 GFLOP in 5.9 s), and one async ps served ~2.5 GB/s
// of pushes and replies where it became the bottleneck (12 workers, 12.5 pushes/s of 102 MB each
// way); one thread per rank. Other machines differ: K is a starting point, the role table says
// how it was chosen, and --num-ps K overrides it.
#pragma once

#include <cstddef>
#include <string>

namespace dtrain {

/// β: worker flops per byte a ps rank serves (see the file comment).
inline constexpr double kFlopsPerPsByte = 40.0;

/// What the rule weighs (bytes and flops of the whole model; one worker step).
struct PsCountInput {
  int world = 2;                  ///< MPI ranks N, split into K ps + W workers (N ≥ 2)
  double push_bytes = 0;          ///< G_push: a gradient on the wire (parameters × wire bytes)
  double reply_bytes = 0;         ///< G_reply: the parameters a push is answered with (× 4)
  double flops_per_sample = 0;    ///< F: forward + backward flops per sample (> 0)
  int batch = 0;                  ///< --batch-size per worker (used when global_batch is 0)
  int global_batch = 0;           ///< --global-batch-size (0: none), split over W workers
  double beta = kFlopsPerPsByte;  ///< β
  int min_ps = 1;                 ///< the fewest K allowed (--pipeline-stages: a ps per stage)
  /// --pipeline-stages P: the workers come in whole pipelines (W a multiple of P, only such K
  /// are tried) and the global batch splits over the W / P replicas
  int stages = 1;
  /// the most K allowed, 0: N − 1 (--optimizer lars | lamb: the tensor count, a ps holding whole
  /// tensors)
  int max_ps = 0;
  /// the fewest workers W allowed (--replicas-to-aggregate R: R workers at least; 0 or 1: one)
  int min_workers = 1;
};

struct PsCountChoice {
  int num_ps = 1;   ///< K
  double rho = 0;   ///< ρ at K's worker count: a ps load of W · ρ / K ≤ 1 keeps up
  std::string why;  ///< one line for the role table: K, ρ and the inputs
};

/// The rule of the file comment, K counted from min_ps up over the K whose N − K workers are a
/// multiple of `stages`. Throws InputError when world < 2, flops_per_sample ≤ 0 or no K in
/// [min_ps, max_ps] leaves such a worker count. With every such K still too few, the largest
/// (max_ps: the line then says so).
PsCountChoice choose_num_ps(const PsCountInput& in);

}  // namespace dtrain
