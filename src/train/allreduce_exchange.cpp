// dtrain/train/allreduce_exchange.cpp — ExchangeKind::allreduce: the workers sum their gradients
// (pre-scaled by 1 / the step's samples over all workers) with an allreduce, and every worker
// applies the same optimizer step, so the replicas stay bit-identical. The gradient is summed in
// buckets of at most --bucket-mb (plan_buckets: a 25th of it at both ends) while backward runs, the
// stop flag riding in the spare float of the first bucket: on CPU by MPI on a communication thread
// (collectives/bucketed.hpp; hierarchically, the gradient placed in the node's shared memory and
// summed there in place), on GPU by NCCL on its own stream, each bucket queued behind the
// backward kernels that make it (collectives/allreduce.hpp, start_sum). With --overlap false, or
// GPU gradients staged through host memory for MPI (--allreduce mpi), one allreduce after backward,
// then a one-float allreduce of the flag. --allreduce none: that flag alone (no sum). A pipeline's
// stage sums among its replicas, which meet before each step (meet()); a stage without parameters
// has no optimizer.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/collectives/allreduce.hpp"
#include "dtrain/collectives/bucketed.hpp"
#include "dtrain/collectives/wire.hpp"
#include "dtrain/comm/guard.hpp"
#include "dtrain/comm/network.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timeline.hpp"
#include "dtrain/dnn/float16.hpp"  // wire_bytes
#include "dtrain/optim/optimizer.hpp"
#include "exchange_impl.hpp"
#include "host_mirror.hpp"

