// dtrain/train/trainer.cpp — one rank's part of a job as a short sequence of named steps: check
// the job on every rank, acquire this rank's resources and the resume point, share it, announce
// the run, then serve as a ps or train as a worker (and, the chief, write the results).
#include "dtrain/train/trainer.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>

#include "dtrain/comm/affinity.hpp"
#include "dtrain/comm/cluster.hpp"
#include "dtrain/comm/guard.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/comm/network.hpp"  // parse_link: --bucket-link
#include "dtrain/core/files.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timeline.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/dnn/float16.hpp"
#include "dtrain/model/pipeline_plan.hpp"
#include "dtrain/model/profile.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/pipeline/group.hpp"
#include "dtrain/ps/client.hpp"
#include "dtrain/ps/server.hpp"
#include "dtrain/train/checkpointer.hpp"
#include "dtrain/train/exchange.hpp"
#include "dtrain/train/pretrained.hpp"
#include "dtrain/train/provenance.hpp"
#include "dtrain/train/ps_count.hpp"
#include "dtrain/train/report.hpp"
#include "dtrain/train/signals.hpp"
#include "job.hpp"
#include "worker.hpp"

namespace fs = std::filesystem;

namespace dtrain {

namespace {
/// The cores the launcher lets this process run on (Open MPI binds each rank to one core when
/// -np <= 2). Throws LibraryError as allowed_cpus().
int allowed_cores() { return static_cast<int>(allowed_cpus().size()); }

/// The node's CPUs over its ranks, at least 1 (a rank's share before the launcher's binding).
int node_share(const Cluster& cluster) {
  return std::max(1, cluster.node_cpus() / cluster.me().local_size);
}
}  // namespace

int rank_cores(const Cluster& cluster) {
  const int share = node_share(cluster);
  return std::min(share, allowed_cores());
}

int data_threads(const Config& c, const Cluster& cluster, bool gpu) {
  if (c.data_threads > 0) return c.data_threads;
  return gpu ? std::max(1, rank_cores(cluster) - 1) : 1;
}

namespace {
/// Whether --device makes the workers train on a GPU (their OpenMP threads then sit idle).
bool wants_gpu(const Config& c) {
  return c.device == DeviceOption::cuda ||
         (c.device == DeviceOption::automatic && cuda_available());
}

/// On the node's first rank: warns when the CPU ranks of this node together start more OpenMP
/// threads than the node has cores. Threads that share a core wait for each other at the barrier
/// every oneDNN primitive ends with: on 2 cores, 2 ranks × 2 threads trained the CNN at a third of
/// the speed of 2 × 1 (docs/results/threads/). Every rank computes the same from the job and the
/// role layout, so nothing is exchanged.
void warn_node_oversubscribed(const Config& c, const Cluster& cluster) {
  if (cluster.me().local_rank != 0) return;
  const int cores = cluster.node_cpus();
  const int share = node_share(cluster);
  const bool gpu = wants_gpu(c);
  int total = 0, ps = 0, cpu_workers = 0;  // threads, and the ranks that start them
  for (const auto& r : cluster.ranks()) {
    if (r.node != cluster.me().node) continue;
    if (r.role == Role::ps) {
      total += c.ps_threads > 0 ? c.ps_threads : share;
      ++ps;
    } else if (!gpu) {
      total += c.threads > 0 ? c.threads : share;
      ++cpu_workers;
    }
  }
  // More ranks than cores (mpirun --oversubscribe) is the launcher's choice; one thread each is
  // the least they can run on, so only threads beyond that are worth a word.
  if (total <= std::max(cores, ps + cpu_workers)) return;
  // An option's value as the ranks run it: "2", or "0 (4)" for the default share.
  auto shown = [&](int t) {
    return t > 0 ? std::to_string(t) : "0 (" + std::to_string(share) + ")";
  };
  std::string who;
  if (cpu_workers > 0)
    who = std::to_string(cpu_workers) + " worker(s) × --threads " + shown(c.threads);
  if (ps > 0)
    who += (who.empty() ? "" : " + ") + std::to_string(ps) + " ps × --ps-threads " +
           shown(c.ps_threads);
  log_warn("this node's ranks start " + std::to_string(total) + " OpenMP threads (" + who +
           ") on the " + std::to_string(cores) +
           " CPU(s) they may run on: threads that share a core wait for each other at every "
           "parallel step, "
           "which can make training many times slower (--threads 0 and --ps-threads 0 give each "
           "rank its share of the cores)");
}
}  // namespace

void set_threads(const Config& c, const Cluster& cluster) {
  // Never start more threads than the cores this rank may run on, unless asked to.
  const int allowed = allowed_cores();
  int threads = cluster.is_ps() ? c.ps_threads : c.threads;
  if (threads == 0) {
    threads = rank_cores(cluster);
  } else if (threads > allowed && allowed < cluster.node_cpus()) {
    log_warn(std::string(cluster.is_ps() ? "--ps-threads " : "--threads ") +
             std::to_string(threads) + " but the launcher bound this rank to " +
             std::to_string(allowed) +
             " core(s): the threads will share them (use mpirun --bind-to none, or srun "
             "--cpus-per-task)");
  }
  warn_node_oversubscribed(c, cluster);
  omp_set_num_threads(threads);
}

int planned_gpu(const Config& c, const Cluster& cluster) {
  if (cluster.is_ps() || !wants_gpu(c)) return -1;
  DT_REQUIRE(cuda_available(),
             "option --device cuda: no CUDA device on host " + cluster.me().host +
                 (cuda_device_count() == 0 ? " (or dtrain built without CUDA)" : ""));
  // Workers on this node, numbered by world rank: the node-local worker rank picks the GPU.
  int local = 0, local_workers = 0;
  for (const auto& r : cluster.ranks()) {
    if (r.node != cluster.me().node || r.role != Role::worker) continue;
    if (r.rank < cluster.world_rank()) ++local;
    ++local_workers;
  }
  return select_gpu_for_local_rank(local, local_workers, c.allow_gpu_sharing);
}

namespace {
std::string device_name_of(int gpu) { return gpu < 0 ? "cpu" : "cuda:" + std::to_string(gpu); }

/// The worker's backend for --device (nullptr on a ps), before --layout and --precision.
std::unique_ptr<Backend> make_device_backend(const Config& c, const Cluster& cluster,
                                             std::string& name) {
  const int gpu = planned_gpu(c, cluster);
  name = device_name_of(gpu);
  if (gpu < 0) return cluster.is_ps() ? nullptr : make_cpu_backend();
  auto be = make_cuda_backend(gpu);
  const bool tf32 =
      c.math == MathOption::tf32 || (c.math == MathOption::automatic && be->supports_tf32());
  be->set_math(tf32 ? MathMode::tf32 : MathMode::fp32);  // InputError: tf32 on an old GPU
  if (c.debug_sync) be->set_debug_sync(true);
  be->set_cudnn_benchmark(c.cudnn_benchmark);
  be->set_deterministic(c.deterministic);
  be->set_conv_api(c.conv_api);
  be->set_conv_workspace_mb(static_cast<std::size_t>(c.conv_workspace_mb));
  return be;
}
}  // namespace

std::unique_ptr<Backend> make_backend(const Config& c, const Cluster& cluster, std::string& name) {
  auto be = make_device_backend(c, cluster, name);
  if (be) {
    be->set_layout(layout_of(c, be->device()));
    be->set_fuse(c.fuse != FuseOption::off);
    be->set_precision(c.precision);  // InputError: bf16 on an old GPU
  }
  return be;
}

namespace {

/// The error messages' prefix: "rank R worker W [stage s/P, replica d] host" (or "ps K").
void name_rank_in_errors(const Cluster& cl) {
  const RankInfo& me = cl.me();
  set_error_context("rank " + std::to_string(cl.world_rank()) + " " +
                    (cl.is_ps() ? "ps " : "worker ") + std::to_string(me.index) + " " +
                    (me.part.empty() ? "" : me.part + " ") + me.host);
}

/// The stage each ps of a pipelined ps job serves (ps k's at k).
std::vector<int> stage_of_ps(const Job& job) {
  std::vector<int> out;
  for (const StageShard& s : job.stage_shards) out.push_back(s.stage);
  return out;
}

/// A pipelined ps job's cluster of this rank's stage: its ps and its D replicas
/// (pipeline/group.hpp stage_ps_cluster); null for every other job.
std::unique_ptr<Cluster> stage_ps_of(const Job& job) {
  if (job.stage_shards.empty()) return nullptr;
  return stage_ps_cluster(*job.cluster, job.pipeline.stages, stage_of_ps(job));
}

/// The floats the ps of pipeline stage `stage` hold together.
std::size_t stage_ps_floats(const Job& job, int stage) {
  std::size_t n = 0;
  for (const StageShard& s : job.stage_shards)
    if (s.stage == stage) n += s.local.size();
  return n;
}

/// ps modes: the shard table every rank computes alike — the whole buffer split over the ps (at
/// tensor boundaries for LARS/LAMB: ps_shard_ranges), or (a pipeline) each stage's range over the
/// ps of its own (stage_shards, at its tensor boundaries for LARS/LAMB) — shown by --dry-run and
/// the log; on a ps also its ranges without weight decay and (LARS/LAMB) its tensors.
void plan_shards(const Config& c, const Model& layout, Job& job) {
  const Cluster& cl = *job.cluster;
  if (job.pipeline.stages > 1) {
    std::vector<std::size_t> stage_params;
    for (const PipelineStage& s : job.pipeline.stage) stage_params.push_back(s.params);
    job.stage_shards =  // a layer-wise optimizer's shards hold whole tensors of their stage
        stage_shards(stage_params, job.num_ps,
                     is_layerwise(c.optimizer)
                         ? param_segments(layout.param_tensors(), job.param_count)
                         : std::vector<ParamSegment>{});
    job.shards.clear();
    for (const StageShard& s : job.stage_shards) job.shards.push_back(s.range);
    job.cluster->label_ps([&](int k) {
      return "stage " + std::to_string(job.stage_shards[static_cast<std::size_t>(k)].stage) + "/" +
             std::to_string(job.pipeline.stages);
    });
  } else {  // a layer-wise optimizer's shards hold whole tensors
    job.shards = ps_shard_ranges(c, layout.param_tensors(), job.param_count, job.num_ps);
  }
  job.model_report += describe_shards(job.shards, layout.param_tensors(), stage_of_ps(job));
  if (cl.is_ps()) {
    const ShardRange& mine = job.shards[static_cast<std::size_t>(cl.me().index)];
    job.ps_tensors.no_decay = no_decay_ranges(c, layout.param_tensors(), mine.begin, mine.end);
    if (is_layerwise(c.optimizer))
      job.ps_tensors.segments =
          param_segments(layout.param_tensors(), job.param_count, mine.begin, mine.end);
  }
}

/// The ps ranks: 0 for the allreduce, --num-ps K, or --num-ps auto's K (train/ps_count.hpp) from
/// the model probed at batch 1 and the world size, the same on every rank; `note` gets auto's
/// line for the role table.
int resolve_num_ps(const Config& c, int world_size, std::string& note) {
  if (exchange_kind(c) == ExchangeKind::allreduce) return 0;
  if (!c.num_ps.automatic) return c.num_ps;
  const TrainPlan probe = make_plan(c, 1, 1);
  const Model m(c.layers, probe.train.sample, probe.train.num_classes, 1,
                act_dtype_of(c.precision));
  PsCountInput in;
  in.world = world_size;
  const auto params = static_cast<double>(m.param_count());
  in.push_bytes = params * static_cast<double>(wire_bytes(c.wire_dtype));
  in.reply_bytes = params * sizeof(float);
  for (const LayerInfo& layer : m.layers()) in.flops_per_sample += 3 * layer.forward_flops;
  in.batch = c.batch_size;
  in.global_batch = c.global_batch_size;
  in.min_ps = c.pipeline_stages;             // every pipeline stage has ps of its own
  in.min_workers = c.replicas_to_aggregate;  // R aggregated gradients need R workers
  in.stages = c.pipeline_stages;             // and the workers come in whole pipelines
  if (is_layerwise(c.optimizer))             // each ps holds whole tensors (ps_shard_ranges)
    in.max_ps = static_cast<int>(param_segments(m.param_tensors(), m.param_count()).size());
  const PsCountChoice k = choose_num_ps(in);
  note = k.why + "\n";
  return k.num_ps;
}

/// Phase 1 — the checks every rank makes identically (options, datasets, model, roles,
/// shards): one error, on every rank, before anything is touched.
Job check_job(const Config& c) {
  Job job;
  MPI_Comm world = MPI_COMM_WORLD;
  int world_size = 1;
  MPI_Comm_size(world, &world_size);
  all_or_nothing(world, [&] {
    job.num_ps = resolve_num_ps(c, world_size, job.role_notes);
    job.cluster = std::make_unique<Cluster>(world, job.num_ps);  // deterministic throws only
    const Cluster& cl = *job.cluster;
    name_rank_in_errors(cl);
    // The device, as a real run picks it (no backend made): --dry-run checks and shows it too.
    const int gpu = planned_gpu(c, cl);
    job.device_name = device_name_of(gpu);
    // A pipeline's D replicas of P stages share out the data as D workers would (and each
    // stage's ps aggregate its D replicas).
    const int replicas = pipeline_place(0, cl.num_workers(), c.pipeline_stages).replicas;
    DT_REQUIRE(c.replicas_to_aggregate <= replicas,
               "option --replicas-to-aggregate: " + std::to_string(c.replicas_to_aggregate) +
                   " is more than the " + std::to_string(replicas) +
                   (c.pipeline_stages > 1 ? (replicas == 1 ? " replica" : " replicas") +
                                                std::string(" of each pipeline stage")
                                          : (replicas == 1 ? " worker" : " workers")));
    job.plan = make_plan(c, replicas, data_threads(c, cl, gpu >= 0));
    if (c.bucket_link != "off" && c.bucket_link != "probe")
      parse_link(c.bucket_link, "--bucket-link");  // a bad spec: one error before anything runs
    if (c.pipeline_stages > 1) {
      job.cluster->label_workers([&](int w) {
        const PipelinePlace p = pipeline_place(w, cl.num_workers(), c.pipeline_stages);
        return "stage " + std::to_string(p.stage) + "/" + std::to_string(p.stages) + ", replica " +
               std::to_string(p.replica);
      });
      name_rank_in_errors(cl);  // errors name the stage too
    }
    const Model layout(c.layers, job.plan.train.sample, job.plan.train.num_classes, job.plan.batch,
                       act_dtype_of(c.precision));
    job.param_count = layout.param_count();
    job.state_count = layout.state_count();
    job.activation_bytes = layout.activation_bytes();
    job.signature = layout.signature();
    job.model_report = layout.summary();
    // --init-from is read here, before the run dir is touched, as the datasets are: a bad file
    // leaves nothing behind. A run's chief keeps its values (claim_resources() starts from them);
    // --dry-run checks it on every rank.
    if (c.dry_run && !c.init_from.empty()) job.init_report = check_init_from(c, layout);
    if (!c.dry_run && !c.init_from.empty() && cl.is_chief())
      job.init_point = initial_point(c, layout, job.init_report);
    const std::vector<LayerInfo> layers = layout.layers();
    require_batchnorm_statistics(c, job.plan, layers);
    if (const std::string w = short_batch_warning(c, job.plan, layers);
        !w.empty() && cl.world_rank() == 0)
      log_warn("# " + w);
    // stage= keys are checked at P = 1 too
    if (c.pipeline_stages > 1 || c.micro_batches > 1 || has_stage_keys(layers)) {
      const std::vector<double> layer_ms =
          c.pipeline_profile.empty()
              ? std::vector<double>{}
              : layer_costs(load_profile(c.pipeline_profile, "--pipeline-profile"), layers,
                            c.pipeline_profile);
      job.pipeline =
          plan_pipeline(layers, c.pipeline_stages, c.micro_batches, c.schedule, layer_ms);
      job.model_report += describe_pipeline(job.pipeline, layers, job.plan.batch,
                                            dtype_size(act_dtype_of(c.precision)));
    }
    if (job.num_ps > 0) plan_shards(c, layout, job);
    if (cl.is_ps() && job.pipeline.stages > 1) name_rank_in_errors(cl);  // a ps's stage
  });
  return job;
}

/// Whether resume point `s` (a checkpoint of the run dir) ends the run — at the end of --epochs or
/// --max-steps, with results.json at its global_step: nothing is left to train.
bool run_complete(const Config& c, const CheckpointState& s) {
  const bool at_end = s.epoch >= c.epochs || (c.max_steps > 0 && s.global_step >= c.max_steps);
  return at_end && results_global_step(c.run_dir) == s.global_step;
}

/// --dry-run's phase 2, all ranks or none: the chief's checks of the run dir and the resume point
/// that a real run makes before it writes (check_resume_point(): reading only, nothing made,
/// locked or renamed). Returns the chief's line for the report ("" elsewhere).
std::string check_run_dir(const Config& c, const Job& job) {
  std::string report;
  all_or_nothing(MPI_COMM_WORLD, [&] {
    if (!job.cluster->is_chief()) return;
    const std::optional<CheckpointState> resume =
        check_resume_point(c, job.signature, job.param_count, job.state_count, job.plan, report);
    if (resume && run_complete(c, *resume))
      report += "; the run is complete: nothing left to train (raise --epochs or --max-steps)";
  });
  return report;
}

/// --dry-run: everything check_job() and check_run_dir() did is what a real run checks before it
/// touches a device or writes to the run dir, and the threads' warning a real run would give. The
/// chief prints the report, with `run_dir_report` (check_run_dir()).
void report_dry_run(const Config& c, const Job& job, const std::string& run_dir_report) {
  warn_node_oversubscribed(c, *job.cluster);
  if (!job.cluster->is_chief()) return;
  log_info("# dtrain --dry-run of " + (c.config_file.empty() ? "the command line" : c.config_file) +
           ": the job is valid\n" + job.cluster->role_table() + job.role_notes + "\n" +
           job.model_report + "\n" + describe_plan(job.plan) +
           (job.init_report.empty() ? "" : "\n" + job.init_report) + "\n" + run_dir_report);
}

/// Phase 2 without the clean-up of a failed set-up (acquire_resources()).
void claim_resources(const Config& c, Job& job) {
  all_or_nothing(MPI_COMM_WORLD, [&] {
    set_threads(c, *job.cluster);
    job.backend = make_backend(c, *job.cluster, job.device_name);
    if (job.backend) job.backend->set_label_smoothing(c.label_smoothing);  // before the loss ops
    if (job.cluster->is_chief()) {
      job.run_dir_lock = lock_run_dir(c.run_dir, job.cluster->me().host);
      job.resume = find_resume_point(c, job.signature, job.param_count, job.state_count, job.plan);
    }
    // --init-from starts a run; a checkpoint to resume from has priority (pretrained.hpp).
    if (job.init_point && job.resume)
      log_info("# --init-from " + c.init_from + " not used: resuming from a checkpoint");
    if (job.init_point && !job.resume) {
      log_info(job.init_report);
      job.resume = std::move(job.init_point);
    }
    job.init_point.reset();
  });
  job.cluster->set_devices(job.device_name);
  if (c.pin_threads) pin_rank_threads(c, *job.cluster, job.role_notes);
  job.provenance = gather_provenance(*job.cluster, job.device_name, c.effective_ini);
}

/// On the chief after claim_resources(): the run continues a checkpoint of its run dir (--resume
/// found one), not --init-from's start, whose resume point carries no configuration.
bool resumes_checkpoint(const Config& c, const Job& job) {
  return c.resume && job.resume && !job.resume->config.empty();
}

/// Phase 2 — per-rank resources (threads, device) and the chief's run directory and resume
/// point; again all ranks or none.
void acquire_resources(const Config& c, Job& job) {
  try {
    claim_resources(c, job);
  } catch (...) {
    // A set-up that failed on any rank leaves the run dir as it found it: no lock file either.
    if (job.run_dir_lock) job.run_dir_lock->discard();
    throw;
  }
  if (c.resume && job.run_dir_lock) remove_partial_checkpoints(c.run_dir, *job.run_dir_lock);
  if (c.resume && job.run_dir_lock && job.run_dir_lock->state() == FileLock::State::held) {
    // Resumed from a checkpoint, or from scratch (step 0: a run stopped before its first).
    const bool from_checkpoint = resumes_checkpoint(c, job);
    const std::int64_t step = from_checkpoint ? job.resume->global_step : 0;
    if (from_checkpoint) set_aside_skipped_checkpoints(c.run_dir, step, *job.run_dir_lock);
    if (const auto [aside, n] = set_aside_metrics_past(c.run_dir, step); n > 0)
      log_info("# metrics.csv: " + std::to_string(n) + " row(s) logged past global_step " +
               std::to_string(step) +
               (from_checkpoint ? " (after the checkpoint resumed from)" : " (no checkpoint)") +
               " moved to " + aside);
  }
}

/// --resume of a run with nothing left to train: its checkpoint is at the end of --epochs or
/// --max-steps and results.json reports that global_step. The chief says so, and every rank then
/// leaves with exit 0 and the run dir as it was (no second evaluation row, results.json and the
/// checkpoints untouched). Collective over the world.
bool nothing_left_to_train(const Config& c, const Job& job) {
  const Cluster& cl = *job.cluster;
  int done = 0;
  if (cl.is_chief() && resumes_checkpoint(c, job)) {
    const CheckpointState& s = *job.resume;
    done = run_complete(c, s) ? 1 : 0;
    if (done)
      log_info("# --resume: the run in " + c.run_dir + " is complete (global_step " +
               std::to_string(s.global_step) + ", " + std::to_string(s.epoch) + " of " +
               std::to_string(c.epochs) +
               " epochs done, results.json): nothing left to train; raise --epochs or "
               "--max-steps to train it further. Nothing was written");
  }
  MPI_Request req;
  DT_CHECK_MPI(MPI_Ibcast(&done, 1, MPI_INT, cl.worker_rank(0), MPI_COMM_WORLD, &req));
  wait_one(req, comm_timeout(), "broadcast of whether the resumed run is complete");
  return done != 0;
}

/// The log header (rank 0) and the role/model/plan tables (the chief).
void announce(const Config& c, const Job& job) {
  if (job.cluster->world_rank() == 0)
    log_info("# dtrain " + std::string(to_string(exchange_kind(c))) + " training" +
             (c.config_file.empty() ? "" : " of " + c.config_file));
  if (!job.cluster->is_chief()) return;
  log_info(describe_provenance(job.provenance));
  log_info(job.cluster->role_table());
  if (!job.role_notes.empty()) log_info(job.role_notes.substr(0, job.role_notes.size() - 1));
  log_info(job.model_report);
  log_info(describe_plan(job.plan));
}

/// --timeline: every rank starts its clock at the same barrier (one node: one clock; across nodes
/// the barrier aligns the tracks to within its own skew).
void start_timeline(const Config& c) {
  if (!c.timeline) return;
  MPI_Request req;
  DT_CHECK_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &req));
  wait_one(req, comm_timeout(), "barrier starting the timeline");
  Timeline::instance().enable(now_seconds());
}

