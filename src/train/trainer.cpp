// dtrain/train/trainer.cpp — job set-up shared by every rank (plan, roles, device, resume point),
// then the ps loop or the worker loop, then the chief's results.json.
#include "dtrain/train/trainer.hpp"

#include <omp.h>
#include <sched.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/comm/guard.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/io/checkpoint.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/server.hpp"
#include "dtrain/train/provenance.hpp"
#include "dtrain/train/signals.hpp"
#include "worker.hpp"

namespace fs = std::filesystem;

namespace dtrain {

TrainPlan make_plan(const Config& c, int workers) {
  TrainPlan p;
  p.workers = workers;
  if (c.global_batch_size > 0) {
    DT_REQUIRE(c.global_batch_size % workers == 0,
               "option --global-batch-size: " + std::to_string(c.global_batch_size) +
                   " does not split evenly over " + std::to_string(workers) + " workers");
    p.batch = c.global_batch_size / workers;
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
  }
  check_dataset_fits(p.train, workers, p.batch);
  DT_REQUIRE(c.random_crop <= std::min(p.train.sample.h, p.train.sample.w),
             "option --random-crop " + std::to_string(c.random_crop) + ": pads by more than the " +
                 std::to_string(p.train.sample.h) + "x" + std::to_string(p.train.sample.w) +
                 " images of " + p.train.path);
  if (!c.test_data.empty()) {
    p.test = open_dataset_info(c.test_data, p.train.num_classes);
    DT_REQUIRE(p.test.sample == p.train.sample,
               "--test-data '" + c.test_data + "': images are " + p.test.sample.str() +
                   " per sample but the training set's are " + p.train.sample.str());
    DT_REQUIRE(p.test.num_samples >= workers,
               "--test-data '" + c.test_data + "': fewer samples than workers");
    p.has_test = true;
  }
  DT_REQUIRE(p.has_test || (c.eval_every == 0 && c.target_accuracy == 0),
             "options --eval-every / --target-accuracy: need a test set (--test-data)");
  for (int w = 0; w < workers; ++w) p.steps_per_epoch += worker_steps_per_epoch(p, c.mode, w);
  if (c.mode == "sync") p.steps_per_epoch = worker_steps_per_epoch(p, c.mode, 0);
  p.total_steps = p.steps_per_epoch * c.epochs;
  if (c.max_steps > 0) p.total_steps = std::min(p.total_steps, c.max_steps);
  return p;
}

std::int64_t worker_steps_per_epoch(const TrainPlan& p, const std::string& mode, int worker) {
  // Sync: every worker takes as many steps as the largest shard needs (worker 0's), so that all
  // samples are used; a shorter shard contributes an empty batch to the last step.
  const int w = mode == "sync" ? 0 : worker;
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

void set_threads(const Config& c, const Cluster& cluster) {
  // The launcher may pin this rank to a few cores (Open MPI binds each rank to one core when
  // -np <= 2): never start more threads than the cores this rank may run on, unless asked to.
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const int allowed = sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : 0;
  int threads = c.threads;
  if (threads == 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / cluster.me().local_size);
    if (allowed > 0) threads = std::min(threads, allowed);
  } else if (allowed > 0 && threads > allowed && !cluster.is_ps()) {
    log_warn("--threads " + std::to_string(threads) + " but the launcher bound this rank to " +
             std::to_string(allowed) + " core(s): the threads will share them (use mpirun "
             "--bind-to none, or srun --cpus-per-task)");
  }
  if (cluster.is_ps()) threads = 1;
  omp_set_num_threads(threads);
}

std::unique_ptr<Backend> make_backend(const Config& c, const Cluster& cluster, std::string& name) {
  bool want_gpu = c.device == "cuda" || (c.device == "auto" && cuda_available());
  if (cluster.is_ps() || !want_gpu) {
    name = "cpu";
    return cluster.is_ps() ? nullptr : make_cpu_backend();
  }
  DT_REQUIRE(cuda_available(), "option --device cuda: no CUDA device on host " +
                                   cluster.me().host +
                                   (cuda_device_count() == 0 ? " (or dtrain built without CUDA)" : ""));
  // Workers on this node, numbered by world rank: the node-local worker rank picks the GPU.
  int local = 0, local_workers = 0;
  for (const auto& r : cluster.ranks()) {
    if (r.node != cluster.me().node || r.role != Role::worker) continue;
    if (r.rank < cluster.world_rank()) ++local;
    ++local_workers;
  }
  const int gpu = select_gpu_for_local_rank(local, local_workers, c.allow_gpu_sharing);
  name = "cuda:" + std::to_string(gpu);
  return make_cuda_backend(gpu);
}

namespace {

/// "# train FILE (N samples), test FILE, batch B per worker, S global steps per epoch, T in total"
/// (--synthetic: "# train synthetic CxHxW:K (N samples per epoch from ...), test the same batches").
std::string describe_plan(const TrainPlan& plan) {
  const std::string train =
      plan.synthetic ? " samples per epoch from one random batch per worker in device memory, no I/O)"
                     : " samples)";
  const std::string test =
      plan.synthetic ? "the same batches (" + std::to_string(plan.test.num_samples) + " samples)"
                     : (plan.has_test ? plan.test.path : "none");
  return "# train " + plan.train.path + " (" + std::to_string(plan.train.num_samples) + train +
         ", test " + test + ", batch " + std::to_string(plan.batch) + " per worker, " +
         std::to_string(plan.steps_per_epoch) + " global steps per epoch, " +
         std::to_string(plan.total_steps) + " in total";
}

std::string format_seconds(double s) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << s << " s";
  return os.str();
}

}  // namespace

