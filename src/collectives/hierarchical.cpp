// dtrain/collectives/hierarchical.cpp — two-level gradient sum: shared memory inside a node, MPI
// between node leaders (see collectives/hierarchical.hpp for the protocol).
#include "dtrain/collectives/hierarchical.hpp"

#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/simd.hpp"
#include "dtrain/dnn/float16.hpp"

namespace dtrain {
namespace {

constexpr std::size_t kLineWords = 8;  // one 64-byte control line per local rank
constexpr std::size_t kAlignFloats = 16;
constexpr double kDeadGrace = 10.0;  // seconds a dead peer goes unreported (see barrier())
constexpr std::size_t kPageBytes = 4096;
/// Floats an in-place sum adds up at a time in a buffer of its own (sum_in_place()): 32 KiB,
/// which stays in the core's cache while it is written out to every home.
constexpr std::size_t kBlockFloats = 8192;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

/// acc[i] += x[i] over n floats.
DT_SIMD_CLONES void add_into(float* acc, const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += x[i];
}

/// False when process `pid` is gone or a zombie (killed, not yet reaped by its launcher).
bool alive(std::uint64_t pid) {
  if (pid == 0) return true;  // not published yet
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: trust kill()
  const std::size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

/// Collective over `node`: its rank 0 makes a segment of `bytes` and names it to the others,
/// which map it. Returns nullptr and sets *why where this rank has none.
std::unique_ptr<SharedRing> share_segment(MPI_Comm node, int local_rank, std::size_t bytes,
                                          std::string* why) {
  std::unique_ptr<SharedRing> segment;
  long long id[3] = {0, -1, 0};  // pid, fd, token
  if (local_rank == 0) {
    try {
      segment = std::make_unique<SharedRing>(SharedRing::create(bytes));
      id[0] = getpid();
      id[1] = segment->fd();
      id[2] = segment->token();
    } catch (const std::exception& e) {
      *why = e.what();
    }
  }
  DT_CHECK_MPI(MPI_Bcast(id, 3, MPI_LONG_LONG, 0, node));
  if (local_rank != 0 && id[1] >= 0) {
    auto ring =
        SharedRing::open(static_cast<int>(id[0]), static_cast<int>(id[1]), bytes, id[2], why);
    if (ring) segment = std::make_unique<SharedRing>(std::move(*ring));
  } else if (local_rank != 0) {
    *why = "the node's leader could not make the segment";
  }
  return segment;
}

}  // namespace

HierarchicalAllreduce::HierarchicalAllreduce(MPI_Comm workers, std::size_t capacity, WireDtype wire,
                                             int ranks_per_node, std::size_t home_floats)
    : wire_(wire) {
  DT_ASSERT(home_floats == 0 || wire == WireDtype::fp32,
            "hierarchical allreduce: homes hold fp32 values (--wire-dtype fp32 only)");
  DT_ASSERT(capacity > 0 || home_floats > 0, "hierarchical allreduce: neither slots nor homes");
  const int worker_rank = comm_rank(workers);
  MPI_Comm shared = MPI_COMM_NULL;
  DT_CHECK_MPI(
      MPI_Comm_split_type(workers, MPI_COMM_TYPE_SHARED, worker_rank, MPI_INFO_NULL, &shared));
  if (ranks_per_node > 0) {
    DT_CHECK_MPI(MPI_Comm_split(shared, worker_rank / ranks_per_node, worker_rank, &node_));
    MPI_Comm_free(&shared);
  } else {
    node_ = shared;
  }
  local_rank_ = comm_rank(node_);
  local_size_ = comm_size(node_);
  DT_CHECK_MPI(
      MPI_Comm_split(workers, local_rank_ == 0 ? 0 : MPI_UNDEFINED, worker_rank, &leaders_));
  if (leaders_ != MPI_COMM_NULL) nodes_ = comm_size(leaders_);
  DT_CHECK_MPI(MPI_Bcast(&nodes_, 1, MPI_INT, 0, node_));
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  worker_rank_of_.resize(local_size_);
  world_rank_of_.resize(local_size_);
  DT_CHECK_MPI(MPI_Allgather(&worker_rank, 1, MPI_INT, worker_rank_of_.data(), 1, MPI_INT, node_));
  DT_CHECK_MPI(MPI_Allgather(&world_rank, 1, MPI_INT, world_rank_of_.data(), 1, MPI_INT, node_));
  if (leaders_ != MPI_COMM_NULL && nodes_ > 1)
    inter_ = std::make_unique<WireAllreduce>(leaders_, wire_);
  // Alone on its node a rank shares nothing (the leaders' MPI sum alone), but it still takes
  // part in the agreement below, which spans every worker.
  const bool share = local_size_ > 1;
  capacity_ = round_up(capacity, kAlignFloats);
  const std::size_t L = static_cast<std::size_t>(local_size_);
  const std::size_t control_bytes = L * kLineWords * sizeof(std::uint64_t);
  // The homes start on a page of the mapping (whose usable area starts kHeaderBytes into it).
  const std::size_t slots_end = control_bytes + 2 * L * capacity_ * wire_bytes(wire_);
  const std::size_t homes_at =
      round_up(slots_end + SharedRing::kHeaderBytes, kPageBytes) - SharedRing::kHeaderBytes;
  home_stride_ = round_up(home_floats * sizeof(float), kPageBytes) / sizeof(float);
  home_floats_ = home_floats;
  const std::size_t bytes =
      home_floats > 0 ? homes_at + L * home_stride_ * sizeof(float) : slots_end;
  std::string why;
  if (share) segment_ = share_segment(node_, local_rank_, bytes, &why);
  // Every worker learns whether any cannot share, and the lowest such worker's rank and reason,
  // so that each throws the same error (and --allreduce auto's warning names the worker).
  const int mine = (segment_ || !share) ? std::numeric_limits<int>::max() : worker_rank;
  int first = 0;
  DT_CHECK_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, workers));
  if (first != std::numeric_limits<int>::max()) {
    long long ids[2] = {world_rank, static_cast<long long>(why.size())};
    DT_CHECK_MPI(MPI_Bcast(ids, 2, MPI_LONG_LONG, first, workers));
    why.resize(static_cast<std::size_t>(ids[1]));
    DT_CHECK_MPI(MPI_Bcast(why.data(), static_cast<int>(ids[1]), MPI_CHAR, first, workers));
    if (leaders_ != MPI_COMM_NULL) MPI_Comm_free(&leaders_);  // no destructor after a throw
    MPI_Comm_free(&node_);
    throw LibraryError(format_error("--allreduce hierarchical: worker " + std::to_string(first) +
                                        " (world rank " + std::to_string(ids[0]) +
                                        ") cannot share its node's memory: " + why +
                                        " (use --allreduce mpi)",
                                    __FILE__, __LINE__));
  }
  if (!share) return;
  control_ = reinterpret_cast<std::uint64_t*>(segment_->data());
  slots_ = reinterpret_cast<char*>(segment_->data()) + control_bytes;
  if (home_floats > 0)
    homes_ = reinterpret_cast<float*>(reinterpret_cast<char*>(segment_->data()) + homes_at);
  std::atomic_ref<std::uint64_t>(control_[local_rank_ * kLineWords])
      .store(static_cast<std::uint64_t>(getpid()), std::memory_order_release);
  DT_CHECK_MPI(MPI_Barrier(node_));  // every pid published before the first sum
}

