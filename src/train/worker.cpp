// dtrain/train/worker.cpp — per-epoch loop: prefetching reader → model step → gradient exchange;
// stop at --max-steps or on a signal; evaluation at epoch ends and every --eval-every steps
// (worker_eval.cpp); the chief's log lines, metrics.csv and step-time summary
// (worker_report.cpp). Restore and checkpoints: the Checkpointer's hooks
// (train/checkpointer.hpp), called at the loop's points.
#include "worker.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <thread>
#include <utility>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/fault.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timeline.hpp"
#include "dtrain/dnn/counter_rng.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/model/step_graphs.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/train/signals.hpp"

namespace dtrain {

void worker_sum(MPI_Comm comm, double* v, int n) {
  MPI_Request req;
  DT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, comm, &req));
  wait_one(req, comm_timeout(), "worker allreduce of metrics");
}

namespace {
/// The allreduce algorithms a pipeline's workers ran, '+'-joined in a fixed order: the one name,
/// or where the stages summed differently (one fell back to MPI) each of them. Collective over
/// the stage's replicas (`stage`), then the replica's stages (`pipe`).
std::string algorithms_of_all(MPI_Comm stage, MPI_Comm pipe, const std::string& mine) {
  static constexpr std::array<const char*, 4> kNames = {"hierarchical", "mpi", "nccl", "none"};
  std::array<double, kNames.size()> used{};
  for (std::size_t k = 0; k < kNames.size(); ++k) used[k] = mine == kNames[k] ? 1 : 0;
  for (MPI_Comm comm : {stage, pipe}) worker_sum(comm, used.data(), static_cast<int>(used.size()));
  std::string all;
  for (std::size_t k = 0; k < kNames.size(); ++k)
    if (used[k] > 0) all += (all.empty() ? "" : "+") + std::string(kNames[k]);
  return all;
}

/// The stage's activation slots for its schedule (1 without a pipeline).
int slots_of(const Config& c, const PipelineGroup* pipe) {
  if (pipe == nullptr) return 1;
  return stage_slots(c.schedule, pipe->place().stage, pipe->place().stages, c.micro_batches);
}
}  // namespace

Worker::Worker(const Config& c, const Cluster& cluster, const TrainPlan& plan, Backend& backend,
               std::optional<CheckpointState> resume, const PipelineGroup* pipe)
    : c_(c), cluster_(cluster), plan_(plan), be_(backend), pipe_(pipe),
      reports_(cluster.is_chief() && (pipe == nullptr || pipe->place().last())),
      // Micro-batches (a pipeline, or accumulation) need activations for one micro-batch only.
      model_(backend, c.layers, plan.train.sample, plan.train.num_classes,
             plan.batch / std::max(c.micro_batches, 1), pipe ? pipe->layers() : LayerRange{},
             slots_of(c, pipe)),
      resume_(std::move(resume)), x_(backend, plan.train.sample.sample_count() * plan.batch),
      stats_(backend, kStatsFloats), y_(backend, plan.batch), w_(cluster.me().index),
      profile_(parse_step_range(c.profile_steps)) {
  if (pipe != nullptr)
    runner_ = std::make_unique<PipelineRunner>(model_, pipe->pipe(), c.schedule, c.micro_batches);
  exchange_ = make_exchange(c, cluster, plan, model_);
  if (pipe != nullptr)
    exchange_ =
        agree_along_pipeline(std::move(exchange_), pipe->pipe(), pipe->place().replica == 0);
  checkpointer_.emplace(
      c, cluster, plan, backend, model_, *exchange_,
      [this] { return prior_wall_ + now_seconds() - t_start_; }, pipe);
  install_step_graphs();
  if (plan.synthetic) make_synthetic_batch();
  else train_upload_.emplace(backend, plan.train, plan.batch, model_.input_layout());
  if (plan.train.encoded && c.cache_mb > 0)
    encoded_cache_ = std::make_unique<EncodedCache>(static_cast<std::size_t>(c.cache_mb) << 20);
  if (reports_)
    metrics_ = std::make_unique<MetricsWriter>(
        c.run_dir,
        SummaryOptions{c.summaries, c.summary_every, resume_ ? resume_->global_step : 0});
}

