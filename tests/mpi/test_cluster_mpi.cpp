// tests/mpi/test_cluster_mpi.cpp — Cluster on MPI_COMM_WORLD (all ranks on this one node): roles,
// ps/worker counts and ranks, role communicators (sizes, ranks = role index), set_devices and the
// role table, for every num_ps the world allows; num_ps ≥ world refused on every rank; and
// all_or_nothing (comm/guard.hpp): a failure on some ranks raises ReportedError on ALL ranks with
// the exit code of the lowest failing rank, and success returns everywhere; wait_any with a name
// built only on timeout (the ps event loop's); wait_all over null and active requests, done once
// the active ones completed, and its timeout; a part of a cluster renumbering its members; the
// node's CPUs as the union of its ranks' affinity masks.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/affinity.hpp"
#include "dtrain/comm/cluster.hpp"
#include "dtrain/comm/guard.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

void world(int& rank, int& size) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
}

int count_of(const std::string& text, const std::string& word) {
  int n = 0;
  for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

TEST(ClusterMpi, RolesAndCommunicators) {
  int rank = 0, W = 1;
  world(rank, W);
  for (int k = 0; k < W; ++k) {
    SCOPED_TRACE("num_ps " + std::to_string(k));
    Cluster c(MPI_COMM_WORLD, k);
    EXPECT_EQ(c.world_size(), W);
    EXPECT_EQ(c.world_rank(), rank);
    EXPECT_EQ(c.num_ps(), k);
    EXPECT_EQ(c.num_workers(), W - k);
    EXPECT_EQ(c.num_nodes(), 1);  // one machine: one shared-memory node
    // One node: the ps are the highest world ranks, in order.
    const bool want_ps = rank >= W - k;
    EXPECT_EQ(c.is_ps(), want_ps);
    EXPECT_EQ(c.is_worker(), !want_ps);
    EXPECT_EQ(c.me().index, want_ps ? rank - (W - k) : rank);
    EXPECT_EQ(c.is_chief(), rank == 0);
    EXPECT_EQ(c.me().local_size, W);
    EXPECT_EQ(c.me().local_rank, rank);
    EXPECT_FALSE(c.me().host.empty());
    for (int p = 0; p < k; ++p) EXPECT_EQ(c.ps_rank(p), W - k + p);
    for (int w = 0; w < W - k; ++w) EXPECT_EQ(c.worker_rank(w), w);
    int role_size = 0, role_rank = -1;
    MPI_Comm_size(c.role_comm(), &role_size);
    MPI_Comm_rank(c.role_comm(), &role_rank);
    EXPECT_EQ(role_size, want_ps ? k : W - k);
    EXPECT_EQ(role_rank, c.me().index);
    // The role communicator really connects the ranks of one role: sum of world ranks.
    int sum = 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, c.role_comm());
    int want_sum = 0;
    for (int r = 0; r < W; ++r)
      if ((r >= W - k) == want_ps) want_sum += r;
    EXPECT_EQ(sum, want_sum);

    c.set_devices("dev" + std::to_string(rank * 10));
    for (int r = 0; r < W; ++r) EXPECT_EQ(c.ranks()[r].device, "dev" + std::to_string(r * 10));
    const std::string table = c.role_table();
    EXPECT_EQ(count_of(table, " ps "), k) << table;
    EXPECT_EQ(count_of(table, "worker "), W - k) << table;
    EXPECT_EQ(count_of(table, "(chief)"), 1) << table;
    EXPECT_NE(table.find(std::to_string(k) + " ps, " + std::to_string(W - k) + " workers"),
              std::string::npos)
        << table;
    EXPECT_NE(table.find("dev" + std::to_string((W - 1) * 10)), std::string::npos) << table;
  }
}

