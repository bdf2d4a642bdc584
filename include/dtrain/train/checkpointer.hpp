// dtrain/train/checkpointer.hpp — the one home of checkpointing above the file format: the run
// directory and resume policy (which checkpoint, if any, a run continues from), the resume point's
// broadcast to the workers, restoring a worker, when a training run saves and what state it
// assembles, and the checks `dtrain predict` makes before it scores with a checkpoint.
//
// Below it: io/checkpoint.hpp (the HDF5 layout, the atomic write, checksums, verification) and each
// GradientExchange's snapshot() (the parameters and optimizer state, which only the exchange holds:
// the replicas' own copy, or the ps shards gathered with SNAPSHOT requests).
//
// When a training run saves (Checkpointer's hooks, called by the worker's loop):
//   after_step      --checkpoint-every N: a step that crossed a multiple of N global steps;
//                   --checkpoint-secs S: the first step ending S seconds or more after the last
//                   checkpoint file was written (or the start), by its writer's clock
//                   (TensorFlow's save_checkpoint_secs). Lockstep exchanges (allreduce): every
//                   worker, at the same step; else the chief alone (its snapshot gathers the ps
//                   shards). Not after an epoch's or the run's last step: the checkpoint that
//                   follows it (below) is that step's.
//   at_stop         the loop stopped (signal; --max-steps before the epoch's last step), before
//                   any epoch-end work. Lockstep: always, so that a resumed run continues bit for
//                   bit; else only on a signal.
//   after_averaging ps modes stopped mid-epoch by --max-steps: after the batchnorm averaging,
//                   rewriting a checkpoint of the same step, so that it holds what evaluation
//                   uses.
//   at_epoch_end    an epoch's end (after its evaluation): the position of the next epoch; ps
//                   modes rewrite a mid-epoch checkpoint of the same step (averaged statistics).
// A step already saved is not saved again (unless rewritten as above).
//
// What a checkpoint holds besides the exchange's snapshot: batchnorm statistics as one row per
// worker, in worker order (lockstep: gathered, so that each worker resumes with its own), or the
// chief's row alone (ps modes: workers are not at a common step); the position (global step, epoch,
// step in the epoch), the seed, worker count, mode, model signature, effective configuration and
// the training wall time before it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/core/files.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/io/checkpoint.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/pipeline/group.hpp"
#include "dtrain/train/exchange.hpp"
#include "dtrain/train/plan.hpp"

