// dtrain/train/predict.cpp — `dtrain predict` (see predict.hpp): a global batch grid split over the
// ranks, the job's model with the checkpoint's parameters and evaluation statistics, a gather to
// rank 0 and an atomic HDF5 write.
#include "dtrain/train/predict.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/comm/guard.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/files.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/version.hpp"
#include "dtrain/io/checkpoint.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/train/plan.hpp"
#include "dtrain/io/hdf5.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/train/checkpointer.hpp"
#include "dtrain/train/pretrained.hpp"
#include "dtrain/train/trainer.hpp"

namespace dtrain {
namespace {

/// First sample and sample count of rank r of R: whole batches of a global grid of `batch`.
std::pair<std::int64_t, std::int64_t> share(std::int64_t n, int batch, int r, int R) {
  const std::int64_t batches = (n + batch - 1) / batch;
  std::int64_t first = 0;
  for (int q = 0; q < r; ++q) first += shard_size(batches, q, R);
  const std::int64_t begin = std::min(first * batch, n);
  const std::int64_t end = std::min((first + shard_size(batches, r, R)) * batch, n);
  return {begin, end - begin};
}

struct Scores {
  std::vector<std::int32_t> predictions;  ///< n
  std::vector<float> probabilities;       ///< n × classes
  std::int64_t correct = 0;
  std::int64_t top5 = 0;  ///< samples whose label is among the kTopK largest logits
};

/// Scores samples [begin, begin + n) of info with model.
Scores score(Model& model, Backend& be, const DatasetInfo& info, std::int64_t begin, std::int64_t n,
             int batch) {
  const int K = model.num_classes();
  Scores out;
  out.predictions.resize(static_cast<std::size_t>(n));
  out.probabilities.resize(static_cast<std::size_t>(n) * K);
  if (n == 0) return out;
  std::vector<std::int64_t> indices(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) indices[static_cast<std::size_t>(i)] = begin + i;
  BatchReader reader(info, std::move(indices), batch);
  DeviceBuffer<float> x(be, info.sample.sample_count() * batch);
  std::vector<float> logits(static_cast<std::size_t>(batch) * K);
  HostBatch b;
  std::size_t row = 0;
  while (reader.next(b)) {
    be.copy_to_device(x.data(), b.x.data(), b.x.size() * sizeof(float));
    model.logits(x.data(), b.n, logits.data());
    for (int s = 0; s < b.n; ++s, ++row) {
      const float* l = logits.data() + static_cast<std::size_t>(s) * K;
      int arg = 0;
      for (int j = 1; j < K; ++j)
        if (l[j] > l[arg]) arg = j;  // the first maximum, as the loss's accuracy
      double sum = 0;
      for (int j = 0; j < K; ++j) sum += std::exp(static_cast<double>(l[j]) - l[arg]);
      float* p = out.probabilities.data() + row * K;
      for (int j = 0; j < K; ++j)
        p[j] = static_cast<float>(std::exp(static_cast<double>(l[j]) - l[arg]) / sum);
      out.predictions[row] = arg;
      if (!info.has_labels) continue;
      const std::int32_t label = b.y[static_cast<std::size_t>(s)];
      if (label == arg) ++out.correct;
      if (label >= 0 && label < K && classes_ranked_before(l, K, label) < kTopK) ++out.top5;
    }
  }
  return out;
}

/// What `dtrain predict` scores with once set up: this rank, its model holding the checkpoint's
/// parameters and evaluation statistics, and the data.
struct Predictor {
  int batch = 1;  ///< samples per pass: --batch-size, at most the data's (predict_batch)
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  DatasetInfo info;
  int classes = 0;
  std::int64_t global_step = 0;  ///< the checkpoint's
};

/// The batch of every pass: --batch-size, but no more than the data's samples — a larger batch
/// would only size buffers (and oneDNN's primitives) for samples that do not exist. The same on
/// every rank: the global grid (share()) depends on it.
int predict_batch(const Config& c, std::int64_t samples) {
  return static_cast<int>(std::min<std::int64_t>(c.batch_size, std::max<std::int64_t>(1, samples)));
}

/// The evaluation's decoding (--center-crop, --eval-resize) with --data-threads for this rank, as
/// a training worker on its device would use them; a bad image always fails.
DecodeOptions predict_decode(const Config& c, const Cluster& cluster) {
  DecodeOptions decode =
      decode_options(c, false, data_threads(c, cluster, planned_gpu(c, cluster) >= 0));
  decode.fail_on_bad = true;  // a left-out image would shift every later prediction's row
  decode.fail_reason = "dtrain predict: every image has its output row, none is left out";
  return decode;
}

/// set_up() with --init-from instead of a checkpoint: the classes from --synthetic's spec or
/// --num-classes (else the data's: its `num_classes` attribute, or its labels' max + 1), the
/// sample shape from --data, the tensors by name (load_pretrained(), strict) into the model on
/// every rank.
void set_up_pretrained(const Config& c, Predictor& p) {
  const int given = !c.synthetic.empty() ? parse_synthetic(c.synthetic).num_classes : c.num_classes;
  p.info = open_dataset_info(c.data, given, "--num-classes", true);
  DT_REQUIRE(p.info.num_classes > 0,
             "option --data '" + c.data +
                 "': no dataset `labels` and no attribute `num_classes` to take the class "
                 "count from; give --num-classes K (the model's)");
  require_encoded_for_crops(c, p.info.encoded, c.data);
  configure_decode(p.info, predict_decode(c, *p.cluster));
  p.classes = p.info.num_classes;
  set_threads(c, *p.cluster);
  std::string device;
  p.backend = make_backend(c, *p.cluster, device);
  p.batch = predict_batch(c, p.info.num_samples);
  p.model = std::make_unique<Model>(*p.backend, c.layers, p.info.sample, p.classes, p.batch);
  const PretrainedValues v =
      load_pretrained(c.init_from, *p.model, init_exclude_prefixes(c.init_exclude), c.seed);
  p.backend->copy_to_device(p.model->params(), v.params.data(), v.params.size() * sizeof(float));
  p.backend->copy_to_device(p.model->state(), v.state.data(), v.state.size() * sizeof(float));
}

/// Set-up: every check on every rank, one agreed error (all_or_nothing); then the checkpoint's
/// parameters and statistics go into the model.
Predictor set_up(const Config& c) {
  Predictor p;
  CheckpointState ckpt;
  all_or_nothing(MPI_COMM_WORLD, [&] {
    p.cluster = std::make_unique<Cluster>(MPI_COMM_WORLD, 0);  // every rank scores
    set_error_context("rank " + std::to_string(p.cluster->world_rank()) + " predict " +
                      p.cluster->me().host);
    require_new_file(c.out, "--out");  // found now, not after scoring
    if (!c.init_from.empty()) return set_up_pretrained(c, p);
    ckpt = read_checkpoint(c.checkpoint);
    const CheckpointInput input = checkpoint_input(ckpt, c.checkpoint);
    p.classes = input.classes;
    DT_REQUIRE(c.num_classes == 0 || c.num_classes == p.classes,
               "option --num-classes " + std::to_string(c.num_classes) +
                   ": the model of checkpoint '" + c.checkpoint + "' has " +
                   std::to_string(p.classes) +
                   " classes (the class count is the checkpoint's; leave --num-classes out)");
    p.info = open_dataset_info(c.data, p.classes,
                               "the class count of checkpoint '" + c.checkpoint + "'", true);
    // encoded images: the evaluation's crop
    require_encoded_for_crops(c, p.info.encoded, c.data);
    configure_decode(p.info, predict_decode(c, *p.cluster));
    DT_REQUIRE(p.info.sample.str() == input.sample,
               "option --data '" + c.data + "': images are " + p.info.sample.str() +
                   " per sample, but the model of checkpoint '" + c.checkpoint + "' takes " +
                   input.sample);
    DT_REQUIRE(p.info.num_samples * p.classes < (std::int64_t{1} << 31),
               "option --data '" + c.data + "': " + std::to_string(p.info.num_samples) +
                   " samples × " + std::to_string(p.classes) +
                   " classes exceed one gather (2^31 values); split it");
    set_threads(c, *p.cluster);
    std::string device;
    p.backend = make_backend(c, *p.cluster, device);
    // Without --config (or --layer lines) the model is the one the checkpoint carries.
    const std::vector<std::string> layers =
        c.layers.empty() ? checkpoint_layers(ckpt, c.checkpoint,
                                             "give --config JOB, the job it was trained with")
                         : c.layers;
    p.batch = predict_batch(c, p.info.num_samples);
    p.model = std::make_unique<Model>(*p.backend, layers, p.info.sample, p.classes, p.batch);
    check_inference_compatible(ckpt, c.checkpoint, *p.model);
  });
  if (!c.init_from.empty()) return p;
  load_for_inference(ckpt, *p.model, *p.backend);
  p.global_step = ckpt.global_step;
  return p;
}

/// Every rank's scores on rank 0 (empty elsewhere), in rank order = the input's order (the shares
/// are contiguous and ascending); `correct` and `top5` summed. Collective over MPI_COMM_WORLD.
Scores gather_scores(const Predictor& p, const Scores& mine, int batch) {
  const int R = p.cluster->world_size(), r = p.cluster->world_rank();
  const std::int64_t N = p.info.num_samples;
  const int K = p.classes;
  std::vector<int> counts(R), probs_counts(R), displs(R), probs_displs(R);
  for (int q = 0; q < R; ++q) {
    const auto [b, k] = share(N, batch, q, R);
    counts[q] = static_cast<int>(k);
    displs[q] = static_cast<int>(b);
    probs_counts[q] = static_cast<int>(k * K);
    probs_displs[q] = static_cast<int>(b * K);
  }
  const bool root = r == 0;
  Scores all;
  all.predictions.resize(root ? N : 0);
  all.probabilities.resize(root ? N * K : 0);
  all.correct = mine.correct;
  all.top5 = mine.top5;
  MPI_Comm world = MPI_COMM_WORLD;
  MPI_Request req[4];
  DT_CHECK_MPI(MPI_Igatherv(mine.predictions.data(), counts[r], MPI_INT32_T, all.predictions.data(),
                            counts.data(), displs.data(), MPI_INT32_T, 0, world, &req[0]));
  DT_CHECK_MPI(MPI_Igatherv(mine.probabilities.data(), probs_counts[r], MPI_FLOAT,
                            all.probabilities.data(), probs_counts.data(), probs_displs.data(),
                            MPI_FLOAT, 0, world, &req[1]));
  DT_CHECK_MPI(MPI_Ireduce(root ? MPI_IN_PLACE : &all.correct, &all.correct, 1, MPI_INT64_T,
                           MPI_SUM, 0, world, &req[2]));
  DT_CHECK_MPI(MPI_Ireduce(root ? MPI_IN_PLACE : &all.top5, &all.top5, 1, MPI_INT64_T, MPI_SUM, 0,
                           world, &req[3]));
  for (auto& q : req) wait_one(q, comm_timeout(), "gathering predictions to rank 0");
  return all;
}

/// Rank 0 writes <out>.tmp, fsyncs it and hard-links it to --out (see predict.hpp); every rank
/// agrees on the outcome (all_or_nothing).
void write_predictions(const Config& c, const Predictor& p, const Scores& all, double accuracy,
                       double top5) {
  all_or_nothing(MPI_COMM_WORLD, [&] {
    if (p.cluster->world_rank() != 0) return;
    const auto N = static_cast<hsize_t>(p.info.num_samples);
    std::string image;  // the file is made in memory; a full disk fails create_new_file's write
    {
      std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
      H5File f = create_memory_file(c.out);
      write_dataset_int32s(f.get(), "predictions", {N}, all.predictions.data());
      write_dataset_floats(f.get(), "probabilities", {N, static_cast<hsize_t>(p.classes)},
                           all.probabilities.data());
      write_attr_string(f.get(), "checkpoint", c.init_from.empty() ? c.checkpoint : c.init_from);
      write_attr_int(f.get(), "global_step", p.global_step);
      write_attr_string(f.get(), "data", c.data);
      write_attr_int(f.get(), "num_samples", p.info.num_samples);
      write_attr_string(f.get(), "dtrain_version", dtrain_version());
      if (p.info.has_labels) write_attr_double(f.get(), "accuracy", accuracy);
      if (p.info.has_labels) write_attr_double(f.get(), "top5_accuracy", top5);
      image = file_image(f.get(), c.out);
    }
    // <out>.tmp, fsynced, linked to --out; removed when a write fails (a full disk)
    create_new_file(c.out, [&](std::ostream& out) {
      out.write(image.data(), static_cast<std::streamsize>(image.size()));
    });
  });
}

/// Rank 0's closing lines: what was scored, and the accuracy on labeled data.
void report(const Config& c, const Predictor& p, std::int64_t correct, double accuracy,
            double top5) {
  if (p.cluster->world_rank() != 0) return;
  char line[512];
  // The parameters' source: a checkpoint and its step, or --init-from's named tensors.
  const std::string source = c.init_from.empty() ? "checkpoint " + c.checkpoint + " (global_step " +
                                                       std::to_string(p.global_step) + ")"
                                                 : "tensors " + c.init_from;
  std::snprintf(line, sizeof line,
                "dtrain predict: %lld samples of %s on %d rank(s) | %s | predictions %s",
                static_cast<long long>(p.info.num_samples), c.data.c_str(), p.cluster->world_size(),
                source.c_str(), c.out.c_str());
  log_info(line);
  if (p.info.has_labels) {
    std::snprintf(line, sizeof line, "accuracy %.10g (%lld of %lld correct) | top-5 accuracy %.10g",
                  accuracy, static_cast<long long>(correct),
                  static_cast<long long>(p.info.num_samples), top5);
    log_info(line);
  }
}

}  // namespace

int run_predict(const Config& c) {
  set_comm_timeout(c.timeout);
  const Predictor p = set_up(c);
  const int batch = p.batch;
  const auto [begin, n] =
      share(p.info.num_samples, batch, p.cluster->world_rank(), p.cluster->world_size());
  const Scores all = gather_scores(p, score(*p.model, *p.backend, p.info, begin, n, batch), batch);
  const double accuracy =
      static_cast<double>(all.correct) / static_cast<double>(p.info.num_samples);
  const double top5 = static_cast<double>(all.top5) / static_cast<double>(p.info.num_samples);
  write_predictions(c, p, all, accuracy, top5);
  report(c, p, all.correct, accuracy, top5);
  return kExitOk;
}

}  // namespace dtrain
