// dtrain/train/worker.hpp (private) — the worker's training loop, shared by every mode through
// GradientExchange (the loop never asks which mode it runs).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/io/checkpoint.hpp"
#include "dtrain/io/encoded_cache.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/pipeline/group.hpp"
#include "dtrain/pipeline/runner.hpp"
#include "dtrain/train/checkpointer.hpp"
#include "dtrain/train/exchange.hpp"
#include "dtrain/train/report.hpp"
#include "dtrain/train/trainer.hpp"
#include "batch_upload.hpp"

namespace dtrain {

/// Sums n host doubles over the workers of `comm` in place (MPI_Iallreduce), waiting at most the
/// communication deadline (comm_timeout(); Error naming "worker allreduce of metrics" past it).
void worker_sum(MPI_Comm comm, double* v, int n);

struct WorkerOutcome {
  std::int64_t global_step = 0;
  std::int64_t session_first_step = 0;  ///< global_step this process started at (--resume: > 0)
  int epochs_done = 0;
  /// test_top5: fraction of test samples with the label among the 5 largest logits (1 when the
  /// model has ≤ 5 classes)
  double test_loss = 0, test_accuracy = 0, test_top5 = 0;
  /// chief: the test_* hold an evaluation (this session's, or for a resumed one that evaluated
  /// none, metrics.csv's last test row before its checkpoint); false: null in results.json
  bool test_measured = false;
  double train_loss = 0, train_accuracy = 0;  ///< chief's last log interval
  /// chief: train_loss/train_accuracy hold a measured interval (this session's, or for a resumed
  /// one that measured none, metrics.csv's last train row before its checkpoint)
  bool train_measured = false;
  double train_seconds = 0;  ///< time inside training steps
  double train_peak_rss_mib =
      0;                    ///< peak RSS when the last training step ended (before checkpoints)
  double wall_seconds = 0;  ///< whole training incl. evaluation and checkpoints
  /// train_seconds split (this worker, this process): waiting for the batch reader, forward +
  /// backward (train_step), exposed communication (waiting for the exchange after backward:
  /// allreduce buckets not yet summed, push-pull), the optimizer (allreduce; the ps applies it
  /// in ps modes)
  double data_seconds = 0, compute_seconds = 0, exchange_seconds = 0, optimizer_seconds = 0;
  /// chief: the step's anatomy, ms per step averaged over the workers: data, compute, exposed
  /// communication, optimizer
  double anatomy_ms[4] = {0, 0, 0, 0};
  /// chief, when every worker ran ≥ 2 steps in this process: the same without each worker's
  /// first step (primitive creation, first touch, workers starting apart: a short run's
  /// transient), and samples/s after it: the sum over the workers of each one's own samples that
  /// the run used (not a backup worker's dropped gradients) over its own steps' time (sync: the
  /// global rate; async: what the workers train together, as the host's ceiling sums independent
  /// runs); else has_after_first false
  bool has_after_first = false;
  double anatomy_after_first_ms[4] = {0, 0, 0, 0};
  double samples_per_sec_after_first = 0;
  /// chief, when it trained a step in this process: samples/s of the session (results.json
  /// samples_per_sec). Workers in step (Worker::in_step()): `samples` over the chief's
  /// train_seconds; else the sum over the workers of each one's used samples over its own steps'
  /// time, the other workers having trained on while the chief evaluated, checkpointed or waited
  /// at an epoch's end
  double samples_per_sec = 0;
  /// chief: each worker's forward + backward and exposed communication, ms per step, in worker
  /// order (a sync step waits for its slowest worker: their spread is the stragglers' cost); the
  /// *_after_first ones without each worker's first step (filled when has_after_first)
  std::vector<double> compute_ms_per_worker, exposed_ms_per_worker;
  std::vector<double> compute_ms_per_worker_after_first, exposed_ms_per_worker_after_first;
  std::int64_t samples = 0;  ///< samples trained by all workers (async: their pushes' samples)
  std::int64_t skipped = 0;
  double push_bytes_per_step =
      0;                  ///< ps modes: this worker's GradientExchange::push_bytes_per_step
  std::string allreduce;  ///< GradientExchange::allreduce_algorithm ("" in the ps modes)
  /// encoded images left out as bad (--on-bad-image skip), all workers, training and evaluation
  std::int64_t bad_images = 0;
  /// --cache-mb on an encoded training file: rows and MiB held per worker (every worker holds the
  /// same prefix of the file), training reads served from memory and from HDF5, all workers
  std::int64_t encoded_cache_rows = 0, encoded_cache_hits = 0, encoded_cache_misses = 0;
  double encoded_cache_mb = 0;
  std::string stopped_by = "completed";  ///< completed | max_steps | signal
  /// --target-accuracy: wall seconds and global step of the first evaluation reaching it (< 0: not)
  double time_to_accuracy = -1;
  /// chief: the slowest worker's p50 / p90 / max step time (data + compute + exchange), ms
  double step_ms_p50 = 0, step_ms_p90 = 0, step_ms_max = 0;
  std::int64_t step_at_accuracy = -1;
};

class Worker {
 public:
  /// `pipe`: a pipelined run's group (else nullptr); `cluster` is then the stage's replicas
  /// (PipelineGroup::stage_cluster()), the model this worker's stage, and `resume` its slice.
  Worker(const Config& c, const Cluster& cluster, const TrainPlan& plan, Backend& backend,
         std::optional<CheckpointState> resume, const PipelineGroup* pipe = nullptr);
  ~Worker();
  WorkerOutcome run();

