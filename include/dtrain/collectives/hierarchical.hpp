// dtrain/collectives/hierarchical.hpp — the gradient sum in two levels
// (`--allreduce hierarchical`): the workers of one node add through shared memory, one leader per
// node sums the node totals over MPI, and the result comes back through the same memory (Horovod's
// hierarchical allreduce, NCCL's intra-node rings; Sergeev & Del Balso 2018, Jia et al. 2018
// "Highly Scalable Deep Learning Training System with Mixed-Precision", §3.3).
//
// Memory: the node's leader (lowest worker rank of the node) makes one memfd segment
// (ps/shared_ring.hpp: freed with its last mapping, nothing left in /dev/shm after a kill) and
// every worker of the node maps it: a control line per local rank (its pid and an arrival
// counter) and two sets of L slots of `capacity` values (L = the node's workers), used by
// alternate sums, each value in the wire dtype: 2·L·capacity·(4 or 2) bytes per node (25 MiB
// buckets, 12 workers: 600 MiB in fp32, 300 MiB in 16 bits) — or, summing in place (below), the
// L ranks' homes instead: L × the gradient (ResNet-50, 12 workers: 1.2 GB, which the ranks then
// do not hold privately).
//
// One sum of n values, every local rank l (the protocol; every wait has a deadline):
//   1. copies its data into slot l of this sum's set;                    then barrier A
//   2. adds segment l (n/L of the values) of all L slots, in slot order, into slot 0;
//                                                                           barrier B
//   3. the leader sums slot 0 over the leaders with MPI (WireAllreduce);  barrier C (several nodes)
//   4. copies slot 0 out.
// Sum k+2 reuses sum k's set only after every rank passed sum k+1's barrier A, i.e. finished
// copying sum k out; nothing else is shared, so no lock. A barrier is a per-rank counter in the
// control lines (std::atomic_ref, lock-free, so it works across processes); a waiter spins
// briefly, then yields, then naps 20 µs, and checks that every late peer is alive (kill(pid, 0)):
// one dead for 10 s (time for mpirun to end a job whose rank failed or called MPI_Abort, so that
// that rank's exit code and message stay the only ones) ends the wait with RuntimeFault naming
// its worker rank, world rank and pid; past the deadline, TimeoutError naming the ranks not yet
// arrived.
//
// In place (fp32 only; the sync trainer's gradient on CPU): every rank's buffer — its home — lives
// in the segment too (the model's gradient is placed there: Model::place_gradients), so no rank
// copies in or out. One sum of floats [at, at + n) of every home, every local rank l:
//   1. barrier A (every rank's values final);
//   2. adds segment l of the L homes, in home order, in a 32 KiB block of its own, and writes the
//      block back into segment l of every home (several nodes: of the leader's only); barrier B;
//   3. (several nodes) the leader sums its home over the leaders with MPI, barrier C; every other
//      rank copies the leader's result into its home; barrier D (the leader's home is its own
//      gradient, which it may change again only once every rank has copied it out).
// A rank reads and writes segment l of the others' homes only between A and B, where they wait
// for it. Per rank and sum of S bytes on one node: S read and S written, against 3S read and 2S
// written through the slots (copy in, add, copy out); the bits are the slots' (the same
// additions in the same order).
//
// --wire-dtype fp32: the slots hold floats, step 2 adds in fp32 into slot 0, the leaders call
// MPI_Allreduce. Every rank ends with the same bits (it copies one slot 0). With 2 workers on a
// node the sum is a + b, the bits of MPI_Allreduce; with more, the order of the additions is slot
// order, which MPI does not promise: the same to within (L − 1)·2^-24·Σ|x| relative.
//
// --wire-dtype bf16|fp16 (Horovod's Compression.fp16, DDP's bf16 hook, with fp32 sums): every
// value that crosses the shared memory or the leaders' MPI hop is 16 bits, every addition is
// fp32, and each quantity is rounded once, when it is written for another rank to read:
//   1. each rank rounds its own gradient, x → R(x), writing it into its slot;
//   2. rank l widens segment l of the L slots, adds them in fp32 in slot order and writes the
//      node total T = R(R(x_0) + R(x_1) + … + R(x_{L−1})) into slot 0;
//   3. (several nodes) the leaders sum the 16-bit node totals where they lie in slot 0
//      (WireAllreduce::sum_encoded: widened, added in fp32 in leader order, rounded once:
//      R(T_0 + T_1 + … + T_{N−1})), the result written back into slot 0;
//   4. every rank widens slot 0, exactly, into its gradient.
// So every rank holds the same bits, and on one node they are the flat 16-bit sum's
// (collectives/wire.hpp: the same roundings in the same rank order) — half the bytes through
// the node's memory and none of its MPI messages. A rank keeps no unrounded result of its own:
// the sum must reach the other ranks through the segment, and sync replicas must agree. Error
// against the exact Σx (u = 2^-8 for bf16, 2^-11 for fp16; N nodes of L workers, W = N·L):
// one node, the flat sum's (2u + W·2^-24)·Σ|x|; several, (3u + 4u² + (L + N)·2^-24)·Σ|x|;
// fp16 adds (W + N + 1)·2^-25 for its subnormals and overflows past 65504 to ±Inf (which the
// step's finiteness check catches). tests/mpi/test_wire_hierarchical.cpp checks the bits
// against this rounding sequence and the bounds.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/collectives/wire.hpp"
#include "dtrain/ps/shared_ring.hpp"

