// dtrain/collectives/bucketed.hpp — the flat gradient reduced in buckets while backward still runs
// (PyTorch DDP's reducer, Li et al. 2020 "PyTorch Distributed", VLDB; Horovod's tensor fusion).
//
// The gradient buffer (host floats, N×... flattened: the model's parameters in line order) is cut
// into buckets that backward makes final one after the other (plan_buckets, below). As the model
// reports that grads[from, count) are final, every bucket inside that range is handed, in the
// same order on every rank, to a communication thread that sums it over the workers with
// MPI_Allreduce (Open MPI's tuned blocking algorithms: its non-blocking MPI_Iallreduce reaches a
// third to a half of their bandwidth on shared memory, and needs the caller to drive progress).
// The caller's thread meanwhile computes the next layers' backward.
//
// Readiness is a suffix of the buffer, for graph models too: Model::train_step runs backward in
// reverse line order (a valid reverse topological order, every input being an earlier line),
// each layer's parameters lie in the buffer in line order, and a layer's parameter gradients are
// final after its own backward (layers fused into an earlier one have none). So after layer i,
// grads[first parameter of i, count) are final, and a bucket [begin, end) is complete — all its
// tensors final — once a reported `from` is ≤ begin. A bucket may split a layer's tensor: it
// then waits for that layer, like one holding it whole.
//
// Bucket sizes. The communication after backward (the exposed part) is the last-ready bucket —
// the one holding the first layers, final only when backward ends — plus whatever backlog the
// thread still has then. Cutting --bucket-mb buckets from the end of the buffer left the
// remainder there: 22.5 MiB of ResNet-50's 97.5 at 25 MiB, all of it summed after backward. So
// both ends are small, in PyTorch DDP's manner (bucket_cap_mb = 25 MiB, its first bucket
// first_bucket_bytes = 1 MiB), with s = --bucket-mb / 25 (DDP's 1 MiB at 25 MiB):
//   - the first bucket holds the last s floats: the sums start as soon as the last layers are
//     final, not after 25 MiB of them (DDP's reason);
//   - the last bucket holds the first s floats (DDP's last is whatever remains), and the buckets
//     before it double towards the cap — s, 2s, 4s, ... from the front — so that each is ready
//     early enough to be summed behind backward (a 25 MiB bucket right above a 1 MiB tail is
//     ready only when backward reaches that tail, and is exposed itself); the remainder is the
//     piece next to the first bucket.
// dtrain plan's model (plan/scaling_model.hpp), ResNet-50 on the 16-core host at 25 MiB, exposed
// ms per step before → after: 7.6 → 0.3 at 2 workers, 22.8 → 1.0 at 4, 53.3 → 2.4 at 8, and
// 83.7 → 51.0 at 12, where the whole exchange outlasts backward. Why s follows the cap instead of
// staying 1 MiB: every bucket pays the collective's latency (a flat ring's 2(n−1)·α), which on a
// 512-rank ring is about 3 ms; there more buckets lose, and a larger --bucket-mb must make fewer
// and larger ones, the small ends included (the same model, 512 H200s on HDR InfiniBand: with a
// fixed 1 MiB end at least 14.6 ms stay exposed whatever the cap; a 25th of 256 MiB leaves 5.3 ms,
// the old cut from the end 3.9 ms at 25 MiB — at that scale the ring's latency decides, which
// NCCL's trees, not modelled, shorten). One knob, which `dtrain plan` sweeps. Or let the ring
// size them (--bucket-link, plan_buckets with a RingCost): end buckets, and every other, of at
// least p·α·β bytes — no bucket's 2(p−1)α latency above its bandwidth term — which leaves one
// node's plan as it is and gives 512 GPUs three buckets of about 24 MiB (0.84 in the model).
//
// The buckets still pending when backward ends are summed by the caller itself in finish()
// (after the thread's, keeping the order), while the idle thread watches the deadline: past it,
// it reports the bucket like any timeout and ends the job with MPI_Abort.
// How a bucket is summed is ReduceOptions' choice: MPI_Allreduce, hierarchically through the
// node's shared memory (collectives/hierarchical.hpp, --allreduce), or 16 bits on the wire summed
// in fp32 (collectives/wire.hpp, --wire-dtype).
//
// The spare float after the gradients (Model::kGradSpare) carries the step's flag (a rank's stop
// request) inside the first bucket, so the stop decision costs no collective of its own. Whether
// the summed gradient is finite needs no flag at all: every rank holds the same sums and reads
// their finiteness in the optimizer's own pass over them (Backend::optimizer_update), so every
// rank decides the same. One collective per bucket, nothing else per step.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/collectives/hierarchical.hpp"
#include "dtrain/collectives/wire.hpp"
#include "dtrain/comm/network.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {

