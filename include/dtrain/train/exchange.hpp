// dtrain/train/exchange.hpp — how a worker turns its local gradient into new parameters: the one
// seam between the training loop and the training modes, and the only code that knows the mode.
// One class per ExchangeKind (core/config.hpp):
//   allreduce   (--mode sync --num-ps 0): allreduce of the gradient over the workers, then the same
//               optimizer step on every worker (bit-identical replicas).
//   ps_async    (--mode async): fused push-pull with the parameter servers, each push applied on
//               arrival (Downpour SGD, Dean et al. 2012).
//   ps_bounded  (--mode async --max-staleness S): push-pull; the ps applies one update per global
//               step from every worker's gradient and answers a worker only once its parameters
//               are at most S steps old (stale synchronous parallel, Ho et al. 2013).
//   ps_sync     (--mode sync --num-ps K): push-pull; the ps applies one update per global step
//               from the first --replicas-to-aggregate gradients computed on that step's
//               parameters and drops later ones (TensorFlow's SyncReplicasOptimizer; backup
//               workers, Chen et al. 2016).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/io/checkpoint.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/train/trainer.hpp"

namespace dtrain {

struct ExchangeResult {
  /// The global step this worker trains at next: after this step's update (allreduce, async:
  /// the ps's count; sync through the ps: the step of the parameters received; bounded
  /// staleness: this worker's clock, the updates its pushes so far complete)
  std::int64_t global_step = 0;
  /// ps modes: false when the gradient was not used (non-finite, or dropped late); allreduce
  /// learns it one step later (skipped_steps())
  bool applied = true;
  /// ps modes: the ps did not use this step's samples — it came late (sync with
  /// --replicas-to-aggregate), or the ps had stopped applying updates (a stop, --max-steps):
  /// the batch is not part of the run (its data position stays before it)
  bool dropped = false;
  bool stop = false;  ///< a rank asked to stop (signal), agreed by all workers
  double staleness =
      0;  ///< ps modes: global steps between this gradient's parameters and its update
  std::int64_t samples = 0;      ///< samples of all workers this step stands for (throughput)
  double optimizer_seconds = 0;  ///< this worker's time applying the optimizer (allreduce)
};

class GradientExchange {
 public:
  virtual ~GradientExchange() = default;
  /// Sets the starting parameters on every worker: from `resume` if given, else the chief's
  /// model.initialize(seed) (allreduce: broadcast; ps: the chief loads the ps, workers pull).
  /// Collective over the workers. Throws TimeoutError (a RuntimeFault) past --timeout,
  /// LibraryError when an MPI or device call fails.
  virtual void start(Model& model, const CheckpointState* resume, std::int64_t global_step) = 0;
  /// Local training steps of this worker in one epoch (its shard of the training set).
  [[nodiscard]] virtual std::int64_t local_steps(int epoch) const = 0;
  /// True when local step `s` (0-based; s steps done) need not run: the epoch is over for this
  /// worker (its steps are done, or — sync through the ps — the epoch's global steps are).
  [[nodiscard]] virtual bool epoch_over(int epoch, std::int64_t s, std::int64_t global_step) const;
  /// The factor train_step() applies to this worker's summed loss gradient in local step `s`
  /// with `n` samples: 1 / all workers' samples of the step (allreduce sums), else 1 / n (the ps
  /// weights each gradient by its samples). 0 when n == 0.
  [[nodiscard]] virtual float gradient_scale(std::int64_t s, int n) const = 0;
  /// Before model.train_step() of local step `s` with `n` samples: returns the callback that
  /// train_step() calls as gradients become final (Model::GradsFinal), so that the exchange can
  /// start while backward runs (bucketed allreduce), or an empty one. `stop_local` is this
  /// rank's stop request (the same value step() receives).
  virtual GradsFinal begin_step(Model& model, std::int64_t s, int n, bool stop_local);
  /// After model.train_step() of local step `s`: exchanges model.grads() (gradient of this
  /// worker's `n` samples, pre-scaled by gradient_scale()) and leaves updated parameters in
  /// model.params(). `stop_local` is this rank's stop request. On a non-finite gradient, unless
  /// --skip-nonfinite: the ps exchanges throw RuntimeFault at once; the allreduce exchange throws
  /// ReportedError(kExitFault) (comm/guard.hpp; the chief has logged the message) one step later,
  /// or at settle(). Past --timeout: TimeoutError (with MPI_THREAD_MULTIPLE on the CPU, a bucket
  /// summed on this thread is watched by the communication thread, which calls MPI_Abort with
  /// exit code 4). LibraryError when an MPI, NCCL or CUDA call fails.
  virtual ExchangeResult step(Model& model, std::int64_t s, int n, bool stop_local) = 0;
  /// Makes model.params() the current global parameters (ps: pull, after every update this
  /// worker's pushes take part in; allreduce: no-op). Returns the current global_step and the
  /// samples of all workers behind the global steps it moved past since this worker's last
  /// step() (async: other workers' last pushes of the epoch), so that throughput counts them.
  /// Throws, allreduce: as settle(); ps: TimeoutError past --timeout, LibraryError when an MPI
  /// call fails.
  virtual ExchangeResult refresh(Model& model) = 0;
  /// Fills params, m, v of a checkpoint and returns its global_step (allreduce: every worker;
  /// ps: the chief alone). Throws, allreduce: as settle(), and LibraryError when a copy from the
  /// device fails; ps: TimeoutError past --timeout, LibraryError when an MPI call fails.
  virtual std::int64_t snapshot(Model& model, CheckpointState& s) = 0;
  /// Reads what step() left to be read later (allreduce: the gradient checks of the last steps,
  /// Backend::check_gradient), so that nothing is saved, evaluated or logged from a step that
  /// turns out non-finite: the worker calls it on every worker before a checkpoint, an
  /// evaluation, a log line and the end. Throws as step() does for a non-finite gradient.
  virtual void settle(Model& model) { (void)model; }
  /// Ends the exchange (ps: DONE to every ps; allreduce: nothing). ps: throws TimeoutError past
  /// --timeout, LibraryError when an MPI call fails.
  virtual void finish() = 0;
  /// True when every worker stands at the same global step after every step (allreduce):
  /// evaluation and checkpoints may then be collective over the workers at any step. Otherwise
  /// only epoch ends are common points and mid-epoch evaluation/checkpoints are the chief's.
  [[nodiscard]] virtual bool lockstep() const = 0;
  /// Whether step() waits for the device's work (GPU gradients summed by NCCL or staged through
  /// host memory, pushed to a ps). The worker then waits for backward before step(), so that
  /// compute is not billed to the exchange; an exchange that only queues work (allreduce with one
  /// GPU worker: nothing to sum, the gradient check read a step late) lets the host run a step
  /// ahead of the device, and the worker times compute on the device (Backend::mark).
  [[nodiscard]] virtual bool waits_for_device() const { return true; }
  /// The longest step() and refresh() wait on another rank before they throw TimeoutError, in
  /// seconds: --timeout (comm_timeout()); 2 × --timeout where a ps holds the reply until the other
  /// workers' pushes (sync through the ps, SSP).
  [[nodiscard]] virtual double wait_limit() const;
  /// Non-finite gradients skipped (--skip-nonfinite) by this worker (lockstep: by all, identical).
  [[nodiscard]] virtual std::int64_t skipped_steps() const = 0;
  /// ps modes: gradient bytes this worker pushed per push, all ps together (MPI payload in the
  /// --wire-dtype's bytes, shared ring slots in 4 bytes a value; PsClient::pushed_bytes); 0
  /// before the first push and for the allreduce.
  [[nodiscard]] virtual double push_bytes_per_step() const { return 0; }
  /// The sync allreduce's algorithm as it runs (after --allreduce auto's choice and fallback):
  /// "hierarchical", "mpi" or "nccl"; "none" for one GPU worker (nothing to sum); "" in the ps
  /// modes.
  [[nodiscard]] virtual std::string allreduce_algorithm() const { return ""; }
};

/// The exchange of exchange_kind(c) for this worker. `plan` must outlive it. Throws InputError
/// for an unknown --optimizer or --no-weight-decay-on item, or (CPU allreduce) a --bucket-mb
/// bucket of INT_MAX floats or more; LibraryError when an allocation or an MPI, CUDA or NCCL
/// set-up call fails; TimeoutError when the NCCL unique id does not arrive within --timeout.
/// --allreduce is ignored on the CPU (always MPI buckets).
std::unique_ptr<GradientExchange> make_exchange(const Config& c, const Cluster& cluster,
                                                const TrainPlan& plan, Model& model);

/// A pipelined run's exchange: a wrapper whose step() and refresh() return, on every stage of one
/// replica, the smallest global step over the stages (the ps modes count each stage's own; in
/// lockstep they are equal) and `stop` when any stage stops (a signal seen by one stage) — one
/// MPI_Iallreduce of two integers over `pipe` (the replica's stages, PipelineGroup::pipe()) — so
/// that the stages leave their loops, checkpoint and evaluate at the same local step. The stop is
/// agreed in begin_step() already (one MPI_Iallreduce of one integer), before any stage pushes:
/// every stage's ps then applies the same steps. Those calls then also throw TimeoutError past
/// inner->wait_limit() + --timeout (a stage stuck on its ps is named by that stage first) and
/// LibraryError when the MPI call fails. An error
/// the stage has reported (ReportedError from `inner`: a non-finite gradient) ends the job with
/// MPI_Abort from `stage_leader` (replica 0 of the stage, the one that reported it): the other
/// stages cannot learn of it.
std::unique_ptr<GradientExchange> agree_along_pipeline(std::unique_ptr<GradientExchange> inner,
                                                       MPI_Comm pipe, bool stage_leader);

/// Name of the first parameter tensor holding a non-finite value in host buffer `grads`, or "".
std::string first_nonfinite_tensor(const Model& model, const float* grads);
/// Name of the parameter tensor holding flat parameter index `index`, or "" past the end.
std::string tensor_at(const Model& model, std::size_t index);

}  // namespace dtrain