Worker::~Worker() {
  // The exchange first: while an error unwinds, its NCCL communicator must be aborted before the
  // device buffers below are freed (cudaFree waits for the device, NCCL's stream included, which
  // a sum a dead peer never joins would hold forever).
  exchange_.reset();
}

void Worker::install_step_graphs() {
  const bool required = c_.cuda_graph == CudaGraphOption::on;
  if (be_.device() != Device::cuda) {  // CPU workers: accepted, nothing to capture
    DT_REQUIRE(!required, "option --cuda-graph: on needs GPU workers, and this worker runs on the "
                          "CPU (--device " +
                              std::string(to_string(c_.device)) + ")");
    return;
  }
  const std::string why =
      runner_ ? std::string("pipeline stages") : cuda_graph_off_reason(c_, plan_.workers);
  if (!why.empty()) {
    DT_REQUIRE(!required, "option --cuda-graph: on, but the step cannot be captured: " + why +
                              " (use --cuda-graph auto or off)");
    if (reports_) log_info("# cuda graph: off (" + why + ")");
    return;
  }
  StepGraphs::Log log;
  if (reports_) log = [](const std::string& line) { log_info("# " + line); };
  model_.set_step_graphs(std::make_unique<StepGraphs>([this] { return be_.make_step_graph(); },
                                                      required, std::move(log)));
}

void Worker::make_synthetic_batch() {
  // One batch of random images (N(0, 1), like tf_cnn_benchmarks' and PyTorch's randn) and labels
  // per worker, a pure function of (seed, worker): made once and kept in device memory, every step
  // and evaluation reuses it (no I/O, no host→device copies; a partial batch uses its first rows).
  const std::size_t per = plan_.train.sample.sample_count();
  const std::uint64_t key = mix_seed(mix_seed(c_.seed, 0x5e7717), static_cast<std::uint64_t>(w_));
  std::vector<float> x(per * plan_.batch);
  for (std::size_t i = 0; i < x.size(); i += 2) {  // Box–Muller: two normals from two uniforms
    const double r = std::sqrt(-2.0 * std::log(1.0 - counter_uniform(key, i)));  // 1 − u ∈ (0, 1]
    const double t = 6.283185307179586 * counter_uniform(key, i + 1);
    x[i] = static_cast<float>(r * std::cos(t));
    if (i + 1 < x.size()) x[i + 1] = static_cast<float>(r * std::sin(t));
  }
  std::vector<std::int32_t> y(plan_.batch);
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] = static_cast<std::int32_t>(counter_hash(key + 1, i) %
                                     static_cast<std::uint64_t>(plan_.train.num_classes));
  be_.copy_to_device(x_.data(), x.data(), x.size() * sizeof(float));
  be_.copy_to_device(y_.data(), y.data(), y.size() * sizeof(std::int32_t));
}