// A part of a cluster (a pipelined ps job's stage): the world split by index parity into two parts
// (a part per parity, ps and workers alike, the workers listed in reverse): each part renumbers
// its ps and workers in the order given, keeps each rank's parent world rank, and its
// communicators hold exactly its members.
TEST(ClusterMpi, PartsRenumberTheirMembers) {
  int rank = 0, W = 1;
  world(rank, W);
  if (W < 2) GTEST_SKIP() << "needs a ps and a worker";
  const Cluster whole(MPI_COMM_WORLD, W / 2);
  const int color = whole.me().index % 2;
  std::vector<int> ps, workers;
  for (int k = 0; k < whole.num_ps(); ++k)
    if (k % 2 == color) ps.push_back(k);
  for (int w = whole.num_workers() - 1; w >= 0; --w)
    if (w % 2 == color) workers.push_back(w);
  const Cluster part(whole, color, ps, workers);
  EXPECT_EQ(part.num_ps(), static_cast<int>(ps.size()));
  EXPECT_EQ(part.num_workers(), static_cast<int>(workers.size()));
  EXPECT_EQ(part.world_size(), static_cast<int>(ps.size() + workers.size()));
  EXPECT_EQ(part.me().rank, rank);  // the parent's world rank, for messages
  EXPECT_EQ(part.is_ps(), whole.is_ps());
  const std::vector<int>& mine = whole.is_ps() ? ps : workers;
  const auto at = std::find(mine.begin(), mine.end(), whole.me().index) - mine.begin();
  EXPECT_EQ(part.me().index, at);
  EXPECT_EQ(part.is_chief(), part.is_worker() && whole.me().index == workers.front());
  for (std::size_t k = 0; k < ps.size(); ++k)
    EXPECT_EQ(part.ranks()[part.ps_rank(static_cast<int>(k))].rank, whole.ps_rank(ps[k]));
  for (std::size_t w = 0; w < workers.size(); ++w)
    EXPECT_EQ(part.ranks()[part.worker_rank(static_cast<int>(w))].rank,
              whole.worker_rank(workers[w]));
  // The part's world sums exactly its members' world ranks; its role communicator its role's.
  int sum = 0, want = 0, role_size = 0;
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, part.world());
  for (const int k : ps) want += whole.ps_rank(k);
  for (const int w : workers) want += whole.worker_rank(w);
  EXPECT_EQ(sum, want);
  MPI_Comm_size(part.role_comm(), &role_size);
  EXPECT_EQ(role_size, part.is_ps() ? part.num_ps() : part.num_workers());
}

/// Restores the calling thread's CPUs when it goes.
struct AffinityGuard {
  cpu_set_t saved;
  AffinityGuard() { sched_getaffinity(0, sizeof saved, &saved); }
  ~AffinityGuard() { sched_setaffinity(0, sizeof saved, &saved); }
};

