// dtrain/train/checkpointer.cpp — checkpointing above the file format (see checkpointer.hpp): the
// run directory and resume policy, the resume point's broadcast, a worker's restore, when a run
// saves and what it assembles, and `dtrain predict`'s checks.
#include "dtrain/train/checkpointer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timeline.hpp"
#include "dtrain/optim/dana.hpp"

namespace dtrain {
namespace {

/// Broadcast from the chief over the workers, with the communication deadline.
void worker_bcast(void* data, int count, MPI_Datatype type, MPI_Comm comm, const char* what) {
  MPI_Request req;
  DT_CHECK_MPI(MPI_Ibcast(data, count, type, 0, comm, &req));
  wait_one(req, comm_timeout(), std::string("broadcast of the resume point: ") + what);
}

/// "metrics.csv, config.ini": a run dir's outputs for a message.
std::string list_names(const std::vector<std::string>& names) {
  std::string listed;
  for (const std::string& n : names) listed += (listed.empty() ? "" : ", ") + n;
  return listed;
}

/// "each worker at its own step: 3, 5" for per-worker positions, else "".
std::string workers_steps(const std::vector<std::int64_t>& steps) {
  std::string list;
  for (const std::int64_t k : steps) list += (list.empty() ? "" : ", ") + std::to_string(k);
  return steps.empty() ? "" : "each worker at its own step: " + list;
}

/// " (each worker at its own step: 3, 5)" for per-worker positions, else "".
std::string each_worker(const std::vector<std::int64_t>& steps) {
  return steps.empty() ? "" : " (" + workers_steps(steps) + ")";
}

/// Whether checkpoint `s` is from the middle of an epoch: its position, or (async stop
/// checkpoints) any worker's own, past the epoch's start.
bool mid_epoch(const CheckpointState& s) {
  return s.step_in_epoch != 0 ||
         std::any_of(s.worker_steps_in_epoch.begin(), s.worker_steps_in_epoch.end(),
                     [](std::int64_t k) { return k != 0; });
}

/// "epoch 2 (step 10 of 16)": where in its epoch checkpoint `s` is, with every worker's own step
/// where it has them ("epoch 2 (step 3 of 16; each worker at its own step: 3, 5)").
std::string place_in_epoch(const CheckpointState& s) {
  const std::string workers = workers_steps(s.worker_steps_in_epoch);
  return "epoch " + std::to_string(s.epoch + 1) + " (step " + std::to_string(s.step_in_epoch) +
         " of " + std::to_string(s.steps_per_epoch) + (workers.empty() ? "" : "; " + workers) + ")";
}

/// The training data of a configuration: "--synthetic SPEC" or the --train-data path.
std::string train_source(const std::string& synthetic, const std::string& train_data) {
  return synthetic.empty() ? train_data : "--synthetic " + synthetic;
}

/// In the middle of an epoch the checkpoint continues that epoch's order of samples, a pure
/// function of the seed, --shuffle and the training set (epoch_shard): this run must draw the same
/// order, or the rest of the epoch would train some samples twice and others never. --seed and
/// --shuffle are compared (refused when they differ; synthetic data has no order); the training
/// data only by its path (or --synthetic spec), with a warning, since a file may move or be copied
/// between runs — its size is compared by check_position_fits() (the steps per epoch).
void check_epoch_order_fits(const CheckpointState& s, const std::string& path, const Config& c) {
  if (!mid_epoch(s)) return;
  const std::string where =
      "checkpoint '" + path + "' is from the middle of " + place_in_epoch(s) + " of a run with ";
  const std::string why =
      ": the order in which an epoch trains its samples is drawn from --seed and --shuffle, so "
      "the rest of the epoch would not be the samples it has not trained yet (some would be "
      "trained twice, others never). Resume with ";
  const std::string epoch_end =
      " until the epoch's end (a checkpoint there, step 0 of the next epoch, may resume with "
      "another";
  if (c.synthetic.empty()) {
    DT_REQUIRE(s.seed == c.seed, where + "--seed " + std::to_string(s.seed) +
                                     ", this run has --seed " + std::to_string(c.seed) + why +
                                     "--seed " + std::to_string(s.seed) + epoch_end + " --seed)");
    const std::string shuffle = c.shuffle ? "true" : "false";
    const auto written = config_value(s, "shuffle");
    DT_REQUIRE(!written || *written == shuffle,
               where + "--shuffle " + *written + ", this run has --shuffle " + shuffle + why +
                   "--shuffle " + *written + epoch_end + " --shuffle)");
  }
  const auto synthetic = config_value(s, "synthetic");
  const auto train_data = config_value(s, "train-data");
  if (!synthetic || !train_data) return;
  const std::string written = train_source(*synthetic, *train_data);
  const std::string here = train_source(c.synthetic, c.train_data);
  std::error_code ec;
  if (written == here || (synthetic->empty() && c.synthetic.empty() &&
                          std::filesystem::equivalent(*train_data, c.train_data, ec)))
    return;
  log_warn(
      where + "training data '" + written + "', this run trains on '" + here +
      "': the rest of the epoch takes the samples the epoch has not trained by their place "
      "in the file, which is right only if it holds the same samples in the same order (a "
      "file moved or copied); if not, some are trained twice and others never — resume with '" +
      written + "' until the epoch's end, where the training data may change");
}

/// The checkpoint's position (global_step, epoch, step_in_epoch) counts steps of its writer's
/// plan; this run continues it only where its own steps mean the same: the same global steps per
/// epoch (what the learning-rate schedule and the epochs' ends count in) and, in the middle of an
/// epoch, the same workers and batch (which samples the epoch has trained). Checkpoints that
/// predate the record (steps_per_epoch 0) are taken as they are. A pipelined run's workers are its
/// replicas (`unit`: "pipeline replica(s)", each --pipeline-stages workers).
void check_position_fits(const CheckpointState& s, const std::string& path, const TrainPlan& plan,
                         const std::string& unit) {
  if (s.steps_per_epoch == 0) return;
  const auto n = [](auto v) { return std::to_string(v); };
  const std::string written = n(s.num_workers) + " " + unit + " × batch " + n(s.batch_size) + " (" +
                              n(s.steps_per_epoch) + " global steps per epoch)";
  const std::string here = n(plan.workers) + " " + unit + " × batch " + n(plan.batch) + " (" +
                           n(plan.steps_per_epoch) + ")";
  // Same workers and batch, and one run's steps about W times the other's: one counts a push per
  // global step (async: the W shards' steps, each within one of the largest), the other an
  // update of every worker (SSP: the largest shard's).
  const std::int64_t more = std::max(s.steps_per_epoch, plan.steps_per_epoch);
  const std::int64_t fewer = std::min(s.steps_per_epoch, plan.steps_per_epoch);
  const bool counting = s.num_workers == plan.workers && s.batch_size == plan.batch &&
                        plan.workers > 1 && more <= plan.workers * fewer &&
                        more >= plan.workers * (fewer - 1);
  DT_REQUIRE(s.steps_per_epoch == plan.steps_per_epoch || !counting,
             "checkpoint '" + path + "' was written by a run of " + written + ", this run has " +
                 here + " with the same workers and batch: one counts a global step per push " +
                 "(async without --max-staleness), the other per update of every worker (sync, or "
                 "SSP with --max-staleness). Resume as the run was trained (with or without "
                 "--max-staleness), or start a new --run-dir with --init-from an export of it");
  DT_REQUIRE(s.steps_per_epoch == plan.steps_per_epoch,
             "checkpoint '" + path + "' was written by a run of " + written + ", this run has " +
                 here + ": its global_step " + n(s.global_step) +
                 ", its place in the epoch and the learning-rate schedule count steps of the "
                 "other size. Resume with " +
                 n(s.num_workers) + " " + unit + " and --batch-size " + n(s.batch_size) +
                 " (or a --global-batch-size that gives as many steps per epoch), or start a new "
                 "--run-dir with --init-from an export of it");
  DT_REQUIRE(!mid_epoch(s) || (s.num_workers == plan.workers && s.batch_size == plan.batch),
             "checkpoint '" + path + "' is from the middle of " + place_in_epoch(s) +
                 " of a run of " + written + "; this run splits the data over " + here +
                 ", so the samples that epoch has already trained would not be the ones it "
                 "skips. Resume with " +
                 n(s.num_workers) + " " + unit + " and --batch-size " + n(s.batch_size) +
                 " (the shape may change at a checkpoint of an epoch's end)");
}

/// --resume found no checkpoint that verifies: refuse when the run dir holds checkpoints (all
/// corrupt) or a finished run, else warn and start from scratch.
void resume_without_checkpoint(const Config& c, const std::vector<std::string>& existing,
                               const std::vector<std::string>& outputs) {
  const std::string listed = list_names(outputs);
  const bool finished = std::find(outputs.begin(), outputs.end(), "results.json") != outputs.end();
  if (!existing.empty())
    // Every checkpoint failed to verify (each was reported above): starting over would bury
    // them under new ones, so refuse and leave the run dir as it is.
    throw InputError("--resume: none of the " + std::to_string(existing.size()) +
                     " checkpoints in '" + c.run_dir + "' verifies (newest: '" + existing.front() +
                     "'; see the warnings above); nothing was overwritten");
  if (finished)
    // A finished run without checkpoints: nothing to continue, and starting over would
    // replace its results.
    throw InputError("--resume: '" + c.run_dir + "' holds a finished run (" + listed +
                     ") but no checkpoint to continue from; choose another --run-dir "
                     "(nothing was overwritten)");
  // A run stopped before its first checkpoint (a requeued Slurm job): start it again.
  log_warn("--resume: no checkpoint in '" + c.run_dir + "', starting " +
           (c.init_from.empty() ? "from scratch" : "from --init-from " + c.init_from) +
           (outputs.empty() ? std::string()
                            : " (its " + listed +
                                  " stay; the earlier attempt's metrics.csv rows are "
                                  "set aside)"));
}

/// The run dir's lock file (lock_run_dir()).
std::string run_dir_lock_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / ".dtrain.lock").string();
}