 private:
  /// now_seconds() at the points of one training step.
  struct StepTimes {
    double start = 0, data_done = 0, compute_done = 0, exchange_done = 0;
  };
  /// One epoch's training steps from local step first_step: per step next_batch → compute_step →
  /// the exchange → account_step → end_step; stops at --max-steps or a stop request.
  void train_epoch(int epoch, std::int64_t first_step);
  /// The bad-image and encoded-cache counts summed over the workers (collective) into out_ and
  /// logged by the chief.
  void sum_input_counts();
  /// The prefetching reader of this worker's shard of `epoch`, positioned at local step `start`.
  void open_reader(std::optional<BatchReader>& reader, int epoch, std::int64_t start);
  /// Local step `s`'s batch in x_, y_ (from `reader`; none: the synthetic batch already there);
  /// returns its sample count (0: this worker's shard is done).
  int next_batch(std::optional<BatchReader>& reader, HostBatch& batch, std::int64_t s);
  /// `batch` into x_, y_ through `up`, and the model told the form x_ then holds (a training
  /// and a test file may differ: uint8 and float32).
  void upload(BatchUpload& up, const HostBatch& batch);
  /// Forward and backward of local step `s` (n samples), the exchange begun as gradients become
  /// final (and the DTRAIN_FAULT hooks); t1: when the batch was ready. True when the step is
  /// timed on the device (read one step late, read_device_compute()).
  bool compute_step(std::int64_t s, int n, bool stop_local, double t1);
  /// The step's times, counts and global step into the run's and the log interval's totals.
  void account_step(const ExchangeResult& r, std::int64_t s, int n, bool on_device,
                    const StepTimes& t);
  /// After local step `s`: the log line, the checkpointer's --checkpoint-every, --eval-every.
  void end_step(int epoch, std::int64_t s);
  /// After train_epoch(): the workers agree why the loop stopped; a stop in the middle of the
  /// epoch checkpoints; then the batchnorm averaging, the evaluation and the epoch-end checkpoint.
  /// False when training ends here (a signal, --max-steps). Collective over the workers.
  bool end_epoch(int epoch);
  /// end_epoch()'s agreement: worker_sum() of v[0..n) over the workers. Async (not pipelined):
  /// the deadline counts --timeout from the last time a pull saw the global step move, so that
  /// a worker ending its shard early waits for slower ones however long their epoch takes.
  void meet_at_epoch_end(int epoch, double* v, int n);
  /// Test-set evaluation. all workers (default): each its shard, summed (collective); alone: this
  /// worker on the whole test set (async --eval-every, chief only). Chief: logs, metrics.csv row.
  /// A stop signal during it (not pipelined) leaves it off after the batch in progress, with no
  /// result: stop_signal_ is set instead (on every worker when collective).
  void evaluate(int epoch, bool epoch_end = true, bool alone = false);
  /// chief, resumed: what metrics.csv recorded up to the checkpoint's global step: the time to
  /// --target-accuracy, the last train row (train_loss/train_accuracy) and whether the
  /// checkpoint's step was evaluated (recorded_eval_step_)
  void recall_before_checkpoint();
  /// --eval-every after a step that crossed a multiple of N global steps (see worker.cpp): every
  /// worker in lockstep (collective), else the chief alone (the others return at once).
  void evaluate_between(int epoch);
  void note_target(double accuracy, std::int64_t step, double wall);  ///< --target-accuracy
  void average_model_state();
  /// Where training stands in `epoch`: global_step_ and cursor_ (the checkpointer's position).
  [[nodiscard]] TrainPosition position(int epoch) const {
    return {global_step_, epoch, cursor_, worker_steps_};
  }
  /// Async, where every worker has left the epoch's loop (a stop, --max-steps): every worker's
  /// cursor to the chief's worker_steps_, so that the checkpoint resumes each at its own.
  void gather_cursors();
  /// The ps dropped this step's push because the run ends (a stop, --max-steps), not because it
  /// came late: its batch is not part of the run (no train row, not in the position).
  [[nodiscard]] bool past_the_end(const ExchangeResult& r) const;
  /// The chief's log line and metrics.csv row of the interval since the last one (every worker
  /// calls it: it resets the interval's loss sums and counters), then start_log_interval(now).
  void log_interval(int epoch);
  /// A new log interval from `now` (now_seconds()): its time, global step, exposed communication
  /// and counts start there (after a log line, and at an epoch's first step, so that the epoch-end
  /// evaluation and checkpoint before it are no interval's time).
  void start_log_interval(double now);
  /// True when no worker trains while the chief evaluates or checkpoints alone: every worker moves
  /// in step (allreduce), or through the ps without backup workers (each update waits for every
  /// worker's push). Else (async, SSP, backup workers) the others train on.
  [[nodiscard]] bool in_step() const;
  /// The chief's log line: step, epoch, loss, accuracy, ms/step, samples/s, lr, wall time, % of
  /// the run's global steps done, ETA (async: staleness). `measured` false: this worker trained
  /// on no sample in the interval, and loss and accuracy show as "-".
  [[nodiscard]] std::string progress_line(int epoch, bool measured, double loss, double acc,
                                          double ms_per_step, double sps, double lr, double wall,
                                          double dt, double staleness) const;
  /// This worker's row of summarize_step_times(): step time p50, p90, max (ms); data, compute,
  /// exposed communication, optimizer (ms per step); the same four after its first step and its
  /// used samples per second after it (-1 with fewer than 2 steps); its used samples per second
  /// over all its steps (0 without a step).
  [[nodiscard]] std::vector<double> own_step_times() const;
  /// Gathers every worker's step-time p50/p90/max (collective over the workers); the chief logs
  /// them and keeps the slowest worker's in out_.
  void summarize_step_times();
  /// DTRAIN_FAULT hooks (test-only); step_seconds: this step's forward + backward time
  void inject_faults(double step_seconds);
  /// DTRAIN_FAULT nan: writes a NaN into the last parameter tensor's gradient.
  void inject_nan_gradient();
  void make_synthetic_batch();  ///< --synthetic: fills x_ and y_ once
  /// --cuda-graph on a GPU worker: installs the model's step graphs where the step can be
  /// captured (cuda_graph_off_reason), or logs why not; InputError for `on` where it cannot.
  void install_step_graphs();
  /// Inference forward of the n samples in x_, y_, stats into stats_ (through the pipeline).
  void evaluate_batch(int n);
  /// --profile-steps: turns the backend's profiler range on when global_step enters the window
  /// and off when it leaves (or the run ends: profile(-1)).
  void profile(std::int64_t global_step);
  /// Adds the device time of the last step timed on the device to compute_seconds_, unless read.
  void read_device_compute();