namespace dtrain {
namespace {

/// Test only: DTRAIN_TEST_RANKS_PER_NODE=k makes --allreduce hierarchical treat every k
/// consecutive workers as one node (several leaders on one machine); unset or 0: real nodes.
int test_ranks_per_node() {
  const char* v = std::getenv("DTRAIN_TEST_RANKS_PER_NODE");
  return v != nullptr ? std::max(0, std::atoi(v)) : 0;
}

/// The buckets of `count` gradient floats: --bucket-mb's plan, latency-aware for the ring of
/// `comm`'s ranks over --bucket-link (collectives/bucketed.hpp) unless that is "off" — a link spec,
/// or "probe": the ring measured now over `comm` (collective), the chief's figures on every rank —
/// the same on every rank (the same options, counts and figures). The chief logs the plan once.
/// Throws InputError for a bad --bucket-link (comm/network.hpp's parse_link), on every rank.
std::vector<Bucket> gradient_buckets(const Config& c, MPI_Comm comm, std::size_t count,
                                     double value_bytes, bool chief) {
  constexpr double kMiB = 1024.0 * 1024.0;
  const auto floats = static_cast<std::size_t>(c.bucket_mb * kMiB / sizeof(float));
  char why[320] = "--bucket-link off";
  std::vector<Bucket> b = plan_buckets(count, floats);
  if (c.bucket_link != "off") {
    int ranks = 1;
    DT_CHECK_MPI(MPI_Comm_size(comm, &ranks));
    const RingCost ring =
        c.bucket_link == "probe"
            ? probe_ring(comm, value_bytes)
            : ring_cost(parse_link(c.bucket_link, "--bucket-link"), ranks, value_bytes);
    b = plan_buckets(count, floats, ring);
    std::snprintf(why, sizeof why,
                  "--bucket-link %s: p=%d, α=%.2f µs, β=%.2f GB/s, %g bytes a value: buckets of "
                  "at least %zu floats where that exceeds --bucket-mb's end buckets",
                  c.bucket_link.c_str(), ranks, ring.alpha_s * 1e6, ring.bytes_per_s / 1e9,
                  value_bytes, latency_min_bucket_floats(ring));
  }
  if (chief) {
    const std::size_t end = b.back().end - b.back().begin;
    // The cap as planned: --bucket-mb, or the latency minimum where --bucket-link raised it.
    std::size_t largest = 0;
    for (const Bucket& k : b) largest = std::max(largest, k.end - k.begin);
    // --bucket-mb 0: no cap (one bucket), not buckets of "<= 0 MiB".
    char cap[64] = "uncapped (--bucket-mb 0)";
    if (c.bucket_mb > 0)
      std::snprintf(cap, sizeof cap, "of <= %g MiB",
                    std::max(c.bucket_mb, 4.0 * static_cast<double>(largest) / kMiB));
    char line[512];
    std::snprintf(line, sizeof line, "# buckets: %zu %s, end bucket %zu floats (%.2f MiB); %s",
                  b.size(), cap, end, 4.0 * static_cast<double>(end) / kMiB, why);
    log_info(line);
  }
  return b;
}

/// " (world ranks 3, 5)": the world ranks of `comm`'s other ranks (a pipeline stage's other
/// replicas), for a wait that cannot tell which of them is late.
std::string other_world_ranks(MPI_Comm comm) {
  const int me = comm_rank(comm), size = comm_size(comm);
  const std::vector<int> rank = world_ranks(comm);
  std::string others;
  for (int r = 0; r < size; ++r)
    if (r != me)
      others += (others.empty() ? "" : ", ") + std::to_string(rank[static_cast<std::size_t>(r)]);
  return " (world rank" + std::string(size > 2 ? "s " : " ") + others + ")";
}

class AllreduceExchange final : public GradientExchange {
 public:
  AllreduceExchange(const Config& c, const Cluster& cluster, const TrainPlan& plan, Model& model)
      : c_(c), plan_(plan), comm_(cluster.role_comm()), chief_(cluster.is_chief()),
        mirror_(model.backend(), model.param_count()) {
    if (c.pipeline_stages > 1 && plan.workers > 1) {
      meeting_ = "pipeline: the replicas of this stage meeting before the step after global "
                 "step ";
      others_ = other_world_ranks(comm_);
    }
    // A pipeline stage without parameters (relu, pooling, flatten) has nothing to update: no
    // optimizer (LARS and LAMB, whose trust ratios are per tensor, could not be made for it).
    if (model.param_count() > 0)
      opt_.emplace(c, model.backend(), model.param_count(), plan.total_steps,
                   no_decay_ranges(c, model.param_tensors(), 0, model.param_count()),
                   is_layerwise(c.optimizer)
                       ? param_segments(model.param_tensors(), model.param_count())
                       : std::vector<ParamSegment>{});
    Backend& be = model.backend();
    if (c.allreduce == AllreduceOption::none) {  // step(): only the one-float stop agreement
      if (chief_ && plan.workers > 1)
        log_warn("--allreduce none: the workers' gradients are not summed; each applies its own "
                 "and the replicas drift apart (a benchmark of lock-step compute, not training)");
      // Each worker's own check: one that stopped alone would leave the others waiting for it.
      c_.skip_nonfinite = true;
      return;
    }
    const bool gpu = be.device() == Device::cuda;
    const bool automatic = c.allreduce == AllreduceOption::automatic;
    const bool nccl =
        gpu && (c.allreduce == AllreduceOption::nccl || (automatic && !c.allow_gpu_sharing));
    const WireDtype wire = c.wire_dtype;
    if (!gpu) {
      DT_REQUIRE(c.allreduce != AllreduceOption::nccl,
                 "option --allreduce: nccl needs GPU workers (--device cuda); CPU workers take "
                 "auto, mpi or hierarchical");
      ReduceOptions how;
      // auto: hierarchical (measured 1.6-4.8x bare MPI_Allreduce on 2-3 ranks of one node,
      // docs/results/communication/; with a 16-bit --wire-dtype, 16 bits in the node's memory
      // too, on one node the flat 16-bit sum's bits), MPI_Allreduce or the flat 16-bit sum
      // where a node cannot share memory.
      how.hierarchical = c.allreduce == AllreduceOption::hierarchical || automatic;
      how.fallback_to_flat = automatic;
      how.wire = wire;
      how.ranks_per_node = test_ranks_per_node();
      how.comm_cpu = cluster.me().comm_cpu;  // --pin-threads
      how.in_place = true;  // fp32: the gradient itself lives in the node's shared memory
      buckets_ = std::make_unique<BucketedAllreduce>(
          comm_, model.param_count(),
          gradient_buckets(c, comm_, model.param_count(), static_cast<double>(wire_bytes(wire)),
                           chief_),
          c.overlap, how);
      if (float* home = buckets_->home()) {
        model.place_gradients(home);
        placed_ = &model;
      }
      return;
    }
    DT_REQUIRE(c.allreduce != AllreduceOption::hierarchical,
               "option --allreduce: hierarchical is for CPU workers (GPU workers: nccl, whose "
               "rings already run inside the node, or mpi)");
    DT_REQUIRE(!nccl || wire == WireDtype::fp32,
               "option --wire-dtype: " + std::string(to_string(wire)) +
                   " applies to the MPI paths; with NCCL use --allreduce mpi or --wire-dtype fp32");
    // One GPU worker: the sum over one replica is its own gradient (PyTorch does no allreduce on
    // one GPU either); skipping it saves a launch, a poll and, for --allreduce mpi, two copies.
    if (plan.workers == 1) return;
    nccl_ = nccl;
    allreduce_ = nccl ? make_nccl_allreduce(comm_, be)
                      : make_mpi_allreduce(comm_, be, model.param_count(), INT_MAX, wire);
    // NCCL: buckets summed on its stream as backward queues their last kernels, the flag in the
    // spare float of the first (as on CPU). MPI through host memory: one sum after backward.
    if (allreduce_->asynchronous() && c.overlap) {
      gpu_buckets_ = gradient_buckets(c, comm_, model.param_count(), 4, chief_);
    }
  }