WorkerOutcome Worker::run() {
  const bool resumed = resume_.has_value();
  const TrainPosition from = checkpointer_->restore(std::move(resume_), prior_wall_);
  resume_.reset();  // moved from (restore() freed the host copy)
  global_step_ = from.global_step;
  const int first_epoch = from.epoch;
  out_.epochs_done = std::min(first_epoch, c_.epochs);  // before the checkpoint
  // Async stop checkpoints hold every worker's own position (gather_cursors()).
  const std::int64_t first_step =
      from.worker_steps.empty() ? from.step_in_epoch : from.worker_steps[w_];
  // Under --precision bf16, which kernels run it (e.g. how many ops the CPU emulates).
  if (reports_ && be_.act_dtype() == DType::bf16) log_info("# worker 0 backend: " + be_.name());
  if (reports_ && be_.fuse())
    log_info("# fusion: " + std::to_string(model_.fused_layers()) +
             " layers run inside another (relu in the conv, add or batchnorm before it, "
             "add + relu in the batchnorm before it), " +
             std::to_string(model_.in_place_gradient_sums()) + " input gradients summed in place");

  t_start_ = t_log_ = now_seconds();
  log_global_start_ = out_.session_first_step = global_step_;
  eval_bucket_ = c_.eval_every > 0 ? global_step_ / c_.eval_every : 0;
  if (resumed && reports_) recall_before_checkpoint();
  for (int epoch = first_epoch; epoch < c_.epochs; ++epoch) {
    train_epoch(epoch, epoch == first_epoch ? first_step : 0);
    if (!end_epoch(epoch)) break;
  }
  if (first_epoch >= c_.epochs) {
    // --resume of a run whose training ended but that wrote no results.json for it (stopped
    // while it finished; a complete run is not resumed, see nothing_left_to_train()): nothing
    // left to train, but report the model's test metrics instead of zeros (every worker takes
    // this branch: first_epoch is shared; metrics.csv has the row already).
    out_.epochs_done = c_.epochs;
    evaluate(c_.epochs - 1);
  }
  profile(-1);
  exchange_->settle(model_);
  exchange_->finish();
  out_.global_step = global_step_;
  out_.wall_seconds = prior_wall_ + now_seconds() - t_start_;
  out_.train_seconds = train_seconds_;
  out_.data_seconds = data_seconds_;
  read_device_compute();  // the last step timed on the device
  out_.compute_seconds = compute_seconds_;
  out_.exchange_seconds = exchange_seconds_;
  out_.optimizer_seconds = optimizer_seconds_;
  out_.skipped = exchange_->skipped_steps();
  out_.push_bytes_per_step = exchange_->push_bytes_per_step();
  out_.allreduce = exchange_->allreduce_algorithm();
  // A pipeline's stages each sum among their replicas: the run's algorithm is all of theirs.
  if (pipe_ != nullptr && !out_.allreduce.empty())
    out_.allreduce = algorithms_of_all(cluster_.role_comm(), pipe_->pipe(), out_.allreduce);
  if (!exchange_->lockstep()) {
    // Each ps worker skips its own pushes: the run's count is the sum (allreduce: all agree).
    double skipped = static_cast<double>(out_.skipped);
    worker_sum(cluster_.role_comm(), &skipped, 1);
    out_.skipped = static_cast<std::int64_t>(skipped);
  }
  sum_input_counts();  // every worker reaches this point
  out_.stopped_by = stop_signal_ ? "signal" : (stop_max_ ? "max_steps" : "completed");
  summarize_step_times();
  return out_;
}

void Worker::recall_before_checkpoint() {
  // Reached before the interruption? metrics.csv holds every evaluation up to the checkpoint.
  if (c_.target_accuracy > 0)
    if (const auto row = first_test_reaching(c_.run_dir, c_.target_accuracy, global_step_)) {
      out_.time_to_accuracy = row->wall_seconds;
      out_.step_at_accuracy = row->global_step;
    }
  // The last training interval, in case this session measures none (it only evaluates).
  if (const auto row = last_row(c_.run_dir, "train", global_step_)) {
    out_.train_loss = row->loss;
    out_.train_accuracy = row->accuracy;
    out_.train_measured = true;
  }
  if (const auto row = last_row(c_.run_dir, "test", global_step_)) {
    out_.test_loss = row->loss;  // in case this session evaluates none (stopped before)
    out_.test_accuracy = row->accuracy;
    out_.test_top5 = row->top5;
    out_.test_measured = true;
    if (row->global_step == global_step_) recorded_eval_step_ = global_step_;
  }
}

