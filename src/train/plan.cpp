// dtrain/train/plan.cpp — the run's plan from the configuration and the dataset headers.
#include "dtrain/train/plan.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "dtrain/core/error.hpp"

namespace dtrain {

DecodeOptions decode_options(const Config& c, bool train, int threads) {
  DecodeOptions d;
  d.crop = c.center_crop > 0 ? c.center_crop : c.random_resized_crop;
  d.random_resized = train && c.random_resized_crop > 0;
  if (d.random_resized) d.crop = c.random_resized_crop;
  std::tie(d.range.scale_min, d.range.scale_max) = parse_min_max("rrc-scale", c.rrc_scale);
  std::tie(d.range.ratio_min, d.range.ratio_max) = parse_min_max("rrc-ratio", c.rrc_ratio);
  d.resize = c.eval_resize > 0 ? c.eval_resize : static_cast<int>(std::lround(d.crop / 0.875));
  d.threads = threads;
  d.fail_on_bad = c.on_bad_image == OnBadImage::fail;
  return d;
}

void require_encoded_for_crops(const Config& c, bool encoded, const std::string& path) {
  for (const auto& [opt, v] :
       {std::pair{"center-crop", c.center_crop}, std::pair{"eval-resize", c.eval_resize}})
    DT_REQUIRE(encoded || v == 0,
               std::string("option --") + opt +
                   ": crops and scales encoded images (JPEG/PNG bytes, written by "
                   "images_to_h5.py --store encoded) as they are decoded, but " +
                   path + " holds decoded pixels");
}

TrainPlan make_plan(const Config& c, int workers, int data_threads) {
  TrainPlan p;
  p.workers = workers;
  if (c.global_batch_size > 0) {
    // A pipeline's batch splits over its replicas, each one of --pipeline-stages workers.
    const std::string over = std::to_string(workers) +
                             (c.pipeline_stages > 1 ? " pipeline replica" : " worker") +
                             (workers == 1 ? "" : "s");
    DT_REQUIRE(c.global_batch_size % workers == 0,
               "option --global-batch-size: " + std::to_string(c.global_batch_size) +
                   " does not split evenly over " + over);
    p.batch = c.global_batch_size / workers;
    DT_REQUIRE(p.batch % c.micro_batches == 0,
               "option --micro-batches: " + std::to_string(c.micro_batches) +
                   " does not divide the per-worker batch " + std::to_string(p.batch) +
                   " (--global-batch-size " + std::to_string(c.global_batch_size) + " over " +
                   over + "; every micro-batch has the same number of samples)");
  } else {
    p.batch = c.batch_size;
  }
  if (!c.synthetic.empty()) {
    p.synthetic = true;
    p.train = synthetic_dataset(c.synthetic, c.synthetic_samples);
    p.test = synthetic_dataset(c.synthetic, static_cast<std::int64_t>(workers) * p.batch);
    p.has_test = true;
    DT_REQUIRE(p.train.num_samples >= p.test.num_samples,
               "option --synthetic-samples: " + std::to_string(p.train.num_samples) +
                   " samples per epoch are fewer than workers × batch size (" +
                   std::to_string(workers) + " × " + std::to_string(p.batch) + " = " +
                   std::to_string(p.test.num_samples) + ")");
  } else {
    p.train = open_dataset_info(c.train_data, c.num_classes, "--num-classes");
    configure_decode(p.train, decode_options(c, true, data_threads));
  }
  DT_REQUIRE(p.train.encoded || c.random_resized_crop == 0,
             "option --random-resized-crop: needs encoded images (JPEG/PNG bytes, written by "
             "images_to_h5.py --store encoded), but " +
                 p.train.path + " holds decoded pixels");
  DT_REQUIRE(!p.train.encoded || c.random_crop == 0,
             "option --random-crop: pads decoded pixels; " + p.train.path +
                 " holds encoded images: use --random-resized-crop SIZE");
  check_dataset_fits(p.train, workers, p.batch);
  DT_REQUIRE(c.random_crop <= std::min(p.train.sample.h, p.train.sample.w),
             "option --random-crop " + std::to_string(c.random_crop) + ": pads by more than the " +
                 std::to_string(p.train.sample.h) + "x" + std::to_string(p.train.sample.w) +
                 " images of " + p.train.path);
  if (!c.test_data.empty()) {
    p.test = open_dataset_info(c.test_data, p.train.num_classes);
    check_class_names(p.train, p.test);
    configure_decode(p.test, decode_options(c, false, data_threads));
    DT_REQUIRE(!p.train.encoded || !p.test.encoded || c.center_crop == 0 ||
                   c.random_resized_crop == 0 || c.center_crop == c.random_resized_crop,
               "options --center-crop " + std::to_string(c.center_crop) +
                   " and --random-resized-crop " + std::to_string(c.random_resized_crop) +
                   ": the test images (--center-crop) must have the training images' size "
                   "(--random-resized-crop); give the same size, or leave --center-crop out");
    DT_REQUIRE(p.test.sample == p.train.sample,
               "--test-data '" + c.test_data + "': images are " + p.test.sample.str() +
                   " per sample but the training set's are " + p.train.sample.str());
    DT_REQUIRE(p.test.num_samples >= workers,
               "--test-data '" + c.test_data + "': fewer samples than workers");
    p.has_test = true;
  }
  if (!p.synthetic) require_encoded_for_crops(c, p.train.encoded || p.test.encoded, p.train.path);
  DT_REQUIRE(p.has_test || (c.eval_every == 0 && c.target_accuracy == 0),
             "options --eval-every / --target-accuracy: need a test set (--test-data)");
  const bool aggregate = steps_aggregate_workers(c);
  for (int w = 0; w < workers; ++w) p.steps_per_epoch += worker_steps_per_epoch(p, aggregate, w);
  if (aggregate) p.steps_per_epoch = worker_steps_per_epoch(p, true, 0);
  p.total_steps = p.steps_per_epoch * c.epochs;
  if (c.max_steps > 0) p.total_steps = std::min(p.total_steps, c.max_steps);
  return p;
}

namespace {
/// The first batchnorm of `layers` with one value per channel per sample (H·W = 1), or npos.
std::size_t flat_batchnorm(const std::vector<LayerInfo>& layers) {
  for (std::size_t i = 0; i < layers.size(); ++i)
    if (layers[i].type == "batchnorm" && layers[i].output.h * layers[i].output.w == 1) return i;
  return std::string::npos;
}
}  // namespace

void require_batchnorm_statistics(const Config& c, const TrainPlan& plan,
                                  const std::vector<LayerInfo>& layers) {
  const int micro = plan.batch / std::max(c.micro_batches, 1);
  const std::size_t i = flat_batchnorm(layers);
  if (i != std::string::npos && micro == 1) {
    const LayerInfo& l = layers[i];
    const std::string batch =
        c.global_batch_size > 0 ? "--global-batch-size " + std::to_string(c.global_batch_size) +
                                      " (a batch of " + std::to_string(plan.batch) + " per worker)"
                                : "--batch-size " + std::to_string(plan.batch);
    DT_REQUIRE(
        false,
        "layer '" + layer_key(i, l.type, l.name) + "' (batchnorm of " + l.output.str() +
            " per sample): a training micro-batch of 1 sample gives it one value per channel (" +
            batch +
            (c.micro_batches > 1 ? ", --micro-batches " + std::to_string(c.micro_batches) : "") +
            "), whose batch variance is 0: it would output beta alone and pass no gradient; use at "
            "least 2 samples per micro-batch, or move the batchnorm before the layer that leaves "
            "1x1 per channel");
  }
}

std::string short_batch_warning(const Config& c, const TrainPlan& plan,
                                const std::vector<LayerInfo>& layers) {
  const std::size_t bn = flat_batchnorm(layers);
  if (plan.synthetic || bn == std::string::npos) return "";
  std::string workers;
  for (int w = 0; w < plan.workers; ++w) {
    const std::int64_t last = shard_size(plan.train.num_samples, w, plan.workers) % plan.batch;
    const std::int64_t micro = std::min<std::int64_t>(std::max(c.micro_batches, 1), last);
    if (last > 0 && last / micro == 1)
      workers += (workers.empty() ? "" : ", ") + std::to_string(w) + " (" + std::to_string(last) +
                 (last == 1 ? " sample" : " samples") + ")";
  }
  if (workers.empty()) return "";
  const LayerInfo& l = layers[bn];
  return "the last batch of each epoch on worker(s) " + workers + " of " + plan.train.path +
         " leaves a micro-batch of 1 sample, which gives layer '" + layer_key(bn, l.type, l.name) +
         "' (batchnorm of " + l.output.str() +
         " per sample) one value per channel: its output for that micro-batch is beta alone, it "
         "passes no gradient, and its running variance moves toward 0; choose a --batch-size (or "
         "--micro-batches) that leaves at least 2 samples a micro-batch";
}

std::int64_t worker_steps_per_epoch(const TrainPlan& p, bool equal_steps, int worker) {
  // Equal steps: every worker takes as many steps as the largest shard needs (worker 0's), so
  // that all samples are used; a shorter shard contributes an empty batch to the last step.
  const int w = equal_steps ? 0 : worker;
  const std::int64_t n = shard_size(p.train.num_samples, w, p.workers);
  return (n + p.batch - 1) / p.batch;
}

std::int64_t global_samples_at(const TrainPlan& p, std::int64_t s) {
  std::int64_t total = 0;
  for (int w = 0; w < p.workers; ++w) {
    const std::int64_t left = shard_size(p.train.num_samples, w, p.workers) - s * p.batch;
    total += std::clamp<std::int64_t>(left, 0, p.batch);
  }
  return total;
}

std::string describe_plan(const TrainPlan& plan) {
  const std::string train =
      plan.synthetic
          ? " samples per epoch from one random batch per worker in device memory, no I/O)"
          : " samples)";
  const std::string test =
      plan.synthetic ? "the same batches (" + std::to_string(plan.test.num_samples) + " samples)"
                     : (plan.has_test ? plan.test.path : "none");
  return "# train " + plan.train.path + " (" + std::to_string(plan.train.num_samples) + train +
         ", test " + test + ", batch " + std::to_string(plan.batch) + " per worker, " +
         std::to_string(plan.steps_per_epoch) + " global steps per epoch, " +
         std::to_string(plan.total_steps) + " in total" +
         (plan.train.encoded
              ? "; encoded images decoded on " + std::to_string(plan.train.decode.threads) +
                    " thread(s) per worker (--data-threads)"
              : std::string());
}

}  // namespace dtrain