/// A bucket: floats [begin, end) of the gradient buffer.
struct Bucket {
  std::size_t begin = 0;
  std::size_t end = 0;
  friend bool operator==(const Bucket&, const Bucket&) = default;
};

/// The buckets at both ends of the buffer are this fraction of the largest: 1/25, PyTorch DDP's
/// first_bucket_bytes (1 MiB) at its bucket_cap_mb (25 MiB).
constexpr std::size_t kEndBucketDivisor = 25;

/// The size of the end buckets for buckets of at most `bucket_floats`: bucket_floats / 25, at
/// least 1 float (1 MiB at 25 MiB).
std::size_t end_bucket_floats(std::size_t bucket_floats);

/// Cuts [0, count) into buckets in the order backward makes them final (see the file comment):
/// result[0] = [count − s, count) ends at `count` (the last layers), then, going down the
/// buffer, the pieces cut from the front with sizes s, 2s, 4s, ... up to `bucket_floats` and
/// then `bucket_floats` each — the piece just below result[0] the remainder — ending with
/// result.back() = [0, s) (the first layers), where s = min(end_floats, bucket_floats) (at least
/// 1). Contiguous: result[k].begin == result[k + 1].end. bucket_floats == 0 or count ≤ s: one
/// bucket. count == 0: one empty bucket.
std::vector<Bucket> plan_buckets(std::size_t count, std::size_t bucket_floats,
                                 std::size_t end_floats);
/// The same with end buckets of end_bucket_floats(bucket_floats): the training's plan.
std::vector<Bucket> plan_buckets(std::size_t count, std::size_t bucket_floats);

/// The largest share of a bucket's bandwidth term that its latency term may be in the
/// latency-aware plan: 2(p−1)α ≤ f · 2(p−1)/p · bytes/β. f = 1: each of the ring's 2(p−1) steps
/// moves at least α·β bytes, Hockney's half-performance length n½ (the link at half its
/// bandwidth or more), so a bucket's latency costs no more than its bytes. dtrain plan's model
/// of ResNet-50 on 512 H200s over HDR InfiniBand (docs/results/scaling/2026-11-26/
/// gpu-plans-latency), at 25 MiB: f ≤ 1/2 leaves one bucket of the whole gradient, summed after
/// backward (efficiency 0.68); f = 1 three buckets (0.84, against 0.56 for the fixed plan); f = 2
/// five (0.80). At 64 GPUs f = 1 gives 0.977 against the fixed plan's 0.982.
constexpr double kLatencyShare = 1.0;

/// One ring allreduce's costs as the latency-aware plan sees them (the alpha-beta model of
/// comm/network.hpp: a ring of p ranks sums m bytes in 2(p−1)α + 2(p−1)/p·m/β).
struct RingCost {
  int ranks = 1;           ///< p ≥ 1, the ranks in the ring
  double alpha_s = 0;      ///< α ≥ 0: latency per ring step, seconds
  double bytes_per_s = 1;  ///< β > 0: each rank's bandwidth, bytes/s
  double value_bytes = 4;  ///< bytes per gradient value on the wire: 4 (fp32), 2 (bf16, fp16)
  double latency_share = kLatencyShare;  ///< f > 0 (tests vary it; training and plan do not)
};

/// The ring of `ranks` ranks over `link` (comm/network.hpp) with `value_bytes` per value: α its
/// latency, β its bandwidth — divided by the ranks when the link is `shared` (one host's memory,
/// which a ring's ranks all use at once). Throws as latency_min_bucket_floats when used.
RingCost ring_cost(const Link& link, int ranks, double value_bytes);