void Worker::meet_at_epoch_end(int epoch, double* v, int n) {
  // Async workers (SSP too: up to --max-staleness steps ahead) train their own shards at their
  // own speeds: one that ends its epoch first waits for the others as long as they push (the
  // global step moves), however long an epoch that is. Not pipelined: its stages' refresh() is
  // itself collective.
  const ExchangeKind kind = exchange_kind(c_);
  if ((kind != ExchangeKind::ps_async && kind != ExchangeKind::ps_bounded) || pipe_ != nullptr)
    return worker_sum(cluster_.role_comm(), v, n);
  MPI_Request req;
  DT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, cluster_.role_comm(), &req));
  // SSP: global_step_ is this worker's clock, up to --max-staleness steps ahead of the ps's step;
  // the first pull (held until the ps is that close) is the first move.
  std::int64_t seen =
      kind == ExchangeKind::ps_bounded ? std::numeric_limits<std::int64_t>::min() : global_step_;
  const auto moved = [&] {
    const ExchangeResult r = exchange_->refresh(model_);  // a pull: the global step now
    out_.samples += r.samples;
    const bool more = r.global_step > seen;
    seen = std::max(seen, r.global_step);
    return more;
  };
  const double t0 = now_seconds();
  wait_one_while_moving(req, comm_timeout(), std::min(comm_timeout() / 4, 10.0), moved,
                        "the workers' meeting at the end of epoch " + std::to_string(epoch + 1) +
                            " (the global step stopped moving: a worker still training its "
                            "shard is stuck or died)");
  if (const double waited = now_seconds() - t0; reports_ && waited >= 1.0) {
    char line[160];
    std::snprintf(line, sizeof line,
                  "# epoch %d: the chief waited %.1f s for slower workers to end their shards",
                  epoch + 1, waited);
    log_info(line);
  }
}

bool Worker::end_epoch(int epoch) {
  // Agree on why we stopped (async workers leave their loops at different points), and
  // whether every worker finished the epoch.
  double flags[4] = {stop_signal_ ? 1.0 : 0.0, stop_max_ ? 1.0 : 0.0,
                     exchange_->epoch_over(epoch, cursor_, global_step_) ? 1.0 : 0.0, 1.0};
  meet_at_epoch_end(epoch, flags, 4);
  stop_signal_ = flags[0] > 0;
  stop_max_ = flags[1] > 0;
  // --max-steps at an epoch's last step ends the epoch as usual: evaluated, then checkpointed
  // as the next epoch's start, so that a resumed run neither evaluates nor saves it again.
  const bool mid_epoch = stop_signal_ || (stop_max_ && flags[2] < flags[3]);
  if (mid_epoch) {
    gather_cursors();
    checkpointer_->at_stop(position(epoch), stop_signal_);
    if (stop_signal_) return false;  // leave quickly: no evaluation
  }
  average_model_state();
  const ExchangeResult fresh = exchange_->refresh(model_);
  global_step_ = fresh.global_step;
  out_.samples += fresh.samples;
  if (mid_epoch) checkpointer_->after_averaging(position(epoch));
  evaluate(epoch, !mid_epoch);  // --max-steps inside an epoch: "epoch N eval", not "done"
  if (stop_signal_) {
    // A signal left the evaluation off: checkpoint the epoch's end as it stands (a resumed run
    // evaluates it then), unless saved above.
    checkpointer_->at_stop(position(epoch), true);
    return false;
  }
  if (mid_epoch) return false;
  out_.epochs_done = epoch + 1;
  checkpointer_->at_epoch_end({global_step_, epoch + 1, 0});
  return !stop_max_;
}

