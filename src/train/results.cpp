// dtrain/train/results.cpp — the end of a run: the ps counters and the workers' peak memory
// reach the chief in one reduction, which writes results.json and the closing log line.
#include <algorithm>
#include <cstdio>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/train/report.hpp"
#include "job.hpp"
#include "worker.hpp"

namespace dtrain {
namespace {

// Layout of the reduced vector: scalars, then the histogram, then two per-worker lists.
enum Slot {
  kPushes,
  kUpdates,
  kIgnored,
  kDropped,
  kStaleSum,
  kStaleMax,
  kBusy,
  kOptimizer,
  kRss,
  kTrainRss,
  kSharedRing,
  kScalars
};

std::string format_seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

std::vector<std::int64_t> as_counts(const std::vector<double>& v, std::size_t at, std::size_t n) {
  std::vector<std::int64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::int64_t>(v[at + i]);
  return out;
}

}  // namespace

RunStats gather_run_stats(const Job& job, const PsStats* ps, const WorkerOutcome* worker) {
  const Cluster& cl = *job.cluster;
  // Per worker: the ps see the workers (a pipeline: each stage's ps its D replicas).
  const auto W = static_cast<std::size_t>(job.plan.workers);
  const auto K = static_cast<std::size_t>(cl.num_ps());
  std::vector<double> v(kScalars + kStalenessBins + 2 * W + K, 0.0);
  const std::size_t per_ps = kScalars + kStalenessBins + 2 * W;  // each ps's updates from here
  if (ps)
    for (std::size_t k = 0; k < K; ++k)
      if (cl.ps_rank(static_cast<int>(k)) == cl.world_rank())
        v[per_ps + k] = static_cast<double>(ps->updates);
  // The counts of pushes are ps 0's: with backup workers a gradient can join one shard's update
  // and come too late for another's, so the ps ranks' counts differ and none other adds up.
  if (ps && cl.world_rank() == cl.ps_rank(0)) {
    v[kPushes] = static_cast<double>(ps->pushes);
    v[kUpdates] = static_cast<double>(ps->updates);
    v[kIgnored] = static_cast<double>(ps->ignored);
    v[kDropped] = static_cast<double>(ps->dropped);
    v[kStaleSum] = static_cast<double>(ps->staleness_sum);
    v[kStaleMax] = static_cast<double>(ps->staleness_max);
    v[kSharedRing] = static_cast<double>(ps->shared_ring_pushes);
    for (int b = 0; b < kStalenessBins; ++b)
      v[kScalars + b] = static_cast<double>(ps->staleness_histogram[b]);
    for (std::size_t w = 0; w < W; ++w) {
      v[kScalars + kStalenessBins + w] = static_cast<double>(ps->worker_pushes[w]);
      v[kScalars + kStalenessBins + W + w] = static_cast<double>(ps->worker_dropped[w]);
    }
  }
  if (ps) {  // the busiest ps
    v[kBusy] = ps->busy_seconds / std::max(ps->wall_seconds, 1e-9);
    v[kOptimizer] = ps->optimizer_seconds / std::max(ps->wall_seconds, 1e-9);
  }
  if (worker) {
    v[kRss] = peak_rss_mib();
    v[kTrainRss] = worker->train_peak_rss_mib;
  }
  // Max over ranks: ps 0 alone contributes counts, every ps its busy fractions, workers memory.
  const int root = cl.worker_rank(0);
  const bool at_root = cl.world_rank() == root;
  MPI_Request req;
  DT_CHECK_MPI(MPI_Ireduce(at_root ? MPI_IN_PLACE : v.data(), v.data(), static_cast<int>(v.size()),
                           MPI_DOUBLE, MPI_MAX, root, cl.world(), &req));
  wait_one(req, comm_timeout(), "reduce of the run's statistics to the chief");
  RunStats st;
  st.ps.pushes = static_cast<std::int64_t>(v[kPushes]);
  st.ps.updates = static_cast<std::int64_t>(v[kUpdates]);
  st.ps.ignored = static_cast<std::int64_t>(v[kIgnored]);
  st.ps.dropped = static_cast<std::int64_t>(v[kDropped]);
  st.ps.staleness_sum = static_cast<std::int64_t>(v[kStaleSum]);
  st.ps.staleness_max = static_cast<std::int64_t>(v[kStaleMax]);
  st.ps.busy_seconds = v[kBusy];            // as a fraction of the ps's wall time
  st.ps.optimizer_seconds = v[kOptimizer];  // likewise
  st.ps.wall_seconds = 1;
  st.ps.shared_ring_pushes = static_cast<std::int64_t>(v[kSharedRing]);
  st.ps.staleness_histogram = as_counts(v, kScalars, kStalenessBins);
  st.ps.worker_pushes = as_counts(v, kScalars + kStalenessBins, W);
  st.ps.worker_dropped = as_counts(v, kScalars + kStalenessBins + W, W);
  st.updates_per_ps = as_counts(v, per_ps, K);
  st.peak_rss_mb = v[kRss];
  st.train_peak_rss_mb = v[kTrainRss];
  return st;
}

namespace {

using Results = std::map<std::string, JsonValue>;

/// What the run reached and how long it took: accuracy, loss, steps, times, the step anatomy.
/// null where nothing was measured: the test metrics without an evaluation (no test set, or
/// stopped before the first), the train metrics
/// without a measured interval, the throughput and step times of a session that trained no step
/// (a --resume that only evaluated).
void add_outcome(Results& r, const TrainPlan& plan, const WorkerOutcome& out) {
  const JsonValue null{std::monostate{}};
  const auto or_null = [&](bool known, double v) { return known ? JsonValue(v) : null; };
  r["test_accuracy"] = or_null(out.test_measured, out.test_accuracy);
  r["test_top5"] = or_null(out.test_measured, out.test_top5);
  r["test_loss"] = or_null(out.test_measured, out.test_loss);
  r["train_loss"] = or_null(out.train_measured, out.train_loss);
  r["train_accuracy"] = or_null(out.train_measured, out.train_accuracy);
  r["epochs"] = static_cast<double>(out.global_step) / static_cast<double>(plan.steps_per_epoch);
  r["epochs_completed"] = static_cast<std::int64_t>(out.epochs_done);
  r["global_step"] = out.global_step;
  // Where this session (process) started: the throughput, time split, step times, samples and
  // the ps's counters are this session's; global_step, epochs, wall_seconds the whole run's.
  r["session_first_step"] = out.session_first_step;
  r["wall_seconds"] = out.wall_seconds;
  r["train_seconds"] = out.train_seconds;
  r["data_seconds"] = out.data_seconds;  // the chief's split of train_seconds
  r["compute_seconds"] = out.compute_seconds;
  r["exchange_seconds"] = out.exchange_seconds;  // exposed communication (not hidden by backward)
  r["optimizer_seconds"] = out.optimizer_seconds;
  // ms per step, averaged over the workers (docs/design.md, "Step anatomy")
  r["step_data_ms"] = or_null(out.train_seconds > 0, out.anatomy_ms[0]);
  r["step_compute_ms"] = or_null(out.train_seconds > 0, out.anatomy_ms[1]);
  r["step_exposed_comm_ms"] = or_null(out.train_seconds > 0, out.anatomy_ms[2]);
  r["step_optimizer_ms"] = or_null(out.train_seconds > 0, out.anatomy_ms[3]);
  r["step_compute_ms_per_worker"] = out.compute_ms_per_worker;  // in worker order
  r["step_exposed_comm_ms_per_worker"] = out.exposed_ms_per_worker;
  // Workers in step: samples over the chief's train_seconds; else the sum of the workers' own rates
  r["samples_per_sec"] = or_null(out.train_seconds > 0, out.samples_per_sec);
  if (out.has_after_first) {  // the same without each process's first step
    r["step_compute_ms_per_worker_after_first_step"] = out.compute_ms_per_worker_after_first;
    r["step_exposed_comm_ms_per_worker_after_first_step"] = out.exposed_ms_per_worker_after_first;
    r["samples_per_sec_after_first_step"] = out.samples_per_sec_after_first;
    r["step_data_ms_after_first_step"] = out.anatomy_after_first_ms[0];
    r["step_compute_ms_after_first_step"] = out.anatomy_after_first_ms[1];
    r["step_exposed_comm_ms_after_first_step"] = out.anatomy_after_first_ms[2];
    r["step_optimizer_ms_after_first_step"] = out.anatomy_after_first_ms[3];
  }
  r["step_ms_p50"] = or_null(out.train_seconds > 0, out.step_ms_p50);  // the slowest worker's
  r["step_ms_p90"] = or_null(out.train_seconds > 0, out.step_ms_p90);
  r["step_ms_max"] = or_null(out.train_seconds > 0, out.step_ms_max);
  r["samples"] = out.samples;
  r["stopped_by"] = out.stopped_by;
  r["skipped_steps"] = out.skipped;
  r["bad_images_skipped"] = out.bad_images;  // encoded images left out (--on-bad-image skip)
  // --cache-mb on an encoded training file (docs/data.md): held per worker, reads of all workers
  r["encoded_cache_rows"] = out.encoded_cache_rows;
  r["encoded_cache_mb"] = out.encoded_cache_mb;
  r["encoded_cache_hits"] = out.encoded_cache_hits;
  r["encoded_cache_misses"] = out.encoded_cache_misses;
}

/// The run's shape: mode, ranks, batch, device and what the workers computed in.
void add_shape(Results& r, const Config& c, const Job& job) {
  const Cluster& cl = *job.cluster;
  r["mode"] = std::string(to_string(c.mode));
  r["exchange"] = std::string(to_string(exchange_kind(c)));
  r["world_size"] = static_cast<std::int64_t>(cl.world_size());
  r["num_ps"] = static_cast<std::int64_t>(job.num_ps);
  r["num_workers"] = static_cast<std::int64_t>(cl.num_workers());
  r["batch_size"] = static_cast<std::int64_t>(job.plan.batch);
  // the chief's decode threads for encoded images (0: the training file holds decoded pixels)
  r["data_threads"] =
      static_cast<std::int64_t>(job.plan.train.encoded ? job.plan.train.decode.threads : 0);
  r["global_batch_size"] = static_cast<std::int64_t>(job.plan.batch * job.plan.workers);
  r["device"] = job.device_name;
  r["precision"] = std::string(to_string(c.precision));  // of the activations (--precision)
  r["layout"] = std::string(job.backend ? layout_name(job.backend->layout())  // as run
                                        : to_string(c.layout));
  // How GPU convolutions chose their algorithms (--cudnn-benchmark: timed).
  r["conv_algorithms"] = std::string(c.cudnn_benchmark ? "benchmark" : "heuristic");
  r["conv_api"] = std::string(to_string(c.conv_api));
  r["fuse"] = std::string(to_string(c.fuse));
  r["wire_dtype"] = std::string(to_string(c.wire_dtype));  // gradients between ranks
  // The chief's GPU memory at its peak (Backend::device_peak_bytes, MiB); 0 on the CPU.
  r["gpu_peak_allocated_mb"] =
      job.backend ? static_cast<double>(job.backend->device_peak_bytes()) / (1 << 20) : 0.0;
}

/// The exchange's view: staleness, the ps's counters (max over ps ranks), sync aggregation.
void add_exchange(Results& r, const Config& c, const Job& job, const WorkerOutcome& out,
                  const RunStats& st) {
  // The ps's mean over the gradients it used, as staleness_max and the histogram (the chief's
  // own mean counted its dropped pushes too); 0 without ps.
  r["staleness_mean"] = st.ps.pushes > 0 ? static_cast<double>(st.ps.staleness_sum) /
                                               static_cast<double>(st.ps.pushes)
                                         : 0.0;
  r["ps_busy_fraction"] = st.ps.busy_seconds;            // 0 without ps
  r["ps_optimizer_fraction"] = st.ps.optimizer_seconds;  // of the ps's wall time, in the updates
  if (job.num_ps > 0) {
    // The ps's view (max over ps ranks): every gradient it used or dropped, per worker.
    r["staleness_max"] = st.ps.staleness_max;
    r["staleness_histogram"] = st.ps.staleness_histogram;  // counts of staleness 0, 1, ..., ≥ 32
    r["ps_updates"] = st.ps.updates;
    r["ps_updates_per_ps"] = st.updates_per_ps;
    r["pushes_per_worker"] = st.ps.worker_pushes;
    r["dropped_per_worker"] = st.ps.worker_dropped;
    r["dropped_gradients"] = st.ps.dropped;
    r["ignored_pushes"] = st.ps.ignored;
    r["ps_shared_ring_pushes"] = st.ps.shared_ring_pushes;  // async pushes through --ps-shm rings
    r["push_bytes_per_step"] = out.push_bytes_per_step;     // the chief's, all ps together
  } else {
    r["staleness_max"] = std::int64_t{0};
  }
  // The sync allreduce as it ran (--allreduce auto's choice): hierarchical, mpi, nccl or none.
  if (!out.allreduce.empty()) r["allreduce"] = out.allreduce;
  if (exchange_kind(c) == ExchangeKind::ps_sync)
    r["replicas_to_aggregate"] = static_cast<std::int64_t>(
        c.replicas_to_aggregate > 0 ? c.replicas_to_aggregate : job.plan.workers);
  if (exchange_kind(c) == ExchangeKind::ps_bounded)
    r["max_staleness"] = static_cast<std::int64_t>(c.max_staleness);
}

/// Memory, the inputs and the time to --target-accuracy.
void add_memory_and_inputs(Results& r, const Config& c, const Job& job, const WorkerOutcome& out,
                           const RunStats& st) {
  r["peak_rss_mb"] = st.peak_rss_mb;              // the whole run, checkpoint writes included
  r["train_peak_rss_mb"] = st.train_peak_rss_mb;  // up to the end of the last training step
  r["activation_mb"] = static_cast<double>(job.activation_bytes) / (1 << 20);
  r["config_file"] = c.config_file;
  r["train_data"] = job.plan.synthetic ? job.plan.train.path : c.train_data;
  if (c.target_accuracy > 0) {  // null when never reached
    r["target_accuracy"] = c.target_accuracy;
    const bool reached = out.step_at_accuracy >= 0;
    const JsonValue null{std::monostate{}};
    r["time_to_accuracy_seconds"] = reached ? JsonValue(out.time_to_accuracy) : null;
    r["step_at_accuracy"] = reached ? JsonValue(out.step_at_accuracy) : null;
  }
}

/// The ps line (with ps) and the closing summary line of the chief's log.
void log_summary(const Config& c, const Job& job, const WorkerOutcome& out, const RunStats& st) {
  char line[320];
  if (job.num_ps > 0) {  // the ps side of the step anatomy (its updates are not in the workers')
    std::snprintf(
        line, sizeof line,
        "# ps (max over ps ranks): busy %.1f%% of its wall time, %.1f%% in the optimizer; "
        "%lld pushes through shared rings",
        100 * st.ps.busy_seconds, 100 * st.ps.optimizer_seconds,
        static_cast<long long>(st.ps.shared_ring_pushes));
    log_info(line);
  }
  char test[80] = "no test set", speed[40] = "no step trained";
  if (!out.test_measured && job.plan.has_test) std::snprintf(test, sizeof test, "not evaluated");
  if (out.test_measured)
    std::snprintf(test, sizeof test, "test accuracy %.4f | test loss %.4f", out.test_accuracy,
                  out.test_loss);
  if (out.train_seconds > 0)
    std::snprintf(speed, sizeof speed, "%.1f samples/s", out.samples_per_sec);
  std::snprintf(line, sizeof line,
                "dtrain: %s %d ps + %d workers | %d epochs, %lld steps | %s | %s | wall %s | "
                "results %s/results.json",
                std::string(to_string(c.mode)).c_str(), job.num_ps, job.cluster->num_workers(),
                out.epochs_done, static_cast<long long>(out.global_step), test, speed,
                format_seconds(out.wall_seconds).c_str(), c.run_dir.c_str());
  log_info(line);
}

}  // namespace

void write_results(const Config& c, const Job& job, const WorkerOutcome& out, const RunStats& st) {
  Results r;
  add_outcome(r, job.plan, out);
  add_shape(r, c, job);
  add_exchange(r, c, job, out, st);
  add_memory_and_inputs(r, c, job, out, st);
  add_provenance(r, job.provenance);
  write_results_json(c.run_dir, r);
  log_summary(c, job, out, st);
}

}  // namespace dtrain