/// The error of a run dir whose lock another run holds (`holder`: its note).
InputError run_dir_in_use(const std::string& run_dir, const std::string& holder) {
  return InputError("option --run-dir: '" + run_dir + "' is in use by another dtrain run (" +
                    (holder.empty() ? "starting" : holder) +
                    "); two runs would write the same checkpoints: let it finish, or choose "
                    "another --run-dir; if no run uses it (its node was lost and the file "
                    "system still holds the lock), delete " +
                    run_dir_lock_path(run_dir) + " (nothing was written)");
}

}  // namespace

FileLock lock_run_dir(const std::string& run_dir, const std::string& host) {
  prepare_run_dir(run_dir);
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  char since[32] = "?";
  if (::gmtime_r(&now, &utc) != nullptr)
    std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S UTC", &utc);
  FileLock lock(run_dir_lock_path(run_dir), "its chief: pid " + std::to_string(::getpid()) +
                                                " on " + host + ", since " + since);
  if (lock.state() == FileLock::State::busy) throw run_dir_in_use(run_dir, lock.holder());
  if (lock.state() == FileLock::State::unsupported)
    log_warn("the file system of run dir '" + run_dir +
             "' takes no file locks (flock: " + std::strerror(lock.error()) +
             "): dtrain cannot check that no other run writes into it");
  return lock;
}