HierarchicalAllreduce::~HierarchicalAllreduce() {
  if (leaders_ != MPI_COMM_NULL) MPI_Comm_free(&leaders_);
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
}

void* HierarchicalAllreduce::slot(int set, int l) const {
  return slots_ + (static_cast<std::size_t>(set) * static_cast<std::size_t>(local_size_) +
                   static_cast<std::size_t>(l)) *
                      capacity_ * wire_bytes(wire_);
}

float* HierarchicalAllreduce::home(int l) const {
  return homes_ + static_cast<std::size_t>(l) * home_stride_;
}

float* HierarchicalAllreduce::home() const {
  return homes_ != nullptr ? home(local_rank_) : nullptr;
}

std::pair<std::size_t, std::size_t> HierarchicalAllreduce::segment(std::size_t n) const {
  const auto L = static_cast<std::size_t>(local_size_), me = static_cast<std::size_t>(local_rank_);
  return {me * n / L, (me + 1) * n / L};
}

void HierarchicalAllreduce::barrier(double timeout_s, const std::string& what, const char* phase) {
  ++arrivals_;
  std::atomic_ref<std::uint64_t>(control_[local_rank_ * kLineWords + 1])
      .store(arrivals_, std::memory_order_release);
  const double t0 = now_seconds();
  double next_check = t0 + 0.01;
  double dead_since = -1;  // when a late peer was first seen dead
  for (int l = 0; l < local_size_; ++l) {
    std::atomic_ref<std::uint64_t> arrived(control_[l * kLineWords + 1]);
    for (long polls = 0; arrived.load(std::memory_order_acquire) < arrivals_; ++polls) {
      if (polls < 64) continue;
      const double now = now_seconds();
      if (now - t0 < 2e-4) {
        sched_yield();
        continue;
      }
      const timespec nap{0, 20000};
      nanosleep(&nap, nullptr);
      if (now < next_check) continue;
      next_check = now + 0.01;
      if (cancelled_.load(std::memory_order_relaxed))
        throw RuntimeFault(format_error(what + " (" + phase + "): cancelled, the step has failed",
                                        __FILE__, __LINE__));
      // Who is late, and is any of them dead?
      std::string late;
      for (int p = 0; p < local_size_; ++p) {
        if (std::atomic_ref<std::uint64_t>(control_[p * kLineWords + 1])
                .load(std::memory_order_acquire) >= arrivals_)
          continue;
        const std::uint64_t pid = std::atomic_ref<std::uint64_t>(control_[p * kLineWords])
                                      .load(std::memory_order_acquire);
        const std::string who = "worker " + std::to_string(worker_rank_of_[p]) + " (world rank " +
                                std::to_string(world_rank_of_[p]) + ", pid " + std::to_string(pid) +
                                (p == 0 ? ", the node's leader" : "") + ")";
        if (!alive(pid)) {
          // A peer that failed on its own has called MPI_Abort, and mpirun is about to end this
          // process too: its message is the one to read. Only a death nobody reports (SIGKILL,
          // a launcher that does not kill the rest) is ours to name, after a grace period.
          if (dead_since < 0) dead_since = now;
          if (now - dead_since >= kDeadGrace)
            throw RuntimeFault(
                format_error(what + " (" + phase + "): " + who + " died; the job cannot go on",
                             __FILE__, __LINE__));
        }
        late += (late.empty() ? "" : ", ") + who;
      }
      if (now - t0 > timeout_s)
        throw TimeoutError(timeout_s,
                           what + " (" + phase + ", shared memory), waiting for " + late);
    }
  }
}