namespace dtrain {

/// Where training stands: where a checkpoint resumes, and where one is saved.
struct TrainPosition {
  std::int64_t global_step = 0;    ///< updates applied so far
  int epoch = 0;                   ///< epoch in progress (0-based)
  std::int64_t step_in_epoch = 0;  ///< local steps of that epoch done (the data cursor)
  /// CheckpointState::worker_steps_in_epoch: every worker's cursor (async, all stopped
  /// together; on the chief), or empty
  std::vector<std::int64_t> worker_steps;
};

/// The chief's claim on its run dir for the whole run, before find_resume_point(): makes the
/// directory (a writable one) and takes the FileLock on <run_dir>/.dtrain.lock, noting `host`,
/// the pid and the start time in it. Two runs in one run dir — a job submitted twice, a Slurm
/// requeue while the old job still runs — would write the same checkpoints and outputs, so the
/// second is refused: InputError "option --run-dir: '<dir>' is in use by another dtrain run
/// (<its note>) ..." (nothing was written; the message says to delete the lock file where a lost
/// node's lock outlives it on a network file system). A file system without locks: a warning, and
/// the run goes on unguarded (the returned lock holds nothing). Throws LibraryError as FileLock.
FileLock lock_run_dir(const std::string& run_dir, const std::string& host);

/// A resumed run's chief, once set-up has succeeded: removes the partial checkpoints
/// (partial_checkpoints()) that a run which ended while writing one left, saying so — only while
/// `lock` (lock_run_dir()) is held, so that none is another run's file in progress. Never throws.
void remove_partial_checkpoints(const std::string& run_dir, const FileLock& lock);

/// The chief's part of a run's set-up, inside the all_or_nothing() phase, after lock_run_dir()
/// made c.run_dir: returns the checkpoint to resume from. Without --resume the run dir
/// must hold no run (checkpoints or outputs, see run_outputs()): std::nullopt, else InputError
/// naming the directory and what it holds. With --resume: the newest checkpoint that verifies
/// (corrupt newer ones are skipped with a warning), checked against this job
/// (check_checkpoint_compatible: the model `signature`, c.mode, `param_count` parameters,
/// c.optimizer; check_state_size: `state_count` batchnorm floats per row) and against the run's
/// `plan`: the same global steps per epoch, and mid-epoch the same workers and batch per worker as
/// the run that wrote it (a position counted in other steps would put the epoch's end and the
/// learning-rate schedule elsewhere, and train or skip other samples); mid-epoch (the position,
/// or async any worker's own, past the epoch's start) also the same --seed and --shuffle (the
/// epoch's order of samples; not for --synthetic data), and a warning, naming both, when the
/// training data's path differs (a moved file is fine; other samples are not). std::nullopt with a
/// warning when the run dir holds neither checkpoints nor results.json (a run stopped before its
/// first checkpoint starts over). Throws InputError when no checkpoint verifies, when a finished
/// run has no checkpoint, or when the newest readable one does not fit, naming it and what would
/// fit; nothing is overwritten then.
std::optional<CheckpointState> find_resume_point(const Config& c, const std::string& signature,
                                                 std::size_t param_count, std::size_t state_count,
                                                 const TrainPlan& plan);

/// --dry-run's part of the chief's set-up: the checks of lock_run_dir() and find_resume_point()
/// that need no change to the run dir, reading only (no directory made, no lock taken, no file
/// renamed or removed): c.run_dir, where it exists, is a writable directory (else InputError as
/// prepare_run_dir()) that no other run holds (else InputError as lock_run_dir(); core/files.hpp
/// lock_holder()), then find_resume_point() (with its warnings, and InputError where it
/// refuses: a run dir that holds a run without --resume, a checkpoint that does not fit). Returns
/// its resume point, and in `report` one line saying what the run would do: continue which
/// checkpoint at which position, start from scratch (or --init-from), or start a new run.
std::optional<CheckpointState> check_resume_point(const Config& c, const std::string& signature,
                                                  std::size_t param_count, std::size_t state_count,
                                                  const TrainPlan& plan, std::string& report);

/// After a set-up that resumed from the checkpoint of `resumed_step`: every checkpoint of a later
/// step in run_dir (one --resume skipped because it does not verify) is renamed to
/// `<name>.corrupt` (`.corrupt2`, ... when taken) with a warning, so that retention neither keeps
/// it in place of a good one nor deletes it, and this run's own checkpoint of that step does not
/// replace it. Only while `lock` is held (no other run writes there). Never throws: a rename that
/// fails is a warning, and the file stays (write_checkpoint()'s retention skips later steps).
void set_aside_skipped_checkpoints(const std::string& run_dir, std::int64_t resumed_step,
                                   const FileLock& lock);

/// Collective over the workers (cluster.role_comm(); a ps returns at once): the chief's resume
/// point (`resume`, std::nullopt for a fresh start) to every worker. Afterwards every worker's
/// `resume` holds the position (with every worker's, worker_steps_in_epoch), wall time,
/// `param_count` parameters, the optimizer state and the batchnorm rows (not the metadata
/// strings). Throws TimeoutError past --timeout, LibraryError
/// when an MPI call fails.
void share_resume_point(const Cluster& cluster, std::size_t param_count,
                        std::optional<CheckpointState>& resume);

/// One worker's checkpointing in a training run (see the top of this file). Holds references to
/// everything it is given, which must outlive it. Not thread-safe (the training thread only).
class Checkpointer {
 public:
  /// wall_seconds: the run's training wall time so far, read when a checkpoint is written.
  /// `pipe` (pipelined runs; else nullptr): `cluster` is then the stage's replicas and `model`
  /// the stage, and the chief assembles the stages' parts into the whole model's checkpoint
  /// (PipelineGroup::assemble).
  Checkpointer(const Config& c, const Cluster& cluster, const TrainPlan& plan, Backend& backend,
               Model& model, GradientExchange& exchange, std::function<double()> wall_seconds,
               const PipelineGroup* pipe = nullptr);

  /// Sets the worker's starting state and starts the exchange (GradientExchange::start). With a
  /// resume point (share_resume_point()): this worker's batchnorm row when the checkpoint has one
  /// per worker of this run, else the mean of its rows (mean_of_rows); the chief logs the
  /// position. Without: model.initialize(c.seed). Returns the position training continues from
  /// (zero without a resume point); `wall_seconds` receives the checkpoint's training time (0).
  /// Collective over the workers; throws as GradientExchange::start().
  TrainPosition restore(std::optional<CheckpointState> resume, double& wall_seconds);

