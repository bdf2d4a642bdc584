// dtrain/comm/cluster.cpp — role placement and the MPI_Comm_split into ps and workers.
#include "dtrain/comm/cluster.hpp"

#include <sched.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <thread>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

/// The CPUs the node's ranks (`local`, the node's communicator) may run on together: the OR of
/// their affinity masks; a rank whose mask is unknown counts every online CPU.
int node_cpus_of(MPI_Comm local) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) {
    const unsigned online = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned cpu = 0; cpu < online && cpu < CPU_SETSIZE; ++cpu) CPU_SET(cpu, &mask);
  }
  DT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &mask, sizeof mask, MPI_BYTE, MPI_BOR, local));
  return std::max(1, CPU_COUNT(&mask));
}

}  // namespace

std::vector<RankInfo> compute_layout(const std::vector<int>& node_of_rank, int num_ps) {
  const int world = static_cast<int>(node_of_rank.size());
  DT_REQUIRE(num_ps >= 0, "option --num-ps: must be >= 0, got " + std::to_string(num_ps));
  DT_REQUIRE(num_ps < world, "option --num-ps: " + std::to_string(num_ps) +
                                 " parameter servers leave no worker among " +
                                 std::to_string(world) + " MPI ranks (need num-ps < ranks)");
  std::vector<RankInfo> ranks(world);
  std::map<int, std::vector<int>> by_node;  // node -> world ranks, ascending
  for (int r = 0; r < world; ++r) {
    ranks[r].rank = r;
    ranks[r].node = node_of_rank[r];
    by_node[node_of_rank[r]].push_back(r);
  }
  std::vector<int> nodes;
  for (const auto& [node, members] : by_node) nodes.push_back(node);
  std::vector<bool> is_ps(world, false);
  int placed = 0;
  for (int k = 0; placed < num_ps; ++k) {
    auto& members = by_node[nodes[k % nodes.size()]];
    for (auto it = members.rbegin(); it != members.rend(); ++it) {
      if (!is_ps[*it]) {
        is_ps[*it] = true;
        ++placed;
        break;
      }
    }
  }
  int ps_index = 0, worker_index = 0;
  for (int r = 0; r < world; ++r) {
    ranks[r].role = is_ps[r] ? Role::ps : Role::worker;
    ranks[r].index = is_ps[r] ? ps_index++ : worker_index++;
  }
  return ranks;
}

Cluster::Cluster(MPI_Comm world, int num_ps) : world_(world), num_ps_(num_ps) {
  int size = 0;
  DT_CHECK_MPI(MPI_Comm_rank(world, &rank_));
  DT_CHECK_MPI(MPI_Comm_size(world, &size));

  // Nodes: the lowest world rank on each shared-memory node names the node.
  MPI_Comm local = MPI_COMM_NULL;
  DT_CHECK_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  int local_rank = 0, local_size = 1, leader = rank_;
  DT_CHECK_MPI(MPI_Comm_rank(local, &local_rank));
  DT_CHECK_MPI(MPI_Comm_size(local, &local_size));
  DT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, local));
  node_cpus_ = node_cpus_of(local);
  MPI_Comm_free(&local);

  struct Info {
    int leader, local_rank, local_size;
    char host[MPI_MAX_PROCESSOR_NAME];
  } mine{};
  mine.leader = leader;
  mine.local_rank = local_rank;
  mine.local_size = local_size;
  int len = 0;
  MPI_Get_processor_name(mine.host, &len);
  std::vector<Info> all(size);
  DT_CHECK_MPI(
      MPI_Allgather(&mine, sizeof(Info), MPI_BYTE, all.data(), sizeof(Info), MPI_BYTE, world));
  std::vector<int> leaders;
  for (const auto& i : all) leaders.push_back(i.leader);
  std::vector<int> sorted = leaders;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  num_nodes_ = static_cast<int>(sorted.size());
  std::vector<int> node_of_rank(size);
  for (int r = 0; r < size; ++r)
    node_of_rank[r] = static_cast<int>(std::lower_bound(sorted.begin(), sorted.end(), leaders[r]) -
                                       sorted.begin());

  ranks_ = compute_layout(node_of_rank, num_ps);
  for (int r = 0; r < size; ++r) {
    ranks_[r].host = all[r].host;
    ranks_[r].local_rank = all[r].local_rank;
    ranks_[r].local_size = all[r].local_size;
    (ranks_[r].role == Role::ps ? ps_ranks_ : worker_ranks_).push_back(r);
  }
  DT_CHECK_MPI(MPI_Comm_split(world, is_ps() ? 1 : 0, rank_, &role_comm_));
  DT_CHECK_MPI(MPI_Comm_dup(world, &payload_comm_));
}