TEST(ClusterMpi, NodeCpusAreTheUnionOfTheRanksCpus) {
  int rank = 0, W = 1;
  world(rank, W);
  const AffinityGuard guard;
  const std::vector<int> mine = allowed_cpus();  // the launcher's binding, or every CPU
  EXPECT_GE(Cluster(MPI_COMM_WORLD, 0).node_cpus(), static_cast<int>(mine.size()));
  // Every rank on one CPU, as a job given one CPU of a shared node: 1, whatever the node has.
  int c = mine.front();
  MPI_Allreduce(MPI_IN_PLACE, &c, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  ASSERT_TRUE(pin_this_thread({c}));
  EXPECT_EQ(Cluster(MPI_COMM_WORLD, 0).node_cpus(), 1);
  // The last rank back on its own CPUs: the union of {c} and those.
  if (rank == W - 1) ASSERT_TRUE(pin_this_thread(mine));
  int want = static_cast<int>(mine.size()) +
             (std::find(mine.begin(), mine.end(), c) == mine.end() ? 1 : 0);
  MPI_Bcast(&want, 1, MPI_INT, W - 1, MPI_COMM_WORLD);
  EXPECT_EQ(Cluster(MPI_COMM_WORLD, 0).node_cpus(), want);
}

TEST(ClusterMpi, TooManyPsRefusedOnEveryRank) {
  int rank = 0, W = 1;
  world(rank, W);
  for (int k : {W, W + 1}) {
    try {
      Cluster c(MPI_COMM_WORLD, k);
      ADD_FAILURE() << "num_ps " << k << " accepted with " << W << " ranks";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--num-ps"), std::string::npos) << e.what();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every rank got here: nobody is stuck in the constructor
}

TEST(AllOrNothing, SuccessReturnsEverywhere) {
  int ran = 0;
  EXPECT_NO_THROW(all_or_nothing(MPI_COMM_WORLD, [&] { ran = 1; }));
  EXPECT_EQ(ran, 1);
}

TEST(AllOrNothing, OneRankFailsAllRaiseTheSameCode) {
  int rank = 0, W = 1;
  world(rank, W);
  for (int failing = 0; failing < W; ++failing) {
    SCOPED_TRACE("failing rank " + std::to_string(failing));
    int code = -1;
    try {
      all_or_nothing(MPI_COMM_WORLD, [&] {
        if (rank == failing)
          throw InputError("rank " + std::to_string(rank) + ": bad input for the test");
      });
      ADD_FAILURE() << "no ReportedError on rank " << rank;
    } catch (const ReportedError& e) {
      code = e.code();
    }
    EXPECT_EQ(code, kExitInput);
    int min = 0, max = 0;
    MPI_Allreduce(&code, &min, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&code, &max, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(min, max) << "ranks disagree on the exit code";
  }
}

TEST(AllOrNothing, LowestFailingRankDecidesTheCode) {
  int rank = 0, W = 1;
  world(rank, W);
  // Rank 1 raises a RuntimeFault (4), every higher rank an InputError (2): all must exit with 4.
  int code = -1;
  try {
    all_or_nothing(MPI_COMM_WORLD, [&] {
      if (rank == 1) throw RuntimeFault("fault on rank 1");
      if (rank > 1) throw InputError("input error on rank " + std::to_string(rank));
    });
    ADD_FAILURE() << "no ReportedError on rank " << rank;
  } catch (const ReportedError& e) {
    code = e.code();
  }
  EXPECT_EQ(code, kExitFault);
  // A later guarded phase works again (nothing left pending from the failed one).
  EXPECT_NO_THROW(all_or_nothing(MPI_COMM_WORLD, [] {}));
}

TEST(WaitAny, BuildsItsNameOnlyWhenItTimesOut) {
  // A receive from this rank that nothing sends: the wait times out, naming what the callable
  // returns; it was called once, at the deadline, not per poll.
  std::vector<MPI_Request> reqs(1);
  int value = 0;
  MPI_Irecv(&value, 1, MPI_INT, 0, 4242, MPI_COMM_SELF, &reqs[0]);
  int calls = 0;
  const std::function<std::string()> name = [&] {
    ++calls;
    return std::string("ps 0 waiting for worker messages (the payload of worker(s) 3)");
  };
  MPI_Status st;
  try {
    (void)wait_any(reqs, 0.2, name, &st);
    ADD_FAILURE() << "an unmatched receive completed";
  } catch (const TimeoutError& e) {
    EXPECT_EQ(e.operation(), name());
    EXPECT_DOUBLE_EQ(e.seconds(), 0.2);
  }
  EXPECT_EQ(calls, 2);  // the timeout's and the one above
  MPI_Cancel(&reqs[0]);
  MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
  // A completed request returns its index without building the name.
  calls = 0;
  int sent = 7;
  MPI_Request send = MPI_REQUEST_NULL;
  MPI_Irecv(&value, 1, MPI_INT, 0, 4243, MPI_COMM_SELF, &reqs[0]);
  MPI_Isend(&sent, 1, MPI_INT, 0, 4243, MPI_COMM_SELF, &send);
  EXPECT_EQ(wait_any(reqs, 5.0, name, &st), 0);
  MPI_Wait(&send, MPI_STATUS_IGNORE);
  EXPECT_EQ(value, 7);
  EXPECT_EQ(calls, 0);
}

TEST(WaitAll, ReturnsOnceEveryActiveRequestCompletedAndTimesOutOnTheRest) {
  // Null entries among the requests are skipped; the wait returns when the active ones have
  // completed (here in its first poll), each set to MPI_REQUEST_NULL, the data delivered.
  int in[2] = {0, 0};
  const int out[2] = {5, 6};
  std::vector<MPI_Request> reqs(6, MPI_REQUEST_NULL);
  MPI_Irecv(&in[0], 1, MPI_INT, 0, 4250, MPI_COMM_SELF, &reqs[1]);
  MPI_Irecv(&in[1], 1, MPI_INT, 0, 4251, MPI_COMM_SELF, &reqs[3]);
  MPI_Isend(&out[1], 1, MPI_INT, 0, 4251, MPI_COMM_SELF, &reqs[4]);
  MPI_Isend(&out[0], 1, MPI_INT, 0, 4250, MPI_COMM_SELF, &reqs[5]);
  wait_all(reqs, 5.0, "self exchange");
  EXPECT_EQ(in[0], 5);
  EXPECT_EQ(in[1], 6);
  for (MPI_Request r : reqs) EXPECT_EQ(r, MPI_REQUEST_NULL);
  wait_all(reqs, 0.0, "nothing active");  // returns at once, no deadline to miss
  // A request that never completes: the completed one is freed, the wait times out naming itself.
  int never = 0, sent = 9, got = 0;
  std::vector<MPI_Request> mixed(3, MPI_REQUEST_NULL);
  MPI_Irecv(&never, 1, MPI_INT, 0, 4252, MPI_COMM_SELF, &mixed[0]);
  MPI_Irecv(&got, 1, MPI_INT, 0, 4253, MPI_COMM_SELF, &mixed[1]);
  MPI_Isend(&sent, 1, MPI_INT, 0, 4253, MPI_COMM_SELF, &mixed[2]);
  try {
    wait_all(mixed, 0.2, "worker 1 pushing gradients with ps 0 (rank 2)");
    ADD_FAILURE() << "an unmatched receive completed";
  } catch (const TimeoutError& e) {
    EXPECT_EQ(e.operation(), "worker 1 pushing gradients with ps 0 (rank 2)");
    EXPECT_DOUBLE_EQ(e.seconds(), 0.2);
  }
  EXPECT_EQ(got, 9);
  EXPECT_EQ(mixed[1], MPI_REQUEST_NULL);
  EXPECT_EQ(mixed[2], MPI_REQUEST_NULL);
  ASSERT_NE(mixed[0], MPI_REQUEST_NULL);
  MPI_Cancel(&mixed[0]);
  MPI_Wait(&mixed[0], MPI_STATUS_IGNORE);
}

TEST(AllOrNothing, ARankStuckInItsSetUpTimesTheOthersOut) {
  int rank = 0, W = 1;
  world(rank, W);
  if (W < 2) GTEST_SKIP() << "needs 2 ranks";
  // A communicator of its own, never freed: the timed-out ranks leave their agreement posted (it
  // completes when rank 0 arrives), and Open MPI's non-blocking collectives must not outlive it.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const double saved = comm_timeout();
  set_comm_timeout(0.3);
  bool timed_out = false;
  std::string what, operation;
  try {
    all_or_nothing(comm, [&] {
      if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    });
  } catch (const TimeoutError& e) {
    timed_out = true;
    what = e.what();
    operation = e.operation();
    EXPECT_DOUBLE_EQ(e.seconds(), 0.3);
    EXPECT_EQ(exit_code(e), kExitFault);
  }
  set_comm_timeout(saved);
  if (rank == 0) {
    EXPECT_FALSE(timed_out) << what;  // the others' agreement was posted: it completes
  } else {
    ASSERT_TRUE(timed_out) << "rank " << rank << " waited past the deadline without an error";
    EXPECT_NE(operation.find("agreeing on the set-up"), std::string::npos) << operation;
    EXPECT_NE(what.find("timed out after 0.3 s waiting in: agreeing on the set-up"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("see --timeout"), std::string::npos) << what;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace dtrain