void remove_partial_checkpoints(const std::string& run_dir, const FileLock& lock) {
  // Holding the lock, no other run writes here: a partial checkpoint is what a run left when it
  // ended while writing one, and it may take as much space as a whole one.
  if (lock.state() != FileLock::State::held) return;
  for (const std::string& tmp : partial_checkpoints(run_dir)) {
    std::error_code ec;
    if (std::filesystem::remove(tmp, ec))
      log_info("# removed " + tmp + ": a partial checkpoint, left by a run that ended writing it");
  }
}

std::optional<CheckpointState> find_resume_point(const Config& c, const std::string& signature,
                                                 std::size_t param_count, std::size_t state_count,
                                                 const TrainPlan& plan) {
  const auto existing = list_checkpoints(c.run_dir);
  const std::vector<std::string> outputs = run_outputs(c.run_dir);
  if (!c.resume) {
    DT_REQUIRE(existing.empty() && outputs.empty(),
               "option --run-dir: '" + c.run_dir + "' already holds a run (" +
                   (existing.empty() ? ""
                                     : std::to_string(existing.size()) + " checkpoint(s)" +
                                           std::string(outputs.empty() ? "" : ", ")) +
                   list_names(outputs) +
                   "); pass --resume to continue it or choose another "
                   "--run-dir (nothing was overwritten)");
    return std::nullopt;
  }
  std::optional<CheckpointState> resume = load_latest_checkpoint(c.run_dir);
  if (resume) {
    // Name the checkpoint actually read: a corrupt newer one may have been skipped.
    const std::string path = checkpoint_path(c.run_dir, resume->global_step);
    check_checkpoint_compatible(*resume, path, signature, std::string(to_string(c.mode)),
                                param_count, std::string(to_string(c.optimizer)));
    check_state_size(*resume, path, state_count);
    check_position_fits(*resume, path, plan,
                        c.pipeline_stages > 1 ? "pipeline replica(s)" : "worker(s)");
    check_epoch_order_fits(*resume, path, c);
    // DANA checkpoints Σ_j v_j (about W momenta); every other rule one momentum vector, which
    // DANA would share out as m/W: a switch between them resumes with W× too much (or 1/W of
    // the) momentum.
    const auto value = [&](const char* key, const char* d) {
      return config_value(*resume, key).value_or(d);
    };
    const bool was_dana = resume->mode == "async" && value("max-staleness", "-1") == "-1" &&
                          value("optimizer", "momentum") == "momentum" &&
                          value("async-momentum", "as-given") == "dana";
    const bool is_dana = uses_dana(c);
    DT_REQUIRE(was_dana == is_dana,
               "checkpoint '" + path + "': its momentum is " +
                   (was_dana ? "DANA's sum over the workers" : "one momentum vector") +
                   ", and this run's --async-momentum / --max-staleness " +
                   (is_dana ? "is DANA" : "is not DANA") +
                   " (resume with the rule it was written with, or start a new --run-dir)");
  } else {
    resume_without_checkpoint(c, existing, outputs);
  }
  return resume;
}