  const Config& c_;
  const Cluster& cluster_;
  const TrainPlan& plan_;
  Backend& be_;
  const PipelineGroup* pipe_;
  /// The worker that logs, writes metrics.csv and reports: the chief (in a pipeline, worker 0
  /// runs the last stage and is its replicas' chief too).
  const bool reports_;
  Model model_;
  std::unique_ptr<PipelineRunner> runner_;  ///< pipelined runs
  std::unique_ptr<GradientExchange> exchange_;
  std::optional<Checkpointer> checkpointer_;  ///< made right after exchange_, which it refers to
  std::optional<CheckpointState> resume_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<EncodedCache> encoded_cache_;  ///< --cache-mb on an encoded training file
  /// The batch: n×C×H×W fp32 NCHW, or as the first layer reads it (BatchUpload::form(): bf16
  /// in half of it under --precision bf16).
  DeviceBuffer<float> x_, stats_;
  DeviceBuffer<std::int32_t> y_;
  /// Batches into x_, y_: the training file's (not synthetic), the test file's (made at the
  /// first evaluation).
  std::optional<BatchUpload> train_upload_, test_upload_;
  int w_;
  std::int64_t global_step_ = 0;
  std::int64_t cursor_ = 0;                 ///< local steps done in the current epoch
  std::vector<std::int64_t> worker_steps_;  ///< gather_cursors(); empty inside the epoch
  std::int64_t eval_bucket_ = 0;  ///< global_step / eval_every at the last --eval-every check
  bool stop_signal_ = false, stop_max_ = false;
  // log interval accumulators
  double t_start_ = 0, t_log_ = 0, train_seconds_ = 0, prior_wall_ = 0;
  /// seconds of the log interval in which this worker evaluated or checkpointed (--eval-every,
  /// --checkpoint-every): no step time of its own
  double log_paused_ = 0;
  /// chief, resumed: the global step whose evaluation metrics.csv holds already (the checkpoint
  /// was written after it), which evaluate() then reports without a second row; else -1
  std::int64_t recorded_eval_step_ = -1;
  double data_seconds_ = 0, compute_seconds_ = 0, exchange_seconds_ = 0, optimizer_seconds_ = 0;
  std::int64_t log_steps_ = 0, log_samples_local_ = 0, log_samples_global_ = 0;
  double log_exchange_start_ = 0;      ///< exchange_seconds_ at the start of the log interval
  std::int64_t log_global_start_ = 0;  ///< global_step at the start of the log interval
  std::vector<float> step_ms_;         ///< this worker's step times in this process, ms
  double staleness_sum_ = 0;
  std::int64_t pushes_ = 0;
  /// The stopwatch points (Backend::mark) of the last step timed on the device: 0 or 2 (and +1),
  /// -1 before any; device_read_ once its time is in compute_seconds_.
  int device_compute_at_ = -1;
  bool device_read_ = true;
  int device_reads_ = 0;  ///< steps whose device time is in compute_seconds_
  /// train, data, compute, exchange and optimizer seconds when the first step of this process was
  /// accounted (compute: when its device time was read, on a GPU)
  double first_[5] = {0, 0, 0, 0, 0};
  /// samples this worker trained in this process in steps the exchange applied (not a gradient
  /// the ps dropped: late, or past the run's end)
  std::int64_t applied_samples_ = 0;
  std::int64_t first_applied_samples_ = 0;  ///< … by the end of its first step
  std::int64_t train_bad_images_ = 0;       ///< images its training readers skipped as bad
  StepRange profile_;                       ///< --profile-steps
  bool profiling_ = false;                  ///< between Backend::set_profiling(true) and (false)
  WorkerOutcome out_;
};

}  // namespace dtrain