int run_training(const Config& c) {
  install_signal_handlers();
  set_comm_timeout(c.timeout);
  MPI_Comm world = MPI_COMM_WORLD;
  int world_size = 1, world_rank = 0;
  MPI_Comm_size(world, &world_size);
  MPI_Comm_rank(world, &world_rank);

  const int num_ps = c.mode == "sync" ? 0 : c.num_ps;
  std::unique_ptr<Cluster> cluster;
  TrainPlan plan;
  std::unique_ptr<Backend> backend;
  std::string device_name;
  std::size_t param_count = 0, activation_bytes = 0;
  std::string signature;
  std::string model_report;         // layer table and shard table, printed by the chief
  std::vector<ShardRange> shards;   // async: this run's ps ranges
  std::vector<FloatRange> ps_no_decay;  // async ps: its shard's ranges without weight decay
  // Phase 1 — checks every rank makes identically (options, datasets, model, shards).
  all_or_nothing(world, [&] {
    DT_REQUIRE(!(c.mode == "sync" && c.num_ps > 0),
               "option --num-ps: sync mode averages gradients with allreduce and uses no "
               "parameter server; pass --num-ps 0 (got " + std::to_string(c.num_ps) + ")");
    cluster = std::make_unique<Cluster>(world, num_ps);  // deterministic throws only
    set_error_context("rank " + std::to_string(world_rank) + " " +
                      (cluster->is_ps() ? "ps " : "worker ") +
                      std::to_string(cluster->me().index) + " " + cluster->me().host);
    plan = make_plan(c, cluster->num_workers());
    const Model layout(c.layers, plan.train.sample, plan.train.num_classes, plan.batch);
    param_count = layout.param_count();
    activation_bytes = layout.activation_bytes();
    signature = layout.signature();
    model_report = layout.summary();
    if (num_ps > 0) {
      shards = shard_ranges(param_count, num_ps);
      model_report += describe_shards(shards, layout.param_tensors());
      if (cluster->is_ps()) {
        const ShardRange& mine = shards[cluster->me().index];
        ps_no_decay = no_decay_ranges(c, layout.param_tensors(), mine.begin, mine.end);
      }
    }
  });
  if (c.dry_run) {
    // Everything above is what a real run checks before it touches a device or the run dir.
    if (world_rank == 0)
      log_info("# dtrain --dry-run of " + (c.config_file.empty() ? "the command line" : c.config_file) +
               ": the job is valid\n" + cluster->role_table() + "\n" + model_report + "\n" +
               describe_plan(plan));
    return kExitOk;
  }
  // Phase 2 — per-rank resources (device) and the chief's run directory and resume point.
  std::optional<CheckpointState> resume;
  all_or_nothing(world, [&] {
    set_threads(c, *cluster);
    backend = make_backend(c, *cluster, device_name);
    if (backend) backend->set_label_smoothing(c.label_smoothing);  // before the model's loss ops
    if (!cluster->is_chief()) return;
    prepare_run_dir(c.run_dir);
    const auto existing = list_checkpoints(c.run_dir);
    if (c.resume) {
      resume = load_latest_checkpoint(c.run_dir);
      if (resume)
        // Name the checkpoint actually read: a corrupt newer one may have been skipped.
        check_checkpoint_compatible(*resume, checkpoint_path(c.run_dir, resume->global_step),
                                    signature, c.mode, param_count);
      else if (!existing.empty())
        // Every checkpoint failed to verify (each was reported above): starting over would bury
        // them under new ones, so refuse and leave the run dir as it is.
        throw InputError("--resume: none of the " + std::to_string(existing.size()) +
                         " checkpoints in '" + c.run_dir + "' verifies (newest: '" +
                         existing.front() + "'; see the warnings above); nothing was overwritten");
      else
        log_warn("--resume: no checkpoint in '" + c.run_dir + "', starting from scratch");
    } else {
      DT_REQUIRE(existing.empty() && !fs::exists(fs::path(c.run_dir) / "results.json"),
                 "option --run-dir: '" + c.run_dir +
                     "' already holds a run (checkpoints or results.json); pass --resume to "
                     "continue it or choose another --run-dir (nothing was overwritten)");
    }
  });
  cluster->set_devices(device_name);
  const Provenance provenance = gather_provenance(*cluster, device_name, c.effective_ini);

  // Share the resume point with every worker (sync replicas need the parameters too).
  if (cluster->is_worker()) {
    MPI_Comm wc = cluster->role_comm();
    int has = resume ? 1 : 0;
    DT_CHECK_MPI(MPI_Bcast(&has, 1, MPI_INT, 0, wc));
    if (has) {
      if (!resume) resume.emplace();
      CheckpointState& s = *resume;
      std::int64_t hdr[6] = {s.global_step, s.epoch, s.step_in_epoch,
                             static_cast<std::int64_t>(s.m.size()),
                             static_cast<std::int64_t>(s.v.size()),
                             static_cast<std::int64_t>(s.model_state.size())};
      DT_CHECK_MPI(MPI_Bcast(hdr, 6, MPI_INT64_T, 0, wc));
      DT_CHECK_MPI(MPI_Bcast(&s.state_rows, 1, MPI_INT, 0, wc));
      DT_CHECK_MPI(MPI_Bcast(&s.wall_seconds, 1, MPI_DOUBLE, 0, wc));
      s.global_step = hdr[0];
      s.epoch = hdr[1];
      s.step_in_epoch = hdr[2];
      s.params.resize(param_count);
      s.m.resize(hdr[3]);
      s.v.resize(hdr[4]);
      s.model_state.resize(hdr[5]);
      for (auto* v : {&s.params, &s.m, &s.v, &s.model_state})
        if (!v->empty())
          DT_CHECK_MPI(MPI_Bcast(v->data(), static_cast<int>(v->size()), MPI_FLOAT, 0, wc));
    }
  }

  if (world_rank == 0) {
    log_info("# dtrain " + std::string(c.mode) + " training" +
             (c.config_file.empty() ? "" : " of " + c.config_file));
  }
  if (cluster->is_chief()) {
    log_info(describe_provenance(provenance));
    log_info(cluster->role_table());
    log_info(model_report);
    log_info(describe_plan(plan));
    std::ofstream(fs::path(c.run_dir) / "config.ini") << c.effective_ini;
  }

  int code = kExitOk;
  if (cluster->is_ps()) {
    const PsStats st = run_parameter_server(*cluster, c, shards[cluster->me().index],
                                            plan.total_steps, stop_flag(), ps_no_decay);
    double v[4] = {static_cast<double>(st.pushes), static_cast<double>(st.staleness_sum),
                   static_cast<double>(st.staleness_max), st.busy_seconds / std::max(st.wall_seconds, 1e-9)};
    DT_CHECK_MPI(MPI_Reduce(v, nullptr, 4, MPI_DOUBLE, MPI_MAX, cluster->worker_rank(0), world));
    if (stop_requested()) code = kExitSignalled;
    return code;
  }

  const Config effective = effective_for_workers(c, plan.workers);  // --lr-scaling
  if (cluster->is_chief() && effective.lr != c.lr)
    log_info("# --lr-scaling linear: sync learning rate " + std::to_string(c.lr) + " x " +
             std::to_string(plan.workers) + " workers = " + std::to_string(effective.lr));
  if (cluster->is_chief() && plan.synthetic && (c.random_crop > 0 || c.random_flip))
    log_warn("--random-crop / --random-flip have no effect on --synthetic data");
  Worker worker(effective, *cluster, plan, *backend, std::move(resume));
  const WorkerOutcome out = worker.run();
  // ps statistics (max over ps) reach the chief; every rank takes part in the reduce.
  double ps_stats[4] = {0, 0, 0, 0};
  DT_CHECK_MPI(MPI_Reduce(cluster->is_chief() ? MPI_IN_PLACE : ps_stats, ps_stats, 4, MPI_DOUBLE,
                          MPI_MAX, cluster->worker_rank(0), world));
  double rss[2] = {peak_rss_mib(), out.train_peak_rss_mib};  // max over workers
  {
    MPI_Request req;
    DT_CHECK_MPI(MPI_Ireduce(cluster->is_chief() ? MPI_IN_PLACE : rss, rss, 2, MPI_DOUBLE,
                             MPI_MAX, 0, cluster->role_comm(), &req));
    wait_one(req, comm_timeout(), "reduce of the workers' peak memory");
  }
  if (out.stopped_by == "signal") code = kExitSignalled;
  if (!cluster->is_chief()) return code;

  const double sps = out.train_seconds > 0 ? out.samples / out.train_seconds : 0.0;
  std::map<std::string, JsonValue> r;
  r["test_accuracy"] = out.test_accuracy;
  r["test_loss"] = out.test_loss;
  r["train_loss"] = out.train_loss;
  r["train_accuracy"] = out.train_accuracy;
  r["epochs"] = static_cast<double>(out.global_step) / static_cast<double>(plan.steps_per_epoch);
  r["epochs_completed"] = static_cast<std::int64_t>(out.epochs_done);
  r["global_step"] = out.global_step;
  r["wall_seconds"] = out.wall_seconds;
  r["train_seconds"] = out.train_seconds;
  r["data_seconds"] = out.data_seconds;  // the chief's split of train_seconds
  r["compute_seconds"] = out.compute_seconds;
  r["exchange_seconds"] = out.exchange_seconds;
  r["samples_per_sec"] = sps;
  r["samples"] = out.samples;
  r["mode"] = c.mode;
  r["world_size"] = static_cast<std::int64_t>(cluster->world_size());
  r["num_ps"] = static_cast<std::int64_t>(num_ps);
  r["num_workers"] = static_cast<std::int64_t>(cluster->num_workers());
  r["batch_size"] = static_cast<std::int64_t>(plan.batch);
  r["global_batch_size"] = static_cast<std::int64_t>(plan.batch * plan.workers);
  r["device"] = device_name;
  r["stopped_by"] = out.stopped_by;
  r["skipped_steps"] = out.skipped;
  r["staleness_mean"] = out.staleness_mean;
  r["staleness_max"] = static_cast<std::int64_t>(ps_stats[2]);
  r["ps_busy_fraction"] = ps_stats[3];
  r["peak_rss_mb"] = rss[0];        // the whole run, checkpoint writes included
  r["train_peak_rss_mb"] = rss[1];  // up to the end of the last training step
  r["activation_mb"] = static_cast<double>(activation_bytes) / (1 << 20);
  r["config_file"] = c.config_file;
  r["train_data"] = plan.synthetic ? plan.train.path : c.train_data;
  if (c.target_accuracy > 0) {  // null when never reached
    r["target_accuracy"] = c.target_accuracy;
    const bool reached = out.step_at_accuracy >= 0;
    const JsonValue null{std::monostate{}};
    r["time_to_accuracy_seconds"] = reached ? JsonValue(out.time_to_accuracy) : null;
    r["step_at_accuracy"] = reached ? JsonValue(out.step_at_accuracy) : null;
  }
  add_provenance(r, provenance);
  write_results_json(c.run_dir, r);
  char line[300];
  std::snprintf(line, sizeof line,
                "dtrain: %s %d ps + %d workers | %d epochs, %lld steps | test accuracy %.4f | "
                "test loss %.4f | %.1f samples/s | wall %s | results %s/results.json",
                c.mode.c_str(), num_ps, cluster->num_workers(), out.epochs_done,
                static_cast<long long>(out.global_step), out.test_accuracy, out.test_loss, sps,
                format_seconds(out.wall_seconds).c_str(), c.run_dir.c_str());
  log_info(line);
  return code;
}

}  // namespace dtrain