void Worker::train_epoch(int epoch, std::int64_t first_step) {
  // The log interval starts with the epoch: the last epoch's evaluation and checkpoint (and an
  // async chief's wait for the others to end their shards) are no training time, as an
  // --eval-every evaluation inside an epoch is not (end_step()).
  start_log_interval(now_seconds());
  const std::int64_t start = std::min<std::int64_t>(first_step, exchange_->local_steps(epoch));
  std::optional<BatchReader> reader;  // none for synthetic data
  if (!plan_.synthetic) open_reader(reader, epoch, start);
  HostBatch batch;
  cursor_ = start;
  worker_steps_.clear();  // mid-epoch checkpoints are the chief's alone: its position for all
  for (std::int64_t s = start; !exchange_->epoch_over(epoch, s, global_step_); ++s) {
    if (c_.max_steps > 0 && global_step_ >= c_.max_steps) {
      stop_max_ = true;
      break;
    }
    profile(global_step_);
    StepTimes t;
    t.start = now_seconds();
    const int n = next_batch(reader, batch, s);
    t.data_done = now_seconds();
    const bool stop_local = stop_requested();
    // The ps modes: this step's loss sums may belong to a push the stop leaves unapplied.
    float sums_before[kStatsFloats] = {};
    if (!exchange_->lockstep()) be_.copy_to_host(sums_before, stats_.data(), sizeof sums_before);
    const bool on_device = compute_step(s, n, stop_local, t.data_done);
    t.compute_done = now_seconds();
    const ExchangeResult r = exchange_->step(model_, s, n, stop_local);
    t.exchange_done = now_seconds();
    // A batch the ps did not apply because the run ends is not part of the run: no train row
    // (its loss, and a second row at the same global step), and a resumed run trains it.
    if (past_the_end(r)) be_.copy_to_device(stats_.data(), sums_before, sizeof sums_before);
    account_step(r, s, n, on_device, t);
    if (r.stop) {
      stop_signal_ = true;
      break;
    }
    end_step(epoch, s);
  }
  if (c_.max_steps > 0 && global_step_ >= c_.max_steps) stop_max_ = true;
  if (reader) train_bad_images_ += reader->bad_images();
  out_.train_peak_rss_mib = peak_rss_mib();
  if (log_steps_ > 0) log_interval(epoch);
}

void Worker::gather_cursors() {
  // Async workers each train their own shard at their own pace; the others (sync, SSP) share
  // the chief's position. A pipeline's replicas share out the data: not tracked per replica.
  if (exchange_kind(c_) != ExchangeKind::ps_async || pipe_ != nullptr) return;
  worker_steps_.assign(cluster_.is_chief() ? static_cast<std::size_t>(plan_.workers) : 0, 0);
  MPI_Request req;
  DT_CHECK_MPI(MPI_Igather(&cursor_, 1, MPI_INT64_T, worker_steps_.data(), 1, MPI_INT64_T, 0,
                           cluster_.role_comm(), &req));
  wait_one(req, comm_timeout(), "gathering the workers' positions for a stop checkpoint");
}

void Worker::sum_input_counts() {
  const EncodedCache* cache = encoded_cache_.get();
  double counts[5] = {static_cast<double>(out_.bad_images + train_bad_images_),
                      cache ? static_cast<double>(cache->hits()) : 0.0,
                      cache ? static_cast<double>(cache->misses()) : 0.0,
                      static_cast<double>(applied_samples_),
                      static_cast<double>(train_bad_images_)};
  worker_sum(cluster_.role_comm(), counts, 5);
  out_.bad_images = static_cast<std::int64_t>(counts[0]);
  // Async, and sync through the ps: the samples of the pushes the ps applied, not global steps ×
  // the batch (a shard's last batch is short; with backup workers, late pushes are dropped). A
  // pipeline: role_comm() is the stage's replicas, and the chief's stage (the last) counts the
  // pushes its ps applied, as its rate does (summarize_step_times()).
  const ExchangeKind kind = exchange_kind(c_);
  if (kind == ExchangeKind::ps_async || kind == ExchangeKind::ps_sync)
    out_.samples = static_cast<std::int64_t>(counts[3]);
  // Sync allreduce counts whole batches: the training images --on-bad-image skip left out were
  // not trained (out_.bad_images also counts the evaluation's skips).
  if (exchange_kind(c_) == ExchangeKind::allreduce && pipe_ == nullptr)
    out_.samples = std::max<std::int64_t>(0, out_.samples - static_cast<std::int64_t>(counts[4]));
  if (out_.bad_images > 0 && reports_)
    log_warn(
        "# bad images skipped: " + std::to_string(out_.bad_images) +
        " (corrupt or truncated encoded images left out of their batches; --on-bad-image skip)");
  if (cache == nullptr) return;
  out_.encoded_cache_rows = cache->rows();
  out_.encoded_cache_mb = static_cast<double>(cache->bytes()) / (1 << 20);
  out_.encoded_cache_hits = static_cast<std::int64_t>(counts[1]);
  out_.encoded_cache_misses = static_cast<std::int64_t>(counts[2]);
  const double reads = counts[1] + counts[2];
  char line[256];
  std::snprintf(line, sizeof line,
                "# encoded cache (--cache-mb %lld): %lld of %lld rows, %.1f MiB per worker; %lld "
                "of %lld training reads from memory (%.1f %%)",
                static_cast<long long>(c_.cache_mb), static_cast<long long>(cache->rows()),
                static_cast<long long>(plan_.train.num_samples), out_.encoded_cache_mb,
                static_cast<long long>(counts[1]), static_cast<long long>(reads),
                reads > 0 ? 100.0 * counts[1] / reads : 0.0);
  if (reports_) log_info(line);
}