/// The metadata events that name rank r's track in a Chrome trace ("rank R: worker I (chief) on
/// HOST" + `note`) and sort it by rank.
std::vector<std::string> track_metadata(const RankInfo& r, const std::string& note = "") {
  const std::string pid = std::to_string(r.rank);
  const std::string name =
      "rank " + pid + ": " + (r.role == Role::ps ? "ps " : "worker ") + std::to_string(r.index) +
      (r.role == Role::worker && r.index == 0 ? " (chief)" : "") + " on " + r.host + note;
  return {"{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":\"" +
              name + "\"}}",
          "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid +
              ",\"args\":{\"sort_index\":" + pid + "}}"};
}

/// A Chrome trace file of `events` (JSON objects, or events_json() texts of several).
std::string trace_file(const std::vector<std::string>& events) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (std::size_t i = 0; i < events.size(); ++i) out += (i ? ",\n" : "") + events[i];
  return out + "\n]}\n";
}

/// --timeline: gathers every rank's spans to the chief, which writes <run_dir>/timeline.json
/// (via a temporary file): one track (pid) per world rank, named by its role.
void write_timeline(const Config& c, const Job& job) {
  if (!c.timeline) return;
  const Cluster& cl = *job.cluster;
  const std::string mine = Timeline::instance().events_json(cl.world_rank());
  const int root = cl.worker_rank(0), n = cl.world_size();
  const bool at_root = cl.world_rank() == root;
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(at_root ? n : 0), offsets(at_root ? n : 0);
  MPI_Request req;
  DT_CHECK_MPI(MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, cl.world(), &req));
  wait_one(req, comm_timeout(), "gathering timeline sizes");
  std::string all;
  if (at_root) {
    for (int r = 0, at = 0; r < n; at += lens[r], ++r) offsets[r] = at;
    all.resize(static_cast<std::size_t>(offsets.back() + lens.back()));
  }
  DT_CHECK_MPI(MPI_Igatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(),
                            MPI_CHAR, root, cl.world(), &req));
  wait_one(req, comm_timeout(), "gathering timeline events");
  if (!at_root) return;
  std::vector<std::string> events;
  for (const auto& r : cl.ranks())
    for (std::string& e : track_metadata(r)) events.push_back(std::move(e));
  for (int r = 0; r < n; ++r)
    if (lens[r] > 0)
      events.push_back(
          all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lens[r])));
  // A resumed run keeps the earlier sessions' timelines: timeline.json, then timeline-2.json, ...
  const std::string path = first_free_path(c.run_dir, "timeline", ".json");
  write_file_atomically(path, trace_file(events));
  log_info("# timeline " + path);
}