void HierarchicalAllreduce::sum(float* data, std::size_t n, bool blocking, double timeout_s,
                                const std::string& what) {
  if (n == 0) return;
  if (local_size_ == 1) {  // alone on the node: the leaders' sum only
    if (inter_) inter_->sum(data, n, blocking, timeout_s, what + " between the node leaders");
    return;
  }
  // In this rank's home? (addresses as integers: data may lie in another object)
  const auto at = reinterpret_cast<std::uintptr_t>(data),
             mine = reinterpret_cast<std::uintptr_t>(home());
  if (mine != 0 && at >= mine && at + n * sizeof(float) <= mine + home_floats_ * sizeof(float)) {
    sum_in_place((at - mine) / sizeof(float), n, blocking, timeout_s, what);
    return;
  }
  DT_ASSERT(n <= capacity_, "hierarchical allreduce larger than its slots");
  if (wire_ == WireDtype::fp32) sum_fp32(data, n, blocking, timeout_s, what);
  else sum_16bit(data, n, blocking, timeout_s, what);
}

void HierarchicalAllreduce::sum_fp32(float* data, std::size_t n, bool blocking, double timeout_s,
                                     const std::string& what) {
  const int set = static_cast<int>(sums_++ & 1);
  std::memcpy(slot(set, local_rank_), data, n * sizeof(float));
  barrier(timeout_s, what, "copying in");
  const auto [lo, hi] = segment(n);
  auto* total = static_cast<float*>(slot(set, 0));
  for (int l = 1; l < local_size_; ++l)
    add_into(total + lo, static_cast<const float*>(slot(set, l)) + lo, hi - lo);
  barrier(timeout_s, what, "summing in the node");
  if (nodes_ > 1) {
    if (inter_) inter_->sum(total, n, blocking, timeout_s, what + " between the node leaders");
    barrier(timeout_s, what, "the leaders' sum");
  }
  std::memcpy(data, total, n * sizeof(float));
}

