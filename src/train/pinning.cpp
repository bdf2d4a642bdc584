// dtrain/train/pinning.cpp — `--pin-threads` for one rank (train/trainer.hpp pin_rank_threads):
// which CPUs of its node are its block, its OpenMP team pinned into it, and what every rank
// reports back for the role table.
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/comm/affinity.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/train/trainer.hpp"

namespace dtrain {
namespace {

/// The CPUs this rank's node splits among its ranks, and this rank's place in the split: every
/// rank's allowed CPUs are gathered (the masks, over the world); the ranks of this node that
/// share this rank's mask split it by their order among themselves, a rank with a mask of its own
/// (the launcher bound it) takes the whole of it.
struct Split {
  std::vector<int> cpus;
  int index = 0, count = 1;
};

Split node_split(const Cluster& cluster) {
  Split s;
  s.cpus = allowed_cpus();
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int cpu : s.cpus) CPU_SET(cpu, &mine);
  std::vector<cpu_set_t> all(static_cast<std::size_t>(cluster.world_size()));
  MPI_Request req = MPI_REQUEST_NULL;
  DT_CHECK_MPI(MPI_Iallgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE,
                              cluster.world(), &req));
  wait_one(req, comm_timeout(), "gathering every rank's CPUs for --pin-threads (allgather)");
  s.count = 0;
  for (const RankInfo& r : cluster.ranks()) {
    if (r.node != cluster.me().node || !CPU_EQUAL(&all[static_cast<std::size_t>(r.rank)], &mine))
      continue;
    if (r.rank < cluster.world_rank()) ++s.index;
    ++s.count;
  }
  return s;
}

/// Every thread of the process on the rank's block (MPI's own threads too), the calling thread
/// on the compute CPUs, OpenMP thread i on compute[i mod n] (the team is created here once and
/// kept by the runtime). False, with `why`, when the kernel refuses.
bool pin_team(const CorePlan& plan, std::string& why) {
  const std::vector<int>& compute = plan.compute;
  std::vector<int> block = compute;
  if (plan.comm >= 0) block.push_back(plan.comm);
  if (!pin_process_threads(block, &why) || !pin_this_thread(compute, &why)) return false;
  bool ok = true;
#pragma omp parallel
  {
    const auto t = static_cast<std::size_t>(omp_get_thread_num());
    std::string mine;
    if (t > 0 && !pin_this_thread({compute[t % compute.size()]}, &mine)) {
#pragma omp critical(dtrain_pin_team)
      {
        ok = false;
        why = mine;
      }
    }
  }
  return ok;
}

}  // namespace

void pin_rank_threads(const Config& c, Cluster& cluster, std::string& notes) {
  const Split split = node_split(cluster);
  const bool comm_thread = cluster.is_worker() && exchange_kind(c) == ExchangeKind::allreduce;
  const std::vector<std::vector<int>> cores = cores_of(split.cpus);
  const CorePlan plan = plan_cores(cores, split.index, split.count, comm_thread);
  const int asked = cluster.is_ps() ? c.ps_threads : c.threads;
  if (asked == 0) omp_set_num_threads(static_cast<int>(plan.compute.size()));
  std::string why;
  const bool pinned = pin_team(plan, why);
  if (!pinned)
    log_warn("--pin-threads: rank " + std::to_string(cluster.world_rank()) +
             "'s threads are not pinned: " + why);
  cluster.set_cpus(cpu_list_text(process_thread_cpus()), pinned ? plan.comm : -1);
  if (!cluster.is_chief()) return;
  const auto node_ranks =
      std::count_if(cluster.ranks().begin(), cluster.ranks().end(),
                    [&](const RankInfo& r) { return r.node == cluster.me().node; });
  const bool bound = split.count < node_ranks;  // by the launcher: the chief's mask not the node's
  const std::string cpus = std::to_string(split.cpus.size()) + " CPUs on " +
                           std::to_string(cores.size()) + " cores, split among " +
                           std::to_string(split.count);
  std::string comm;
  if (plan.comm >= 0) comm = ", its communication thread on CPU " + std::to_string(plan.comm);
  else if (comm_thread)
    comm = bound ? ", its communication thread sharing them (a block of 1 CPU within the "
                   "launcher's binding)"
                 : ", its communication thread sharing them (a block of 1 CPU, and no CPU "
                   "outside the ranks' blocks)";
  notes += "# --pin-threads: each rank's threads on its CPUs (cpus column; " +
           (bound ? "the launcher bound the ranks: the chief's " + cpus + " of the node's " +
                        std::to_string(node_ranks) + " ranks); "
                  : "the chief's node: " + cpus + " rank(s)); ") +
           std::to_string(omp_get_max_threads()) + " OpenMP thread(s) on the chief's " +
           std::to_string(plan.compute.size()) + " compute CPU(s)" + comm +
           (plan.shared ? "; more ranks than CPUs: ranks share CPUs" : "") + "\n";
}

std::string describe_pinned_threads(const std::string& who) {
  std::map<std::pair<std::string, std::string>, int> groups;  // (name, CPUs) → threads
  for (const auto& thread : process_threads()) ++groups[thread];
  std::string line = "# --pin-threads, " + who + "'s threads:";
  for (const auto& [thread, count] : groups)
    line += " " + thread.first + " on " + thread.second +
            (count > 1 ? " (x" + std::to_string(count) + ")" : "") + ",";
  line.pop_back();
  return line;
}

}  // namespace dtrain