  /// After each training step at position `at` (at.step_in_epoch: steps done): saves when
  /// --checkpoint-every was crossed since the last check, or when --checkpoint-secs have passed
  /// since the last checkpoint (time_due()). Lockstep: every worker calls it after every step;
  /// otherwise each worker may, and only the chief saves (pipelined: the stage leaders, each
  /// after every step). `last`: the step ends the epoch or the run (--max-steps); a checkpoint
  /// due then is left to at_stop(), after_averaging() or at_epoch_end(), which follow (an
  /// epoch-end checkpoint after the evaluation, as the next epoch's start: a resumed run does not
  /// evaluate that epoch again). Throws as save(), and as time_due().
  void after_step(const TrainPosition& at, bool last);
  /// The epoch's loop stopped at `at` in the middle of an epoch, by a signal (`signal`) or
  /// --max-steps: saves (lockstep, or a signal) before the epoch-end work. A --max-steps stop at
  /// an epoch's last step is an epoch end (at_epoch_end()). Every worker calls it. Throws as
  /// save().
  void at_stop(const TrainPosition& at, bool signal);
  /// After the epoch-end batchnorm averaging of a run stopped by --max-steps: ps modes save (a
  /// rewrite), lockstep does nothing (at_stop() saved). Every worker calls it. Throws as save().
  void after_averaging(const TrainPosition& at);
  /// After an epoch's evaluation: saves position `next` (the next epoch, step 0); ps modes
  /// rewrite a checkpoint of the same step. Every worker calls it. Throws as save().
  void at_epoch_end(const TrainPosition& next);

 private:
  /// Settles the exchange, then — unless `at.global_step` was saved already and !rewrite — gathers
  /// the batchnorm rows (lockstep: collective over the workers) and, on the chief, snapshots the
  /// exchange and writes <run_dir>/ckpt-<step>.h5 atomically (write_checkpoint()). Throws as
  /// GradientExchange::settle()/snapshot(), TimeoutError past --timeout, LibraryError when the
  /// write fails (the previous checkpoints stay).
  void save(const TrainPosition& at, bool rewrite = false);
  /// --checkpoint-secs: whether c.checkpoint_secs seconds (steady clock) have passed since the
  /// writer of the checkpoint files (the chief; pipelined: stage P − 1's leader) wrote the last
  /// one or restored, by the writer's clock, broadcast to the ranks that save with it (lockstep:
  /// every worker; pipelined ps modes: the stage leaders; else the chief alone, without
  /// communication) so that they all save at the same step. Collective over those ranks: one
  /// 4-byte broadcast (two when pipelined and lockstep); other ranks return false. Throws
  /// TimeoutError past --timeout, LibraryError when an MPI call fails.
  bool time_due();
  /// This worker's batchnorm statistics as a checkpoint's rows (lockstep: every worker's, on the
  /// chief; collective over the workers).
  void gather_model_state(CheckpointState& s);

  const Config& c_;
  const Cluster& cluster_;
  const TrainPlan& plan_;
  Backend& be_;
  Model& model_;
  GradientExchange& exchange_;
  std::function<double()> wall_seconds_;
  const PipelineGroup* pipe_;
  const bool lockstep_;
  std::int64_t last_step_ = -1;  ///< global step of the last checkpoint (written or gathered)
  /// --resume: the position of the checkpoint resumed from, which save() does not write again
  /// (a resumed run stopping where it started)
  std::optional<TrainPosition> resumed_at_;
  std::int64_t last_file_ = -1;  ///< the chief: global step in the name of the last file written
  std::int64_t bucket_ = 0;      ///< global_step / checkpoint_every at the last checkpoint check
  double saved_at_ = 0;          ///< now_seconds() after the last file written (or restore())
};

/// Fills s.param_tensors and s.buffer_tensors (format 2's named tensors) from `model`'s
/// TensorInfo keys, PyTorch shapes and offsets; write_checkpoint() then stores them.
void name_tensors(CheckpointState& s, const Model& model);

/// What a checkpoint's model takes, from its signature's first line "input 1xCxHxW classes K".
struct CheckpointInput {
  std::string sample;  ///< "CxHxW", as SampleShape::str()
  int classes = 0;
};

/// The input shape and class count of checkpoint `s`, read from `path`. Throws InputError naming
/// `path` when its model signature does not start with "input <shape> classes <K>" (K ≥ 1).
CheckpointInput checkpoint_input(const CheckpointState& s, const std::string& path);

/// Throws InputError naming `path` unless checkpoint `s`'s model_state holds state_rows × S floats
/// (S: the model's batchnorm floats; with S = 0, at most one placeholder per row).
void check_state_size(const CheckpointState& s, const std::string& path, std::size_t S);

/// `dtrain predict`'s checks of checkpoint `s` (read from `path`) against `model`, the job's layers
/// built for the checkpoint's input: check_checkpoint_compatible() with the checkpoint's own mode,
/// and a model_state of state_rows × model.state_count() floats. Throws InputError naming `path`.
void check_inference_compatible(const CheckpointState& s, const std::string& path,
                                const Model& model);

/// Copies checkpoint `s`'s parameters and the mean of its batchnorm rows (mean_of_rows(), the
/// statistics training evaluates with) into `model` on `backend`. `s` must have passed
/// check_inference_compatible() for `model`. Throws LibraryError when a device copy fails.
void load_for_inference(const CheckpointState& s, Model& model, Backend& backend);

}  // namespace dtrain