/// The ring of `comm`'s ranks as measured now (--bucket-link probe): after a warm-up each, the
/// fastest of 20 MPI_Allreduce of one float (T0) and of 5 of 4 MiB (T1) on the chief, broadcast
/// so that every rank plans the same buckets; α = T0 / 2(p−1) and β = 2(p−1)/p · 4 MiB / (T1 −
/// T0) (the ring model of the file comment fitted to the two points; MPI's small-message
/// algorithm may not be a ring, but its T0 is what each bucket pays). One rank: α = 0 and no
/// communication. Collective over `comm`; throws LibraryError when MPI fails.
RingCost probe_ring(MPI_Comm comm, double value_bytes);

/// The fewest floats a bucket needs for its latency to be at most f of its bandwidth term:
/// ⌈p·α·β / (f·v)⌉ (v = value_bytes); 0 when p ≤ 1 or α = 0. Throws InputError for p < 1,
/// α < 0, β ≤ 0, v ∉ {2, 4} or f ≤ 0 (not finite included).
std::size_t latency_min_bucket_floats(const RingCost& ring);

/// The latency-aware plan: with m = latency_min_bucket_floats(ring) at most
/// end_bucket_floats(bucket_floats) (one node, a small ring), or bucket_floats == 0, exactly
/// plan_buckets(count, bucket_floats). Otherwise plan_buckets(count, max(bucket_floats, m), m)
/// with a piece shorter than m (the remainder next to the first bucket) joined to the first
/// bucket: end buckets of m floats, every bucket at least m (the first below 2m; count < 2m:
/// one bucket), so at most max(1, count / m) buckets. Same order and contiguity as
/// plan_buckets. Throws as latency_min_bucket_floats.
std::vector<Bucket> plan_buckets(std::size_t count, std::size_t bucket_floats,
                                 const RingCost& ring);

/// How each bucket is summed (`--allreduce`, `--wire-dtype`).
struct ReduceOptions {
  /// false: MPI_Allreduce over the workers; true: shared memory inside each node, MPI between
  /// the node leaders (collectives/hierarchical.hpp).
  bool hierarchical = false;
  /// Gradients between ranks in fp32, bf16 or fp16, summed in fp32 (collectives/wire.hpp). With
  /// `hierarchical`, the node's shared slots and the leaders' hop (collectives/hierarchical.hpp).
  WireDtype wire = WireDtype::fp32;
  /// Test only: hierarchical nodes of this many consecutive worker ranks (0: real nodes).
  int ranks_per_node = 0;
  /// hierarchical where a node's workers cannot share memory (no /proc access, another user):
  /// true (--allreduce auto) falls back to the flat sum on every rank, with a warning; false
  /// (--allreduce hierarchical) throws.
  bool fallback_to_flat = false;
  /// --pin-threads: the CPU the communication thread runs on (-1: wherever it starts).
  int comm_cpu = -1;
  /// hierarchical in fp32: the summed buffer lives in the node's shared segment (home()), where
  /// each rank adds its share straight out of every rank's buffer (no copies in or out;
  /// collectives/hierarchical.hpp, "In place"). begin() must then be given home().
  bool in_place = false;
};

/// What a step's reduction found.
struct BucketedOutcome {
  float flag = 0;           ///< Σ over the workers of the flag passed to begin()
  double wait_seconds = 0;  ///< time finish() blocked: communication not hidden behind backward
};