void HierarchicalAllreduce::sum_in_place(std::size_t at, std::size_t n, bool blocking,
                                         double timeout_s, const std::string& what) {
  barrier(timeout_s, what, "gradients final");
  const auto [lo, hi] = segment(n);
  const int L = local_size_;
  // Several nodes: the node total goes to the leader's home only, for the leaders' sum.
  const int writes = nodes_ > 1 ? 1 : L;
  std::array<float, kBlockFloats> block;
  for (std::size_t i = at + lo; i < at + hi; i += kBlockFloats) {
    const std::size_t m = std::min(kBlockFloats, at + hi - i);
    std::memcpy(block.data(), home(0) + i, m * sizeof(float));
    for (int l = 1; l < L; ++l) add_into(block.data(), home(l) + i, m);
    for (int l = 0; l < writes; ++l) std::memcpy(home(l) + i, block.data(), m * sizeof(float));
  }
  barrier(timeout_s, what, "summing in the node");
  if (nodes_ == 1) return;
  float* total = home(0) + at;
  if (inter_) inter_->sum(total, n, blocking, timeout_s, what + " between the node leaders");
  barrier(timeout_s, what, "the leaders' sum");
  if (local_rank_ != 0) std::memcpy(home() + at, total, n * sizeof(float));
  // The leader's home is its gradient: it may not change until every rank has copied it out.
  barrier(timeout_s, what, "copying out");
}

void HierarchicalAllreduce::sum_16bit(float* data, std::size_t n, bool blocking, double timeout_s,
                                      const std::string& what) {
  const int set = static_cast<int>(sums_++ & 1);
  encode_wire(wire_, data, static_cast<std::uint16_t*>(slot(set, local_rank_)), n);  // rounding 1
  barrier(timeout_s, what, "copying in");
  const auto [lo, hi] = segment(n);
  auto* total = static_cast<std::uint16_t*>(slot(set, 0));
  // Segment [lo, hi) of every slot, widened and added in fp32 in slot order; rounding 2.
  reduce_wire_rows(wire_, total + lo, capacity_, static_cast<std::size_t>(local_size_), total + lo,
                   hi - lo);
  barrier(timeout_s, what, "summing in the node");
  if (nodes_ > 1) {  // rounding 3: the leaders' sum of the node totals, in slot 0 itself
    if (inter_)
      inter_->sum_encoded(total, n, blocking, timeout_s, what + " between the node leaders");
    barrier(timeout_s, what, "the leaders' sum");
  }
  decode_wire(wire_, total, data, n);
}

}  // namespace dtrain