std::optional<CheckpointState> check_resume_point(const Config& c, const std::string& signature,
                                                  std::size_t param_count, std::size_t state_count,
                                                  const TrainPlan& plan, std::string& report) {
  const bool exists = check_existing_run_dir(c.run_dir);  // prepare_run_dir()'s, making nothing
  if (exists)                                             // lock_run_dir()'s, taking no lock
    if (const std::optional<std::string> holder = lock_holder(run_dir_lock_path(c.run_dir)))
      throw run_dir_in_use(c.run_dir, *holder);
  std::optional<CheckpointState> resume =
      find_resume_point(c, signature, param_count, state_count, plan);
  if (resume) {
    report = "# --resume: continues checkpoint '" +
             checkpoint_path(c.run_dir, resume->global_step) + "' at global_step " +
             std::to_string(resume->global_step) + ", epoch " + std::to_string(resume->epoch + 1) +
             ", step " + std::to_string(resume->step_in_epoch) + " of the epoch" +
             each_worker(resume->worker_steps_in_epoch) +
             (c.init_from.empty() ? "" : " (--init-from " + c.init_from + " not used)");
  } else if (c.resume) {
    report = "# --resume: no checkpoint in '" + c.run_dir + "', starts " +
             (c.init_from.empty() ? "from scratch" : "from --init-from " + c.init_from);
  } else {
    report = "# run dir '" + c.run_dir +
             "': " + (exists ? "holds no run" : "does not exist (the run makes it)") +
             ", a new run";
  }
  return resume;
}

void set_aside_skipped_checkpoints(const std::string& run_dir, std::int64_t resumed_step,
                                   const FileLock& lock) {
  if (lock.state() != FileLock::State::held) return;  // another run might be writing them
  for (const std::string& path : list_checkpoints(run_dir)) {
    if (step_of_checkpoint_name(std::filesystem::path(path).filename().string()) <= resumed_step)
      continue;
    // --resume skipped it (it does not verify, warned above): out of the way of retention and of
    // this run's own checkpoint of that step, kept for a look.
    std::string aside = path + ".corrupt";
    for (int k = 2; path_taken(aside); ++k) aside = path + ".corrupt" + std::to_string(k);
    try {
      replace_file(path, aside);
      log_warn("# " + path + " does not verify: moved to " + aside);
    } catch (const Error& e) {  // it stays; retention still leaves it alone (write_checkpoint)
      log_warn("# " + path +
               " does not verify and stays where it is: " + without_error_prefix(e.what()));
    }
  }
}

