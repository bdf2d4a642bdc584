// dtrain/comm/cluster.hpp — roles from a computed split of MPI_COMM_WORLD (no host:port lists).
//
// Placement rule (documented in the README): nodes are found with
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) and numbered by their lowest world rank. Parameter
// server k (k = 0..K−1) goes to node k mod #nodes, on that node's highest-numbered world rank not
// yet taken; so ps ranks spread over nodes before any node gets a second one, and with ranks packed
// by node the ps sit at the end of each node. Every other rank is a worker; workers are numbered by
// world rank and worker 0 is the chief. MPI_Comm_split(world, is_ps, world_rank) yields the ps and
// worker communicators.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

namespace dtrain {

enum class Role { ps, worker };

struct RankInfo {
  int rank = 0;        ///< world rank
  int node = 0;        ///< node index (0-based, by lowest world rank on the node)
  std::string host;    ///< MPI_Get_processor_name
  int local_rank = 0;  ///< rank within the node
  int local_size = 1;  ///< ranks on the node
  Role role = Role::worker;
  int index = 0;               ///< ps index or worker index
  std::string device = "cpu";  ///< filled in by the trainer (e.g. "cuda:1")
  std::string part;  ///< a worker's pipeline stage and replica ("stage 1/2, replica 0"), or ""
  /// --pin-threads (filled in by the trainer): the CPUs this rank's threads may run on ("0-1",
  /// /proc's list, as the rank reads it back), and its communication thread's CPU (-1: none)
  std::string cpus;
  int comm_cpu = -1;
};

/// Pure placement: node_of_rank[r] is the node of world rank r. Returns one RankInfo per rank
/// (host/local fields left default). Throws InputError when num_ps < 0 or num_ps >= world size
/// (at least one worker is needed).
std::vector<RankInfo> compute_layout(const std::vector<int>& node_of_rank, int num_ps);

/// The MPI world split into roles. Construction is collective over `world`.
class Cluster {
 public:
  /// Places `num_ps` ps ranks (compute_layout) and splits `world` into role_comm() and
  /// payload_comm(). Throws InputError unless 0 ≤ num_ps < the world size, LibraryError when an
  /// MPI call fails.
  Cluster(MPI_Comm world, int num_ps);
  /// A part of `parent` as a cluster of its own, on a communicator of its ranks only (a pipelined
  /// ps job's stage: its ps and its replicas). Collective over parent.world(): every rank calls it,
  /// each with the `color` of its part and that part's members — `ps` (parent ps indices, which
  /// become ps 0, 1, … in this order) and `workers` (parent worker indices, likewise); the calling
  /// rank must be one of them. RankInfo is kept (host, node, device, part; `rank` stays the parent
  /// world rank, for messages), world() ranks follow parent world order, and role_comm() and
  /// payload_comm() are this part's. Throws Error when the part's communicator does not hold
  /// exactly its members, LibraryError when an MPI call fails.
  Cluster(const Cluster& parent, int color, const std::vector<int>& ps,
          const std::vector<int>& workers);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  /// Every rank of this cluster (ps and workers): the communicator given, or for a sub-cluster
  /// its own split of the parent's (freed with this object).
  [[nodiscard]] MPI_Comm world() const { return world_; }
  /// Communicator of this rank's role (ps ranks among themselves, workers among themselves).
  [[nodiscard]] MPI_Comm role_comm() const { return role_comm_; }
  /// A duplicate of world for the ps protocol's payload chunks (ps/protocol.hpp): their receives
  /// are posted per chunk, apart from the headers a ps receives with MPI_ANY_TAG on world.
  [[nodiscard]] MPI_Comm payload_comm() const { return payload_comm_; }
  [[nodiscard]] int world_rank() const { return rank_; }
  [[nodiscard]] int world_size() const { return static_cast<int>(ranks_.size()); }
  [[nodiscard]] const RankInfo& me() const { return ranks_[rank_]; }
  [[nodiscard]] bool is_ps() const { return me().role == Role::ps; }
  [[nodiscard]] bool is_worker() const { return me().role == Role::worker; }
  [[nodiscard]] bool is_chief() const { return is_worker() && me().index == 0; }
  [[nodiscard]] int num_ps() const { return num_ps_; }
  [[nodiscard]] int num_workers() const { return world_size() - num_ps_; }
  [[nodiscard]] int num_nodes() const { return num_nodes_; }
  /// The CPUs this rank's node lets its ranks run on, at least 1: the union of the node's ranks'
  /// affinity masks (sched_getaffinity, OR-reduced over the node at construction) — on a node
  /// shared through a Slurm allocation or a cgroup cpuset the CPUs the job was given, not the
  /// node's; all online CPUs (std::thread::hardware_concurrency()) where a mask is unknown. With
  /// me().local_size, whether the node has a core per rank.
  [[nodiscard]] int node_cpus() const { return node_cpus_; }
  /// World rank of ps k (0 ≤ k < num_ps()) / worker w (0 ≤ w < num_workers()); throws
  /// std::out_of_range otherwise.
  [[nodiscard]] int ps_rank(int k) const { return ps_ranks_.at(k); }
  [[nodiscard]] int worker_rank(int w) const { return worker_ranks_.at(w); }
  [[nodiscard]] const std::vector<RankInfo>& ranks() const { return ranks_; }
  /// Records this rank's device and shares all devices (collective over world); each name is cut
  /// to its first 31 characters. Throws TimeoutError when the allgather does not complete within
  /// comm_timeout() seconds, LibraryError when an MPI call fails.
  void set_devices(const std::string& my_device);
  /// --pin-threads: records this rank's CPUs (RankInfo::cpus, cut to 47 characters) and its
  /// communication thread's CPU, and shares the CPU lists (collective over world; role_table()
  /// shows them). Throws as set_devices().
  void set_cpus(const std::string& my_cpus, int comm_cpu);
  /// Labels every worker with what `part_of(worker index)` returns (RankInfo::part), shown by
  /// role_table() in a last column. Local: every rank labels identically.
  void label_workers(const std::function<std::string(int)>& part_of);
  /// The same for the ps ranks (`part_of(ps index)`; a pipelined job: the stage a ps serves).
  void label_ps(const std::function<std::string(int)>& part_of);
  /// The role table: one line per rank (rank, node, host, role, index, device, part, cpus).
  [[nodiscard]] std::string role_table() const;

 private:
  /// Every rank's `mine`, cut to len − 1 characters (an allgather over world; throws as
  /// set_devices()).
  std::vector<std::string> gather_text(const std::string& mine, int len, const char* what) const;

  MPI_Comm world_;
  MPI_Comm owned_world_ = MPI_COMM_NULL;  ///< a part's communicator (freed with it)
  MPI_Comm role_comm_ = MPI_COMM_NULL;
  MPI_Comm payload_comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int num_ps_ = 0;
  int num_nodes_ = 1;
  int node_cpus_ = 1;
  std::vector<RankInfo> ranks_;
  std::vector<int> ps_ranks_, worker_ranks_;
};

}  // namespace dtrain