  /// The model's gradient goes back to memory of its own before the shared segment is unmapped.
  ~AllreduceExchange() override {
    if (placed_ != nullptr) placed_->place_gradients(nullptr);
  }
  AllreduceExchange(const AllreduceExchange&) = delete;
  AllreduceExchange& operator=(const AllreduceExchange&) = delete;

  GradsFinal begin_step(Model& model, std::int64_t /*s*/, int /*n*/, bool stop_local) override {
    meet();
    if (!gpu_buckets_.empty()) {
      float* grads = model.grads();
      const std::size_t P = model.param_count();
      model.backend().fill(grads + P, stop_local ? 1.0f : 0.0f, 1);  // queued before backward
      launched_ = 0;
      return [this, grads, P](std::size_t from) { start_buckets(grads, P, from); };
    }
    if (!buckets_) return {};
    buckets_->begin(model.grads(), stop_local ? 1.0f : 0.0f);
    if (!buckets_->overlapping()) return {};
    return [this](std::size_t from) { buckets_->ready(from); };
  }

  /// A pipeline's stage with several replicas: they meet before each step's compute, waiting
  /// 3 × --timeout. A stuck rank's stage peers, whose sum of its last step may have gone through
  /// (its buckets handed to its communication thread), would otherwise wait in the next step's
  /// sum (--timeout) for it, and the peers of its pipeline neighbour — which waits for it in the
  /// stages' agreement (2 × --timeout) — for that healthy neighbour: named at the same moment.
  /// Here they outwait the agreement, whose rank names the stuck one (docs/faults.md).
  void meet() const {
    if (meeting_.empty()) return;
    MPI_Request req;
    DT_CHECK_MPI(MPI_Ibarrier(comm_, &req));
    wait_one(req, 3 * comm_timeout(), meeting_ + std::to_string(global_step_) + others_);
  }

  /// GPU: starts, in plan order, every bucket lying inside grads[from, P) not started yet; the
  /// first (ending at P) carries the spare float too.
  void start_buckets(float* grads, std::size_t P, std::size_t from) {
    for (; launched_ < gpu_buckets_.size() && gpu_buckets_[launched_].begin >= from; ++launched_) {
      const Bucket& b = gpu_buckets_[launched_];
      allreduce_->start_sum(grads + b.begin, (b.end == P ? P + 1 : b.end) - b.begin);
    }
  }