/// --timeline on a rank whose training failed: its own spans up to the failure into
/// <run_dir>/timeline-failed-rank<R>.json (-2, -3 after earlier failures), best effort — the
/// gather of write_timeline() needs every rank, and the others may be stuck or gone. A trace of
/// what the rank did before a timeout is what one looks for in a stuck run.
void keep_failed_timeline(const Config& c, const Cluster& cl) noexcept {
  try {
    if (!c.timeline || !Timeline::instance().enabled()) return;
    std::vector<std::string> events = track_metadata(cl.me(), " (failed)");
    const std::string mine = Timeline::instance().events_json(cl.world_rank());
    if (!mine.empty()) events.push_back(mine);
    const std::string path = first_free_path(
        c.run_dir, "timeline-failed-rank" + std::to_string(cl.world_rank()), ".json");
    write_file_atomically(path, trace_file(events));
    log_info("# timeline of this rank up to its failure: " + path);
  } catch (const std::exception& e) {
    log_warn(std::string("--timeline: this rank's spans could not be kept: ") + e.what());
  }
}

int serve_as_ps(const Config& c, const Job& job) {
  const auto k = static_cast<std::size_t>(job.cluster->me().index);
  // A pipeline's ps serves its stage's replicas and its range of the stage's buffer.
  const std::unique_ptr<Cluster> stage = stage_ps_of(job);
  // When a rank of a pipeline stops, the whole pipeline stalls and every ps falls idle: such a
  // ps waits longer than any worker does (a worker's wait for its ps's reply, then the stages'
  // agreement after it: ps_reply_timeout() + --timeout), so that the rank waiting on the stuck
  // one itself names it first.
  Config served = c;
  if (stage) served.timeout = ps_reply_timeout(c) + 2 * c.timeout;
  const PsStats st = run_parameter_server(
      stage ? *stage : *job.cluster, served, stage ? job.stage_shards[k].local : job.shards[k],
      job.plan.total_steps, stop_flag(), job.ps_tensors, job.cluster->role_comm());
  gather_run_stats(job, &st, nullptr);
  write_timeline(c, job);
  return stop_requested() ? kExitSignalled : kExitOk;
}