void share_resume_point(const Cluster& cluster, std::size_t param_count,
                        std::optional<CheckpointState>& resume) {
  if (!cluster.is_worker()) return;
  MPI_Comm wc = cluster.role_comm();
  int has = resume ? 1 : 0;
  worker_bcast(&has, 1, MPI_INT, wc, "present");
  if (!has) return;
  if (!resume) resume.emplace();
  CheckpointState& s = *resume;
  std::int64_t hdr[7] = {s.global_step,
                         s.epoch,
                         s.step_in_epoch,
                         static_cast<std::int64_t>(s.m.size()),
                         static_cast<std::int64_t>(s.v.size()),
                         static_cast<std::int64_t>(s.model_state.size()),
                         static_cast<std::int64_t>(s.worker_steps_in_epoch.size())};
  worker_bcast(hdr, 7, MPI_INT64_T, wc, "steps and sizes");
  worker_bcast(&s.state_rows, 1, MPI_INT, wc, "batchnorm rows");
  worker_bcast(&s.wall_seconds, 1, MPI_DOUBLE, wc, "wall time");
  s.global_step = hdr[0];
  s.epoch = hdr[1];
  s.step_in_epoch = hdr[2];
  s.params.resize(param_count);
  s.m.resize(hdr[3]);
  s.v.resize(hdr[4]);
  s.model_state.resize(hdr[5]);
  s.worker_steps_in_epoch.resize(hdr[6]);
  for (auto* v : {&s.params, &s.m, &s.v, &s.model_state})
    if (!v->empty())
      worker_bcast(v->data(), static_cast<int>(v->size()), MPI_FLOAT, wc, "parameters and state");
  if (hdr[6] > 0)
    worker_bcast(s.worker_steps_in_epoch.data(), static_cast<int>(hdr[6]), MPI_INT64_T, wc,
                 "the workers' positions");
}

Checkpointer::Checkpointer(const Config& c, const Cluster& cluster, const TrainPlan& plan,
                           Backend& backend, Model& model, GradientExchange& exchange,
                           std::function<double()> wall_seconds, const PipelineGroup* pipe)
    : c_(c), cluster_(cluster), plan_(plan), be_(backend), model_(model), exchange_(exchange),
      wall_seconds_(std::move(wall_seconds)), pipe_(pipe), lockstep_(exchange.lockstep()) {}

TrainPosition Checkpointer::restore(std::optional<CheckpointState> resume, double& wall_seconds) {
  TrainPosition at;
  wall_seconds = 0;
  if (resume) {
    at = {resume->global_step, static_cast<int>(resume->epoch), resume->step_in_epoch,
          resume->worker_steps_in_epoch};
    // Mid-epoch positions need the writer's workers (check_resume_shape): another count starts
    // every worker at the chief's.
    if (at.worker_steps.size() != static_cast<std::size_t>(plan_.workers)) at.worker_steps.clear();
    wall_seconds = resume->wall_seconds;
    // Batchnorm statistics: this worker's row when the worker count matches, else the mean.
    const std::size_t S = model_.state_count();
    const int rows = resume->state_rows, w = cluster_.me().index;
    const std::vector<float> row =
        rows == plan_.workers ? std::vector<float>(resume->model_state.begin() + w * S,
                                                   resume->model_state.begin() + (w + 1) * S)
                              : mean_of_rows(resume->model_state.data(), rows, S);
    if (S) be_.copy_to_device(model_.state(), row.data(), S * sizeof(float));
    // Every worker alike (only the chief's copy has the configuration); --init-from's start is
    // step 0, which a checkpoint written again loses nothing of.
    if (at.global_step > 0) resumed_at_ = at;
    if (cluster_.is_chief() && !resume->config.empty())  // empty: --init-from's start
      log_info("# resuming from global_step " + std::to_string(at.global_step) + ", epoch " +
               std::to_string(at.epoch + 1) + ", step " + std::to_string(at.step_in_epoch) +
               " of the epoch" + each_worker(at.worker_steps));
  } else {
    model_.initialize(c_.seed);
  }
  exchange_.start(model_, resume ? &*resume : nullptr, at.global_step);
  bucket_ = c_.checkpoint_every > 0 ? at.global_step / c_.checkpoint_every : 0;
  saved_at_ = now_seconds();
  return at;
}