  void start(Model& model, const CheckpointState* resume, std::int64_t global_step) override {
    global_step_ = global_step;
    const std::size_t P = model.param_count();
    float* host = mirror_.buffer(model.params());
    if (resume) {
      std::copy(resume->params.begin(), resume->params.end(), host);
      mirror_.to_device(model.params());
      Backend& be = model.backend();
      if (m() && !resume->m.empty()) be.copy_to_device(m(), resume->m.data(), P * 4);
      if (v() && !resume->v.empty()) be.copy_to_device(v(), resume->v.data(), P * 4);
      return;
    }
    // Same seed on every worker gives the same initial parameters; the broadcast makes it a fact.
    model.initialize(c_.seed);
    host = mirror_.to_host(model.params());
    MPI_Request req;
    DT_CHECK_MPI(MPI_Ibcast(host, static_cast<int>(P), MPI_FLOAT, 0, comm_, &req));
    wait_one(req, comm_timeout(), "broadcast of the initial parameters from the chief");
    mirror_.to_device(model.params());
  }

  [[nodiscard]] std::int64_t local_steps(int /*epoch*/) const override {
    // As many steps as the largest shard needs (worker 0's): a shorter shard contributes an
    // empty batch to the last step, and every replica takes every step.
    return worker_steps_per_epoch(plan_, true, 0);
  }

  [[nodiscard]] float gradient_scale(std::int64_t s, int n) const override {
    // --allreduce none: no sum, each worker applies the mean over its own n samples.
    const std::int64_t all =
        c_.allreduce == AllreduceOption::none ? n : global_samples_at(plan_, s);
    return all > 0 ? 1.0f / static_cast<float>(all) : 0.0f;
  }

  ExchangeResult step(Model& model, std::int64_t s, int /*n*/, bool stop_local) override {
    Backend& be = model.backend();
    float flag = stop_local ? 1.0f : 0.0f;
    {
      const TimelineSpan span("allreduce", "exchange");
      if (buckets_) {
        flag = buckets_->finish(comm_timeout()).flag;
      } else if (!gpu_buckets_.empty()) {
        start_buckets(model.grads(), model.param_count(), 0);
        allreduce_->wait();
        be.copy_to_host(&flag, model.grads() + model.param_count(), sizeof(float));
      } else {
        if (allreduce_) allreduce_->allreduce_sum(model.grads(), model.param_count());
        // Agree on stopping: one tiny allreduce so every replica leaves at the same step.
        MPI_Request req;
        DT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, &flag, 1, MPI_FLOAT, MPI_MAX, comm_, &req));
        wait_one(req, comm_timeout(), "stop-flag allreduce over the workers");
      }
    }
    ExchangeResult r;
    r.stop = flag > 0;
    r.samples = global_samples_at(plan_, s);
    // The gradient check guards the update (a non-finite gradient leaves parameters and optimizer
    // state as they were) and is read one step late, so that a GPU step never waits for the
    // device; every replica holds the same summed gradient and so reads the same answer.
    {
      const TimelineSpan span("optimizer", "optimizer");
      const double t0 = now_seconds();
      be.check_gradient(model.grads(), model.param_count());
      if (opt_) (void)opt_->apply(model.params(), model.grads(), global_step_);
      r.optimizer_seconds = now_seconds() - t0;
    }
    unchecked_.push_back(global_step_);
    r.global_step = ++global_step_;
    if (unchecked_.size() >= static_cast<std::size_t>(Backend::kMaxPendingChecks))
      settle_one(model);
    return r;
  }

  void settle(Model& model) override {
    while (!unchecked_.empty()) settle_one(model);
  }