void Worker::open_reader(std::optional<BatchReader>& reader, int epoch, std::int64_t start) {
  auto indices =
      epoch_shard(plan_.train.num_samples, c_.seed, epoch, w_, plan_.workers, c_.shuffle);
  const auto my_batches =
      static_cast<std::int64_t>((indices.size() + plan_.batch - 1) / plan_.batch);
  reader.emplace(plan_.train, std::move(indices), plan_.batch, 2,
                 std::min<std::int64_t>(start, my_batches),
                 Augmentation{c_.random_crop, c_.random_flip, c_.seed, epoch},
                 static_cast<std::size_t>(c_.cache_mb) << 20, encoded_cache_.get(),
                 train_upload_->uint8_batches());
}

int Worker::next_batch(std::optional<BatchReader>& reader, HostBatch& batch, std::int64_t s) {
  const TimelineSpan span("data wait", "data");
  if (!reader) {  // synthetic: the batch is on the device; this step's share of the shard
    const std::int64_t my_samples = shard_size(plan_.train.num_samples, w_, plan_.workers);
    return static_cast<int>(std::clamp<std::int64_t>(my_samples - s * plan_.batch, 0, plan_.batch));
  }
  if (!reader->next(batch)) return 0;  // sync: a shorter shard may run out one step early
  upload(*train_upload_, batch);
  return batch.n;
}

void Worker::upload(BatchUpload& up, const HostBatch& batch) {
  up(batch, x_.data(), y_.data());
  model_.set_input_form(up.form());
}

bool Worker::compute_step(std::int64_t s, int n, bool stop_local, double t1) {
  const float scale = exchange_->gradient_scale(s, n);
  const std::uint64_t key =
      mix_seed(mix_seed(c_.seed, static_cast<std::uint64_t>(global_step_)), w_);
  GradsFinal on_final = exchange_->begin_step(model_, s, n, stop_local);
  // DTRAIN_FAULT nan: the NaN must be in the gradient before its bucket leaves (test-only).
  const bool nan_fault = fault_fires(FaultKind::nan_gradient, global_step_);
  if (nan_fault && on_final) {
    on_final = [this, next = std::move(on_final), done = false](std::size_t from) mutable {
      if (!done && from <= model_.param_tensors().back().offset) {
        inject_nan_gradient();
        done = true;
      }
      next(from);
    };
  }
  // GPU calls return once queued. Where the exchange waits for the device anyway, wait for the
  // step's kernels first, so that compute time is not billed to the exchange; where it only
  // queues work, time the step on the device and read it one step late: the host never
  // stalls the device, which always has the next step queued.
  const bool on_device = be_.device() == Device::cuda && !exchange_->waits_for_device();
  const int mark = device_compute_at_ == 0 ? 2 : 0;  // the pair the unread step does not hold
  if (on_device) be_.mark(mark);
  if (runner_) runner_->train_step(x_.data(), y_.data(), n, scale, key, stats_.data(), on_final);
  else
    model_.train_step_micro(x_.data(), y_.data(), n, c_.micro_batches, scale, key, stats_.data(),
                            on_final);
  if (nan_fault && !on_final) inject_nan_gradient();
  inject_faults(now_seconds() - t1);
  if (on_device) {
    be_.mark(mark + 1);
    read_device_compute();  // the step before
    device_compute_at_ = mark;
    device_read_ = false;
  } else if (be_.device() == Device::cuda) {
    be_.synchronize();
  }
  return on_device;
}

bool Worker::past_the_end(const ExchangeResult& r) const {
  return r.dropped && (r.stop || (c_.max_steps > 0 && r.global_step >= c_.max_steps));
}