void Checkpointer::after_step(const TrainPosition& at, bool last) {
  bool due = false;
  if (c_.checkpoint_every > 0 && at.global_step / c_.checkpoint_every > bucket_) {
    bucket_ = at.global_step / c_.checkpoint_every;
    due = true;
  }
  if (c_.checkpoint_secs > 0) due = time_due() || due;  // collective: called on every step
  // Lockstep: every worker reaches this at the same step. Otherwise: the chief alone. After the
  // last step of an epoch or run, the epoch-end or stop checkpoint that follows is this one.
  if (due && !last && (lockstep_ || cluster_.is_chief())) save(at);
}

bool Checkpointer::time_due() {
  int due = now_seconds() - saved_at_ >= c_.checkpoint_secs ? 1 : 0;
  // The clock of the rank that writes the file decides, and the ranks that save with it follow:
  // stage P − 1's leader to the replica's stages, each stage's leader to its replicas.
  const auto follow = [&due](MPI_Comm comm, int root) {
    MPI_Request req;
    DT_CHECK_MPI(MPI_Ibcast(&due, 1, MPI_INT, root, comm, &req));
    wait_one(req, comm_timeout(), "agreeing on a --checkpoint-secs checkpoint");
  };
  if (pipe_ != nullptr && (lockstep_ || cluster_.is_chief()))
    follow(pipe_->pipe(), pipe_->place().stages - 1);
  if (lockstep_) follow(cluster_.role_comm(), 0);
  else if (!cluster_.is_chief()) return false;
  return due > 0;
}

void Checkpointer::at_stop(const TrainPosition& at, bool signal) {
  // Lockstep: checkpoint before any epoch-end work so that a resumed run continues bit for bit.
  if (lockstep_ || signal) save(at);
}

void Checkpointer::after_averaging(const TrainPosition& at) {
  // ps modes keep one row of statistics (no bit-exact resume): checkpoint after the averaging, so
  // the checkpoint holds what this evaluation uses (dtrain predict), also over a mid-epoch
  // checkpoint of the chief at the same step.
  if (!lockstep_) save(at, true);
}

void Checkpointer::at_epoch_end(const TrainPosition& next) { save(next, !lockstep_); }

void Checkpointer::gather_model_state(CheckpointState& s) {
  const std::size_t S = model_.state_count();
  std::vector<float> mine(std::max<std::size_t>(S, 1));
  be_.copy_to_host(mine.data(), model_.state(), mine.size() * sizeof(float));
  if (!lockstep_) {
    s.state_rows = 1;
    s.model_state = std::move(mine);
    return;
  }
  // Every worker's batchnorm statistics, so a resumed run continues bit for bit.
  s.state_rows = plan_.workers;
  s.model_state.resize(mine.size() * plan_.workers);
  MPI_Request req;
  DT_CHECK_MPI(MPI_Igather(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT,
                           s.model_state.data(), static_cast<int>(mine.size()), MPI_FLOAT, 0,
                           cluster_.role_comm(), &req));
  wait_one(req, comm_timeout(), "gathering batchnorm statistics for a checkpoint");
}