namespace dtrain {

class HierarchicalAllreduce {
 public:
  /// Collective over `workers` (borrowed, must outlive this): splits it by node
  /// (MPI_COMM_TYPE_SHARED; `ranks_per_node` > 0 cuts each node further into groups of that many
  /// consecutive worker ranks, for tests of several leaders on one machine), makes and maps the
  /// node's segment for sums of up to `capacity` values in `wire` (the slots and the leaders'
  /// hop; see the file comment): 2·L·capacity values. Throws LibraryError on every rank alike
  /// (after agreeing over `workers`) when a rank cannot make or map the segment: "worker W (world
  /// rank R) cannot share its node's memory: WHY (use --allreduce mpi)", the lowest such worker
  /// and its own reason on every rank; the caller may then fall back to a flat allreduce on every
  /// rank.
  /// `home_floats` > 0 (fp32 only): every rank of a node that shares memory also gets a home
  /// of that many floats in the segment (home()), summed in place (see "In place" above);
  /// `capacity` may then be 0 (no slots: every sum must lie in the home).
  HierarchicalAllreduce(MPI_Comm workers, std::size_t capacity, WireDtype wire,
                        int ranks_per_node = 0, std::size_t home_floats = 0);
  ~HierarchicalAllreduce();
  HierarchicalAllreduce(const HierarchicalAllreduce&) = delete;
  HierarchicalAllreduce& operator=(const HierarchicalAllreduce&) = delete;

  /// data[i] = Σ_workers data[i], n ≤ capacity floats, in place (the protocol above; 16-bit
  /// wire: rounded as listed there); n floats inside home(): summed there, with no copies (every
  /// rank's data at the same offset in its home). Every
  /// worker calls it with the same n, in the same order. `blocking`: the leaders' MPI call is
  /// blocking (a caller with its own watchdog); false: non-blocking, waited with the deadline.
  /// Throws TimeoutError naming the ranks not arrived after timeout_s seconds in one barrier,
  /// RuntimeFault naming a dead peer, LibraryError when an MPI call fails. Not thread-safe.
  void sum(float* data, std::size_t n, bool blocking, double timeout_s, const std::string& what);

  /// Workers on this rank's node (sharing its segment), this one included.
  [[nodiscard]] int local_ranks() const { return local_size_; }
  /// Nodes, i.e. leaders taking part in the inter-node MPI sum.
  [[nodiscard]] int nodes() const { return nodes_; }
  /// Whether this rank leads its node (the lowest worker rank there).
  [[nodiscard]] bool leader() const { return local_rank_ == 0; }
  /// This rank's home: home_floats floats of the node's segment, page-aligned, zeroed at first,
  /// valid while this object lives; nullptr when none was asked for or the rank is alone on its
  /// node (no segment).
  [[nodiscard]] float* home() const;

  /// Makes a sum() in progress on another thread (or the next one) throw RuntimeFault within
  /// about 10 ms instead of waiting for peers: the caller has given up on the step (its own
  /// deadline passed) and is about to free this object. Thread-safe; irreversible.
  void cancel() noexcept { cancelled_.store(true, std::memory_order_relaxed); }

 private:
  void barrier(double timeout_s, const std::string& what, const char* phase);
  void sum_fp32(float* data, std::size_t n, bool blocking, double timeout_s,
                const std::string& what);
  void sum_16bit(float* data, std::size_t n, bool blocking, double timeout_s,
                 const std::string& what);
  /// The sum of floats [at, at + n) of every home (see "In place" in the file comment).
  void sum_in_place(std::size_t at, std::size_t n, bool blocking, double timeout_s,
                    const std::string& what);
  [[nodiscard]] float* home(int l) const;  ///< local rank l's home
  /// [lo, hi): the values of a sum of n that this rank adds up (step 2 of the protocol).
  [[nodiscard]] std::pair<std::size_t, std::size_t> segment(std::size_t n) const;
  /// Slot l of set `set`: capacity_ values of wire_bytes(wire_) bytes each.
  [[nodiscard]] void* slot(int set, int l) const;

  MPI_Comm node_ = MPI_COMM_NULL;     ///< the workers of this node (owned)
  MPI_Comm leaders_ = MPI_COMM_NULL;  ///< one rank per node (owned; null on non-leaders)
  WireDtype wire_;                    ///< the values in the slots and between the leaders
  int local_rank_ = 0, local_size_ = 1, nodes_ = 1;
  std::size_t capacity_ = 0;
  std::vector<int> worker_rank_of_;  ///< node-local rank → worker rank, for messages
  std::vector<int> world_rank_of_;   ///< node-local rank → world rank
  std::unique_ptr<SharedRing> segment_;
  std::uint64_t* control_ = nullptr;  ///< L lines of 8 words: [0] pid, [1] arrivals
  char* slots_ = nullptr;
  float* homes_ = nullptr;       ///< L homes, home_stride_ floats apart (null: none)
  std::size_t home_floats_ = 0;  ///< floats a home holds
  std::size_t home_stride_ = 0;  ///< floats from one home to the next (whole pages)
  std::uint64_t arrivals_ = 0;   ///< barriers this rank has entered
  std::uint64_t sums_ = 0;       ///< sums done (picks the slot set)
  std::unique_ptr<WireAllreduce> inter_;
  std::atomic<bool> cancelled_{false};  ///< cancel(): barrier() gives up
};

}  // namespace dtrain