int train_as_worker(const Config& c, const Config& effective, Job& job) {
  const bool chief = job.cluster->is_chief();
  const int aggregated = gradients_per_step(c, job.plan.workers);
  if (chief && effective.lr != c.lr)
    log_info("# --lr-scaling linear: learning rate per global step " + std::to_string(c.lr) +
             " x " + std::to_string(aggregated) +
             (aggregated == job.plan.workers ? " workers"
                                             : " gradients per step (--replicas-to-aggregate, of " +
                                                   std::to_string(job.plan.workers) + " workers)") +
             " = " + std::to_string(effective.lr));
  if (chief && effective.warmup_steps != c.warmup_steps)
    log_info("# --async-schedule sync-steps: warm-up over " +
             std::to_string(effective.warmup_steps) +
             " pushes = " + std::to_string(c.warmup_steps) + " steps x " +
             std::to_string(job.plan.workers) + " workers");
  if (chief && (c.optimizer == OptimizerKind::momentum || c.optimizer == OptimizerKind::lars) &&
      ps_momentum(effective, job.plan.workers, effective.warmup_steps, job.plan.total_steps) !=
          c.momentum)
    log_info("# --async-momentum " + std::string(to_string(c.async_momentum)) +
             ": at the peak learning rate the ps applies momentum " +
             std::to_string(ps_momentum(effective, job.plan.workers, effective.warmup_steps,
                                        job.plan.total_steps)) +
             " = " + std::to_string(c.momentum) + " - (1 - 1/" + std::to_string(job.plan.workers) +
             "), the implicit momentum of asynchronous workers");
  if (chief && job.plan.synthetic && (c.random_crop > 0 || c.random_flip))
    log_warn("--random-crop / --random-flip have no effect on --synthetic data");
  // A pipeline stage trains its layers among its replicas (pipeline/group.hpp), from its slice
  // of the resume point; in a ps mode it pushes to its stage's ps.
  const std::unique_ptr<Cluster> stage_ps = stage_ps_of(job);
  std::optional<Model> layout;
  std::unique_ptr<PipelineGroup> pipe;
  if (job.pipeline.stages > 1) {
    layout.emplace(c.layers, job.plan.train.sample, job.plan.train.num_classes, job.plan.batch,
                   act_dtype_of(c.precision));
    pipe = std::make_unique<PipelineGroup>(*job.cluster, *layout, job.pipeline);
    // The stage's ps were cut from the plan's parameter count (plan_shards): the same floats.
    DT_ASSERT(!stage_ps || pipe->param_count() == stage_ps_floats(job, pipe->place().stage),
              "pipeline stage " + std::to_string(pipe->place().stage) + " holds " +
                  std::to_string(pipe->param_count()) + " parameters, its ps " +
                  std::to_string(stage_ps_floats(job, pipe->place().stage)));
    if (job.resume) job.resume = pipe->slice(*job.resume);
  }
  const Cluster& cluster = stage_ps ? *stage_ps : pipe ? pipe->stage_cluster() : *job.cluster;
  Worker worker(effective, cluster, job.plan, *job.backend, std::move(job.resume), pipe.get());
  // Once the chief's exchange is set up: a run whose set-up failed (no shared memory for
  // --allreduce hierarchical, NCCL) leaves no config.ini, and the same --run-dir takes the fix.
  if (chief) write_file_atomically((fs::path(c.run_dir) / "config.ini").string(), c.effective_ini);
  const WorkerOutcome out = worker.run();
  if (chief && c.pin_threads) log_info(describe_pinned_threads("the chief"));  // while they run
  const RunStats st = gather_run_stats(job, nullptr, &out);
  if (chief) write_results(c, job, out, st);
  write_timeline(c, job);
  return out.stopped_by == "signal" ? kExitSignalled : kExitOk;
}

}  // namespace

int run_training(const Config& c) {
  arm_graceful_stop();
  set_comm_timeout(c.timeout);
  Job job = check_job(c);
  if (c.dry_run) {
    const std::string run_dir_report = check_run_dir(c, job);
    job.cluster->set_devices(job.device_name);  // the role table's device column
    report_dry_run(c, job, run_dir_report);
    return kExitOk;
  }
  acquire_resources(c, job);
  if (nothing_left_to_train(c, job)) return kExitOk;
  // The chief's resume point to every worker (allreduce replicas need the parameters too).
  share_resume_point(*job.cluster, job.param_count, job.resume);
  announce(c, job);
  start_timeline(c);
  // What workers and ps train with: --lr-scaling, --async-schedule applied.
  const Config effective = effective_for_workers(c, job.plan.workers);
  try {
    return job.cluster->is_ps() ? serve_as_ps(effective, job) : train_as_worker(c, effective, job);
  } catch (...) {
    keep_failed_timeline(c, *job.cluster);
    throw;
  }
}

}  // namespace dtrain