void Checkpointer::save(const TrainPosition& at, bool rewrite) {
  exchange_.settle(model_);  // never save a step whose gradient turns out non-finite
  if (at.global_step == last_step_ && !rewrite) return;
  const auto same = [](const TrainPosition& a, const TrainPosition& b) {
    return a.global_step == b.global_step && a.epoch == b.epoch &&
           a.step_in_epoch == b.step_in_epoch;
  };
  if (resumed_at_ && same(at, *resumed_at_) && !rewrite) return;
  const TimelineSpan span("checkpoint", "checkpoint");
  CheckpointState s;
  gather_model_state(s);
  last_step_ = at.global_step;
  if (!cluster_.is_chief()) return;
  s.global_step = exchange_.snapshot(model_, s);
  if (pipe_ != nullptr) {  // the stage leaders' parts to the chief, as one whole model
    if (model_.state_count() == 0) s.model_state.clear();
    if (!pipe_->assemble(s)) return;
  }
  const Model& layout = pipe_ != nullptr ? pipe_->whole() : model_;
  s.epoch = at.epoch;
  s.step_in_epoch = at.step_in_epoch;
  s.worker_steps_in_epoch = at.worker_steps;
  const std::int64_t epoch_start = at.epoch * plan_.steps_per_epoch;
  if (!lockstep_ && steps_aggregate_workers(c_) && s.global_step >= epoch_start) {
    // Sync through the ps, SSP: a global step aggregates every worker's push of that step, and
    // the parameters are those of the ps's step, which the chief's clock may be ahead of (SSP:
    // up to --max-staleness; a push that carried a stop signal is not applied — a pipeline's
    // stages agree on the stop before they push, so no stage's ps applies it). The data
    // position is the ps's step, so a resumed run trains every step the parameters lack.
    // Before the ps's first update of a fresh run the parameters are the initial ones: a
    // checkpoint of step 0 would hold nothing (and take a --keep-checkpoints place).
    if (s.global_step == 0 && !resumed_at_ && !rewrite) return;
    s.step_in_epoch = s.global_step - epoch_start;
  } else if (!lockstep_) {
    s.global_step = std::max(s.global_step, at.global_step);
  }
  s.seed = c_.seed;
  s.num_workers = plan_.workers;
  s.batch_size = plan_.batch;
  s.steps_per_epoch = plan_.steps_per_epoch;
  s.mode = std::string(to_string(c_.mode));
  s.model_signature = layout.signature();
  s.config = c_.effective_ini;
  s.wall_seconds = wall_seconds_();
  if (layout.state_count() == 0) s.model_state.assign(s.state_rows, 0.0f);
  name_tensors(s, layout);
  try {
    write_checkpoint(c_.run_dir, s, c_.keep_checkpoints);
  } catch (const LibraryError& e) {  // a full disk, a quota, an I/O error: say what is kept
    const auto kept = list_checkpoints(c_.run_dir);
    throw LibraryError(
        "writing " + checkpoint_path(c_.run_dir, s.global_step) +
        " (as its .tmp file first): " + without_error_prefix(e.what()) +
        "; the checkpoint of global_step " + std::to_string(s.global_step) + " failed: " +
        (kept.empty() ? "the run dir holds no complete checkpoint"
                      : "--resume continues from the newest that verifies, " + kept.front()));
  }
  const bool again = s.global_step == last_file_;  // the ps modes' rewrite (after_averaging())
  last_file_ = s.global_step;
  log_info("# checkpoint " + checkpoint_path(c_.run_dir, s.global_step) +
           (again ? " (again: the workers' averaged batchnorm statistics, the parameters refreshed)"
                  : ""));
  saved_at_ = now_seconds();  // the writer's: --checkpoint-secs counts from the file written
}

void name_tensors(CheckpointState& s, const Model& model) {
  s.param_tensors.clear();
  s.buffer_tensors.clear();
  for (const TensorInfo& t : model.param_tensors())
    s.param_tensors.push_back({t.key, t.dims, t.offset, t.count});
  for (const TensorInfo& t : model.state_tensors())
    s.buffer_tensors.push_back({t.key, t.dims, t.offset, t.count});
}

CheckpointInput checkpoint_input(const CheckpointState& s, const std::string& path) {
  CheckpointInput in;
  std::istringstream line(s.model_signature.substr(0, s.model_signature.find('\n')));
  std::string word_input, word_classes;
  line >> word_input >> in.sample >> word_classes >> in.classes;
  DT_REQUIRE(line && word_input == "input" && word_classes == "classes" && in.classes > 0,
             "checkpoint '" + path +
                 "': its model signature does not start with "
                 "'input <shape> classes <K>'");
  return in;
}

void check_state_size(const CheckpointState& s, const std::string& path, std::size_t S) {
  const auto rows = static_cast<std::size_t>(s.state_rows);
  DT_REQUIRE(s.model_state.size() == S * rows || (S == 0 && s.model_state.size() <= rows),
             "checkpoint '" + path + "': model_state holds " +
                 std::to_string(s.model_state.size()) + " values, the model needs " +
                 std::to_string(s.state_rows) + " × " + std::to_string(S));
}

void check_inference_compatible(const CheckpointState& s, const std::string& path,
                                const Model& model) {
  check_checkpoint_compatible(s, path, model.signature(), s.mode, model.param_count());
  check_state_size(s, path, model.state_count());
}

void load_for_inference(const CheckpointState& s, Model& model, Backend& backend) {
  backend.copy_to_device(model.params(), s.params.data(), s.params.size() * sizeof(float));
  if (const std::size_t S = model.state_count()) {
    const std::vector<float> state = mean_of_rows(s.model_state.data(), s.state_rows, S);
    backend.copy_to_device(model.state(), state.data(), S * sizeof(float));
  }
}

}  // namespace dtrain