/// The sync exchange's gradient allreduce in buckets (PyTorch DDP's reducer, Horovod's tensor
/// fusion): one step is begin(), ready() as backward finishes layers, finish().
class BucketedAllreduce {
 public:
  /// `comm` (borrowed, must outlive this) holds the workers; `count` gradient floats, reduced in
  /// buckets of `bucket_floats` (0: one bucket). With MPI_THREAD_MULTIPLE a communication
  /// thread reduces the buckets handed over during backward; otherwise finish() reduces them
  /// all, with MPI_Iallreduce.
  /// `overlap`: buckets start as ready() reports them; false: all start in finish() (no
  /// overlap with backward: the "before" of the overlap measurements, --no-overlap).
  /// `how`: the algorithm and wire format of each bucket's sum (default: MPI_Allreduce in fp32).
  /// Collective over `comm` when `how.hierarchical` (the node's shared segment is made here).
  /// Throws InputError for a bucket of INT_MAX floats or more (--bucket-mb), LibraryError when
  /// MPI_Query_thread fails or a rank cannot map its node's shared segment.
  BucketedAllreduce(MPI_Comm comm, std::size_t count, std::size_t bucket_floats, bool overlap,
                    const ReduceOptions& how = {});
  /// The same with the buckets given, in the order they are summed: contiguous from `count`
  /// down to 0 as plan_buckets() makes them (another plan throws Error: a programming error).
  BucketedAllreduce(MPI_Comm comm, std::size_t count, std::vector<Bucket> buckets, bool overlap,
                    const ReduceOptions& how = {});
  /// Joins the communication thread, or leaves it behind when a bucket timed out (the process is
  /// about to abort: MPI_Abort ends the rank with the thread still inside MPI_Allreduce).
  ~BucketedAllreduce();
  BucketedAllreduce(const BucketedAllreduce&) = delete;
  BucketedAllreduce& operator=(const BucketedAllreduce&) = delete;

  /// Starts a step on `data`: host memory of count + 1 floats (data[count] receives `flag`).
  /// No bucket of the previous step may be in flight (finish() returned).
  void begin(float* data, float flag);
  /// data[from, count) is final on this rank: hands every bucket lying inside it to the
  /// communication thread (in plan order). Cheap; call it after every layer.
  void ready(std::size_t from);
  /// Waits for the handed-over buckets, sums the remaining ones on the calling thread, and
  /// returns with every bucket summed in place. Past `timeout_s` seconds in one wait: throws
  /// TimeoutError naming the bucket and the workers (or, blocked inside MPI_Allreduce, the
  /// watching thread prints that message and calls MPI_Abort with kExitFault). Throws
  /// LibraryError when MPI_Allreduce fails; hierarchical: RuntimeFault naming a worker that died
  /// in the node's shared-memory exchange, TimeoutError naming the workers it waits for.
  BucketedOutcome finish(double timeout_s);

  /// ReduceOptions::in_place: the count + 1 floats of host memory that begin() must be given,
  /// in the node's shared segment, page-aligned, zeroed at first, valid while this object lives;
  /// nullptr otherwise (not asked for, 16-bit wire, not hierarchical, or alone on the node).
  [[nodiscard]] float* home() const;
  [[nodiscard]] const std::vector<Bucket>& buckets() const { return buckets_; }
  [[nodiscard]] bool overlapping() const { return overlap_; }
  /// Whether buckets are summed hierarchically (ReduceOptions::hierarchical, not fallen back).
  [[nodiscard]] bool hierarchical() const { return hier_ != nullptr; }

 private:
  void hand_over(std::size_t from);       ///< queues the buckets inside [from, count)
  void reduce(std::size_t k, int track);  ///< bucket k: the allreduce (any thread; timeline track)
  /// The deadline of bucket k passed (--timeout, seconds): the error naming it and the workers.
  [[nodiscard]] TimeoutError timeout_error(std::size_t k, double timeout_s) const;
  void loop();  ///< the communication thread

  MPI_Comm comm_;
  std::size_t count_;
  std::vector<Bucket> buckets_;
  bool threaded_ = false;
  bool overlap_ = false;
  double timeout_s_ = 0;  ///< finish()'s, for the thread-less path
  float* data_ = nullptr;
  std::size_t launched_ = 0;  ///< buckets handed over this step (caller's thread only)

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::size_t> queue_;  ///< buckets handed over, not yet taken
  std::size_t done_ = 0;           ///< buckets the thread reduced this step
  double watch_until_ = 0;         ///< > 0: the caller reduces inline; its deadline (now_seconds)
  double watch_timeout_ = 0;
  std::size_t watch_bucket_ = 0;
  std::exception_ptr error_;  ///< the first failure of the communication thread
  bool stop_ = false;
  bool stuck_ = false;                   ///< finish() timed out: the thread may never return
  bool exited_ = false;                  ///< the thread has left loop() (under mu_)
  std::unique_ptr<WireAllreduce> wire_;  ///< --wire-dtype bf16|fp16, flat
  std::unique_ptr<HierarchicalAllreduce> hier_;  ///< --allreduce hierarchical
  std::thread thread_;
};

}  // namespace dtrain
