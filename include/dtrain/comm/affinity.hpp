// dtrain/comm/affinity.hpp — `--pin-threads`: where a rank's threads run on its node. The ranks of
// a node split the CPUs the launcher lets them use into disjoint blocks by node-local rank (as
// Open MPI's --map-by slot:PE=n --bind-to core, or OpenMP's OMP_PLACES=cores with OMP_PROC_BIND
// inside each block); a rank runs one compute thread per CPU of its block, and the sync
// allreduce's communication thread (collectives/bucketed.hpp) on a CPU of its own where the block
// has one to spare (else on the CPUs no block takes, shared) — so ranks no longer share cores,
// caches and SMT siblings by the scheduler's chance, and the thread that drives MPI never waits
// behind a compute thread. Blocks are whole physical cores (a core's SMT siblings, the hardware
// threads that share its execution units, go to one rank) while every rank can have one, as
// hwloc's and Open MPI's --bind-to core do; with more ranks than cores, one hardware thread of
// every core is handed out before any core's second. Linux: sched_getaffinity / sched_setaffinity
// on the calling thread, /proc/self/task for what every thread of the process may run on,
// /sys/devices/system/cpu/cpuN/topology/thread_siblings_list for the cores.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dtrain {

/// One rank's share of its node's CPUs.
struct CorePlan {
  /// CPUs of the compute threads (OpenMP thread i on the i-th), never empty: one hardware thread
  /// of each of the block's cores (ascending), then their second siblings, and so on.
  std::vector<int> compute;
  int comm = -1;        ///< CPU of the communication thread (-1: shares the compute CPUs)
  bool shared = false;  ///< the node has fewer CPUs than ranks: blocks of 1 CPU, reused
};

/// Pure. The block of node-local rank `local_rank` (0 ≤ local_rank < local_size) among `cores`
/// (the node's usable CPUs grouped by physical core, as cores_of returns them: non-empty, each
/// core's CPUs ascending, cores in order). With at most as many ranks as cores, ⌊|cores| /
/// local_size⌋ whole cores from core local_rank × that (left-over cores stay free); with more, the
/// node's CPUs ordered one hardware thread of every core first (then every core's second, ...)
/// and ⌊CPUs / local_size⌋ of them from position local_rank × that; with more ranks than CPUs,
/// one CPU of that order, local_rank mod CPUs (shared). Without SMT (one CPU a core) both are
/// ⌊CPUs / local_size⌋ CPUs from CPU position local_rank × that. `comm_thread`: the rank runs a
/// communication thread, given the block's last CPU in that order (a sibling of a compute CPU
/// where cores have 2 threads) when the block has at least 2; with blocks of one CPU and CPUs
/// left over, left-over CPU local_rank mod (their number), shared with the other ranks'
/// communication threads (12 ranks on 16 single-thread cores: 3 to each of the last 4). Throws
/// InputError on no CPU, an empty core or a rank outside [0, local_size).
CorePlan plan_cores(const std::vector<std::vector<int>>& cores, int local_rank, int local_size,
                    bool comm_thread);

/// `cpus` (ascending) grouped by physical core: a core is the CPUs among `cpus` that
/// `sysfs`/cpuN/topology/thread_siblings_list names for each of them (the SMT siblings), each
/// core ascending, cores ordered by their first CPU. A CPU whose file is missing or unreadable is
/// a core of its own (no SMT assumed). `sysfs`: /sys/devices/system/cpu, or a copy of its layout.
std::vector<std::vector<int>> cores_of(const std::vector<int>& cpus,
                                       const std::string& sysfs = "/sys/devices/system/cpu");

/// The CPUs the calling thread may run on (sched_getaffinity), ascending. Throws LibraryError
/// when the call fails.
std::vector<int> allowed_cpus();

/// Restricts the calling thread to `cpus` (non-empty). False, with `why`, when the kernel refuses
/// (a CPU outside the process's cgroup, ...); nothing changes then.
bool pin_this_thread(const std::vector<int>& cpus, std::string* why = nullptr);

/// Restricts every thread this process has now (/proc/self/task: MPI's own progress threads
/// too) to `cpus`; threads started later inherit their creator's CPUs. False, with `why`, when
/// the kernel refuses one (the threads done so far stay restricted).
bool pin_process_threads(const std::vector<int>& cpus, std::string* why = nullptr);

/// "0-3,8,10-11": a CPU list as /proc's Cpus_allowed_list writes it (ascending input).
std::string cpu_list_text(const std::vector<int>& cpus);

/// Every thread of this process now: its name (/proc/self/task/<tid>/comm) and the CPUs it may
/// run on (Cpus_allowed_list); empty where /proc cannot be read.
std::vector<std::pair<std::string, std::string>> process_threads();

/// The union of the CPUs every thread of this process may run on (each /proc/self/task/<tid>/
/// status's Cpus_allowed_list), ascending; empty where /proc cannot be read.
std::vector<int> process_thread_cpus();

}  // namespace dtrain
