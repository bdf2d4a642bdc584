// dtrain/train/predict.hpp — distributed inference (`dtrain predict`), in the spirit of
// TensorFlowOnSpark's TFCluster.inference(): every rank scores a contiguous share of a dataset with
// a checkpoint's parameters; no parameter servers.
//
//   mpirun -np N dtrain predict [--config JOB] --checkpoint CKPT.h5 --data X.h5 --out P.h5
//
// Model: the job's layer lines — without --config or --layer, those of the configuration the
// checkpoint carries (checkpoint_layers()) — with the checkpoint's input shape and class count
// (the first line of its model signature), checked against the checkpoint like --resume does.
// Batchnorm statistics: mean_of_rows() of the checkpoint's rows, the function training's evaluation
// averages the workers' statistics with, so the final checkpoint scores the test set exactly as the
// final evaluation did.
//
// Work split: the data is cut into batches of --batch-size on one global grid (batch k holds
// samples [kB, (k+1)B)) and each rank takes a contiguous run of whole batches (shard_size over the
// batches). Every sample is therefore computed in the same batch, at the same position, whatever
// the number of ranks, and with equal --threads the outputs of 1, 2 or 4 ranks are bit-identical.
//
// Output: rank 0 gathers every rank's rows and writes one HDF5 file — `predictions` (N int32:
// argmax of the logits, the first maximum, as the loss's accuracy counts) and `probabilities`
// (N×classes float32: softmax of the logits, computed in double), in the input's order, with root
// attributes checkpoint, global_step, data, num_samples and (labeled data) accuracy and
// top5_accuracy (the label among the 5 largest logits; 1 with ≤ 5 classes) — to
// `<out>.tmp`, fsyncs it and hard-links it to `<out>` (which fails rather than replace a file that
// appeared meanwhile), so P.h5 exists only when complete and nothing is ever overwritten.
#pragma once

#include "dtrain/core/config.hpp"

namespace dtrain {

/// Runs `dtrain predict` (c.command == Subcommand::predict) on MPI_COMM_WORLD; every rank calls it.
/// Returns the exit code (0). Set-up errors are agreed by every rank (comm/guard.hpp) and thrown
/// as ReportedError after one message: --out exists, --checkpoint unreadable or of another model
/// (names the checkpoint and the first differing layer) or, without --config, carrying no layers,
/// --data unreadable, without `images`, or of another sample shape than the model's input (names
/// --data and both shapes), labels outside the model's classes. Write failures of the output file
/// are agreed the same way.
int run_predict(const Config& c);

}  // namespace dtrain