void Worker::account_step(const ExchangeResult& r, std::int64_t s, int n, bool on_device,
                          const StepTimes& t) {
  data_seconds_ += t.data_done - t.start;
  if (!on_device) compute_seconds_ += t.compute_done - t.data_done;
  exchange_seconds_ += t.exchange_done - t.compute_done - r.optimizer_seconds;
  optimizer_seconds_ += r.optimizer_seconds;
  global_step_ = r.global_step;
  // A batch the ps did not use (ExchangeResult::dropped) stays ahead of the position, so that a
  // resumed run trains it (a sync worker's late batch: the checkpoint takes the ps's step).
  cursor_ = r.dropped ? s : s + 1;
  staleness_sum_ += r.staleness;
  ++pushes_;
  train_seconds_ += now_seconds() - t.start;
  step_ms_.push_back(static_cast<float>(1e3 * (t.exchange_done - t.start)));
  const bool in_run = !past_the_end(r);  // see train_epoch()
  log_steps_ += in_run ? 1 : 0;
  log_samples_local_ += in_run ? n : 0;
  // An SSP stop takes back the steps the worker's clock had counted past the ps's (r.samples < 0):
  // the run's count, not an interval's rate.
  log_samples_global_ += std::max<std::int64_t>(r.samples, 0);
  out_.samples += r.samples;
  if (r.applied) applied_samples_ += n;
  if (pushes_ == 1) {
    first_[0] = train_seconds_;
    first_[1] = data_seconds_;
    if (!on_device) first_[2] = compute_seconds_;  // else when its device time is read
    first_[3] = exchange_seconds_;
    first_[4] = optimizer_seconds_;
    first_applied_samples_ = applied_samples_;
  }
}

void Worker::end_step(int epoch, std::int64_t s) {
  // Every --log-every steps of the epoch, counted from its start (s is the step in the epoch),
  // so that a resumed run logs at the same steps as one that never stopped.
  if ((s + 1) % c_.log_every == 0 || log_steps_ >= c_.log_every) log_interval(epoch);
  // The last step of the epoch or of the run: the epoch-end (or stop) checkpoint and evaluation
  // follow, so a checkpoint or evaluation due now waits for them.
  const bool last = exchange_->epoch_over(epoch, s + 1, global_step_) ||
                    (c_.max_steps > 0 && global_step_ >= c_.max_steps);
  const double t0 = now_seconds();
  checkpointer_->after_step(position(epoch), last);
  log_paused_ += now_seconds() - t0;  // a checkpoint is no step time (log_interval())
  if (c_.eval_every <= 0 || global_step_ / c_.eval_every <= eval_bucket_) return;
  eval_bucket_ = global_step_ / c_.eval_every;
  if (!last) evaluate_between(epoch);
}

void Worker::read_device_compute() {
  if (device_compute_at_ < 0 || device_read_) return;
  compute_seconds_ += be_.seconds_between(device_compute_at_, device_compute_at_ + 1);
  device_read_ = true;
  if (++device_reads_ == 1) first_[2] = compute_seconds_;
}

void Worker::profile(std::int64_t global_step) {
  const bool on = profile_.contains(global_step);
  if (on == profiling_) return;
  be_.set_profiling(on);
  profiling_ = on;
}

void Worker::inject_nan_gradient() {
  const auto& t = model_.param_tensors().back();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  be_.copy_to_device(model_.grads() + t.offset, &nan, sizeof nan);
  log_warn("DTRAIN_FAULT: injected a NaN into the gradient of " + t.name + " at global step " +
           std::to_string(global_step_));
}

void Worker::inject_faults(double step_seconds) {
  // Test-only hooks (DTRAIN_FAULT, core/fault.hpp): one comparison each when no fault is set.
  if (const double extra = (fault_slowdown() - 1) * step_seconds + fault_delay(); extra > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(extra));
  if (fault_fires(FaultKind::hang, global_step_))
    hang_forever("the worker at global step " + std::to_string(global_step_));
}

}  // namespace dtrain