Cluster::Cluster(const Cluster& parent, int color, const std::vector<int>& ps,
                 const std::vector<int>& workers)
    : world_(MPI_COMM_NULL), num_ps_(static_cast<int>(ps.size())), num_nodes_(parent.num_nodes_),
      node_cpus_(parent.node_cpus_) {
  DT_CHECK_MPI(MPI_Comm_split(parent.world_, color, parent.rank_, &owned_world_));
  world_ = owned_world_;
  std::vector<int> members;  // parent world ranks, ascending: this part's world order
  for (const int k : ps) members.push_back(parent.ps_rank(k));
  for (const int w : workers) members.push_back(parent.worker_rank(w));
  std::sort(members.begin(), members.end());
  int size = 0;
  DT_CHECK_MPI(MPI_Comm_rank(world_, &rank_));
  DT_CHECK_MPI(MPI_Comm_size(world_, &size));
  if (size != static_cast<int>(members.size()) || members.at(rank_) != parent.rank_)
    throw Error(format_error("cluster part " + std::to_string(color) + ": its communicator holds " +
                                 std::to_string(size) + " ranks, its members are " +
                                 std::to_string(members.size()),
                             __FILE__, __LINE__));
  auto at = [&](int parent_rank) {
    return static_cast<int>(std::lower_bound(members.begin(), members.end(), parent_rank) -
                            members.begin());
  };
  for (const int r : members) ranks_.push_back(parent.ranks_[r]);
  for (std::size_t k = 0; k < ps.size(); ++k) {
    ps_ranks_.push_back(at(parent.ps_rank(ps[k])));
    ranks_[ps_ranks_.back()].index = static_cast<int>(k);
  }
  for (std::size_t w = 0; w < workers.size(); ++w) {
    worker_ranks_.push_back(at(parent.worker_rank(workers[w])));
    ranks_[worker_ranks_.back()].index = static_cast<int>(w);
  }
  DT_CHECK_MPI(MPI_Comm_split(world_, is_ps() ? 1 : 0, rank_, &role_comm_));
  DT_CHECK_MPI(MPI_Comm_dup(world_, &payload_comm_));
}

Cluster::~Cluster() {
  if (role_comm_ != MPI_COMM_NULL) MPI_Comm_free(&role_comm_);
  if (payload_comm_ != MPI_COMM_NULL) MPI_Comm_free(&payload_comm_);
  if (owned_world_ != MPI_COMM_NULL) MPI_Comm_free(&owned_world_);
}

std::vector<std::string> Cluster::gather_text(const std::string& mine, int len,
                                              const char* what) const {
  std::vector<char> own(static_cast<std::size_t>(len), '\0');  // len >= 1: the callers' constants
  std::copy_n(mine.begin(), std::min(mine.size(), own.size() - 1), own.begin());
  std::vector<char> all(static_cast<std::size_t>(len) * ranks_.size());
  MPI_Request req = MPI_REQUEST_NULL;
  DT_CHECK_MPI(MPI_Iallgather(own.data(), len, MPI_CHAR, all.data(), len, MPI_CHAR, world_, &req));
  wait_one(req, comm_timeout(), std::string("gathering every rank's ") + what + " (allgather)");
  std::vector<std::string> out;
  for (std::size_t r = 0; r < ranks_.size(); ++r) out.emplace_back(&all[r * len]);
  return out;
}

void Cluster::set_devices(const std::string& my_device) {
  const std::vector<std::string> all = gather_text(my_device, 32, "device name");
  for (std::size_t r = 0; r < ranks_.size(); ++r) ranks_[r].device = all[r];
}

void Cluster::set_cpus(const std::string& my_cpus, int comm_cpu) {
  const std::vector<std::string> all = gather_text(my_cpus, 48, "CPUs");
  for (std::size_t r = 0; r < ranks_.size(); ++r) ranks_[r].cpus = all[r];
  ranks_[static_cast<std::size_t>(rank_)].comm_cpu = comm_cpu;
}

void Cluster::label_workers(const std::function<std::string(int)>& part_of) {
  for (auto& r : ranks_)
    if (r.role == Role::worker) r.part = part_of(r.index);
}

void Cluster::label_ps(const std::function<std::string(int)>& part_of) {
  for (auto& r : ranks_)
    if (r.role == Role::ps) r.part = part_of(r.index);
}

std::string Cluster::role_table() const {
  std::ostringstream os;
  os << "# " << world_size() << " ranks on " << num_nodes_ << " node(s): " << num_ps_ << " ps, "
     << num_workers() << " workers\n";
  os << "# rank  node  host                  role    index  device\n";
  for (const auto& r : ranks_) {
    char line[224];
    std::snprintf(line, sizeof line, "# %4d  %4d  %-20s  %-6s  %5d  %s%s%s%s\n", r.rank, r.node,
                  r.host.c_str(), r.role == Role::ps ? "ps" : "worker", r.index, r.device.c_str(),
                  r.part.empty() ? "" : ("  " + r.part).c_str(),
                  r.cpus.empty() ? "" : ("  cpus " + r.cpus).c_str(),
                  (r.role == Role::worker && r.index == 0) ? "  (chief)" : "");
    os << line;
  }
  return os.str();
}

}  // namespace dtrain