  /// Reads the oldest unread gradient check: a non-finite gradient ends the run (its update was
  /// skipped, and no checkpoint is written before this answer is read: the last one stays the
  /// newest) or, with --skip-nonfinite, counts as skipped.
  void settle_one(Model& model) {
    const std::int64_t step = unchecked_.front();
    unchecked_.pop_front();
    const std::optional<std::size_t> bad = model.backend().take_gradient_check();
    if (!bad) return;
    if (!c_.skip_nonfinite) {
      // Every worker reads the same answer at the same step and no rank waits on another, so the
      // chief alone reports (one message, not one per worker) and every worker leaves with
      // kExitFault through a clean MPI_Finalize.
      // With 16-bit IEEE halves on the wire the sum itself may overflow (the ps modes check
      // each gradient before it leaves; the allreduce sums in fp16 and sees only the result).
      const std::string msg =
          nonfinite_message(model, *bad, step) +
          (c_.wire_dtype == WireDtype::fp16
               ? "; with --wire-dtype fp16 the gradient is summed in fp16, whose largest value is "
                 "65504: --wire-dtype bf16 keeps fp32's range"
               : "");
      if (chief_) log_error(msg);
      throw ReportedError(kExitFault, msg);
    }
    ++skipped_;
    if (chief_)
      log_warn("skipped global step " + std::to_string(step) +
               ": non-finite gradient (--skip-nonfinite)");
  }

  ExchangeResult refresh(Model& model) override {
    settle(model);
    ExchangeResult r;
    r.global_step = global_step_;
    return r;
  }

  std::int64_t snapshot(Model& model, CheckpointState& s) override {
    settle(model);
    Backend& be = model.backend();
    const std::size_t P = model.param_count();
    s.params.resize(P);
    be.copy_to_host(s.params.data(), model.params(), P * 4);
    s.m.assign(m() ? P : 0, 0.0f);
    s.v.assign(v() ? P : 0, 0.0f);
    if (m()) be.copy_to_host(s.m.data(), m(), P * 4);
    if (v()) be.copy_to_host(s.v.data(), v(), P * 4);
    return global_step_;
  }

  void finish() override {}  // the worker settles before it ends
  [[nodiscard]] bool lockstep() const override { return true; }
  [[nodiscard]] bool waits_for_device() const override {
    return allreduce_ != nullptr || buckets_ != nullptr;
  }
  [[nodiscard]] std::int64_t skipped_steps() const override { return skipped_; }
  [[nodiscard]] std::string allreduce_algorithm() const override {
    if (buckets_) return buckets_->hierarchical() ? "hierarchical" : "mpi";
    if (!allreduce_) return "none";
    return nccl_ ? "nccl" : "mpi";
  }

 private:
  /// The optimizer's moments (nullptr without them, or without an optimizer).
  [[nodiscard]] float* m() const { return opt_ ? opt_->m() : nullptr; }
  [[nodiscard]] float* v() const { return opt_ ? opt_->v() : nullptr; }

  Config c_;
  const TrainPlan& plan_;
  MPI_Comm comm_;
  bool chief_;
  std::optional<Optimizer> opt_;  ///< none for a pipeline stage without parameters
  HostMirror mirror_;
  std::unique_ptr<BucketedAllreduce> buckets_;  ///< CPU
  Model* placed_ = nullptr;  ///< the model whose gradient lives in buckets_->home()
  std::unique_ptr<GradientAllreduce> allreduce_;  ///< GPU
  bool nccl_ = false;                             ///< allreduce_ is NCCL's
  std::vector<Bucket> gpu_buckets_;  ///< GPU with NCCL and --overlap: plan_buckets' buckets
  std::size_t launched_ = 0;         ///< buckets started this step
  std::int64_t global_step_ = 0;
  std::int64_t skipped_ = 0;
  std::deque<std::int64_t> unchecked_;  ///< global steps whose gradient check is unread
  std::string meeting_;  ///< a pipeline's stage of several replicas: what meet() waits in
  std::string others_;   ///< the stage's other replicas' world ranks (meet())
};

}  // namespace

std::unique_ptr<GradientExchange> make_allreduce_exchange(const Config& c, const Cluster& cluster,
                                                          const TrainPlan& plan, Model& model) {
  return std::make_unique<AllreduceExchange>(c, cluster, plan, model);
}

}  // namespace dtrain
