// dtrain/train/plan.hpp — what every rank computes identically before training, with no
// communication: datasets, per-worker batch, steps per epoch and in total.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/core/config.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {

struct TrainPlan {
  DatasetInfo train;
  DatasetInfo test;  ///< num_samples == 0 when no --test-data
  bool has_test = false;
  bool synthetic = false;  ///< --synthetic: no files; test = one batch per worker
  int workers = 1;
  int batch = 1;                     ///< per worker
  std::int64_t steps_per_epoch = 0;  ///< global steps of one epoch
  std::int64_t total_steps = 0;      ///< min(epochs × steps_per_epoch, max_steps)
};

/// Validates the datasets and sizes against the configuration and a world of `workers` workers.
/// A global step is one push in async mode (steps_per_epoch: every worker's steps together),
/// else one update from all workers (steps_per_epoch: one worker's steps). `data_threads`: this
/// rank's decode threads for encoded images (≥ 1; the one field that may differ between ranks,
/// as the cores do: train/trainer.hpp data_threads). Throws InputError naming the file/option at
/// fault.
TrainPlan make_plan(const Config& c, int workers, int data_threads);

/// The decode options of encoded images from the configuration: train = true gives the training
/// reader's (--random-resized-crop S when given, else the centre crop), false the evaluation's
/// (--eval-resize, --center-crop, whose 0 means the --random-resized-crop size); `threads` decode
/// threads (≥ 1). Pure.
DecodeOptions decode_options(const Config& c, bool train, int threads);

/// --center-crop and --eval-resize crop and scale encoded images as they are decoded: refused
/// (InputError naming the option and `path`) when `encoded` is false, the file holding decoded
/// pixels that they would not touch.
void require_encoded_for_crops(const Config& c, bool encoded, const std::string& path);

/// Throws InputError naming the first batchnorm of `layers` (Model::layers()) that a training
/// micro-batch of `plan.batch` / --micro-batches samples gives one value per channel
/// (N·H·W = 1: after a dense layer or a global pool at a batch of 1): its batch variance would be
/// 0, so it would output β alone and pass no gradient (PyTorch's batch_norm refuses the same:
/// "Expected more than 1 value per channel when training"). The message names --batch-size (or
/// --global-batch-size) and --micro-batches. A shard's last, shorter batch is not refused: see
/// short_batch_warning().
void require_batchnorm_statistics(const Config& c, const TrainPlan& plan,
                                  const std::vector<LayerInfo>& layers);

/// The warning for a shard's last, shorter batch whose smallest micro-batch holds 1 sample where
/// a batchnorm of `layers` has one value per channel (as require_batchnorm_statistics(), once an
/// epoch: that batchnorm outputs β alone for it and passes it no gradient, and its running
/// variance moves toward 0), naming the layer, the workers and what to change; "" when none.
/// Synthetic data (no shards) gives "".
[[nodiscard]] std::string short_batch_warning(const Config& c, const TrainPlan& plan,
                                              const std::vector<LayerInfo>& layers);

/// Local steps worker w takes in one epoch: its shard's batches, or with `equal_steps` (every
/// mode whose global step aggregates the workers) the largest shard's, worker 0's, for all.
std::int64_t worker_steps_per_epoch(const TrainPlan& p, bool equal_steps, int worker);

/// Samples all workers together process in local step `s` of an epoch with equal steps (a
/// shorter shard contributes an empty batch to the last step).
std::int64_t global_samples_at(const TrainPlan& p, std::int64_t s);

/// "# train FILE (N samples), test FILE, batch B per worker, S global steps per epoch, T in total"
/// (--synthetic: "# train synthetic CxHxW:K (N samples per epoch from ...), test the same
/// batches"), for encoded images followed by "; encoded images decoded on D thread(s) per worker
/// (--data-threads)" with this rank's D.
std::string describe_plan(const TrainPlan& plan);

}  // namespace dtrain
