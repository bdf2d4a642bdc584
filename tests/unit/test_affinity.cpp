// tests/unit/test_affinity.cpp — `--pin-threads`' CPU blocks (comm/affinity.hpp plan_cores): the
// ranks of a node get disjoint blocks in node-local rank order, the communication thread the last
// CPU of a block of 2 or more (with blocks of one, the CPUs left over, shared), ranks beyond the
// CPUs share them; CPU lists as /proc writes them;
// and pinning the calling thread shows in what the process reports.
#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "dtrain/comm/affinity.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

std::vector<int> range(int first, int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(Affinity, RanksOfANodeGetDisjointBlocksInLocalRankOrder) {
  // The 16-core lent machine: 8 workers get 2 CPUs each, compute + communication.
  const std::vector<int> cpus = range(0, 16);
  std::set<int> used;
  for (int r = 0; r < 8; ++r) {
    const CorePlan p = plan_cores(cpus, r, 8, true);
    EXPECT_EQ(p.compute, std::vector<int>{2 * r}) << r;
    EXPECT_EQ(p.comm, 2 * r + 1) << r;
    EXPECT_FALSE(p.shared);
    for (int c : p.compute) EXPECT_TRUE(used.insert(c).second) << "CPU " << c << " twice";
    EXPECT_TRUE(used.insert(p.comm).second);
  }
  // 12 workers: one CPU each; the communication threads share the 4 left over, 3 to a CPU.
  std::vector<int> per_comm_cpu(16, 0);
  for (int r = 0; r < 12; ++r) {
    const CorePlan p = plan_cores(cpus, r, 12, true);
    EXPECT_EQ(p.compute, std::vector<int>{r});
    EXPECT_EQ(p.comm, 12 + r % 4) << r;
    ++per_comm_cpu[static_cast<std::size_t>(p.comm)];
  }
  EXPECT_EQ(per_comm_cpu, (std::vector<int>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 3, 3, 3}));
  // 16 ranks on 16 CPUs: nothing left over, the communication thread stays with its rank.
  EXPECT_EQ(plan_cores(cpus, 5, 16, true).comm, -1);
  // Without a communication thread the left-over CPUs stay free.
  EXPECT_EQ(plan_cores(cpus, 5, 12, false).comm, -1);
  // 3 ranks with 4 threads' worth each, no communication thread: blocks of 5, CPU 15 free.
  EXPECT_EQ(plan_cores(cpus, 2, 3, false).compute, range(10, 5));
  EXPECT_EQ(plan_cores(cpus, 2, 3, false).comm, -1);
  // A launcher's binding with holes in it: blocks follow the list, not the numbers.
  EXPECT_EQ(plan_cores({1, 3, 5, 7}, 1, 2, true).compute, std::vector<int>{5});
  EXPECT_EQ(plan_cores({1, 3, 5, 7}, 1, 2, true).comm, 7);
}

TEST(Affinity, MoreRanksThanCpusShareThem) {
  const CorePlan p = plan_cores({0, 1}, 2, 3, true);
  EXPECT_TRUE(p.shared);
  EXPECT_EQ(p.compute, std::vector<int>{0});
  EXPECT_EQ(p.comm, -1);
  EXPECT_THROW((void)plan_cores({}, 0, 1, false), InputError);
  EXPECT_THROW((void)plan_cores({0, 1}, 2, 2, false), InputError);
}

TEST(Affinity, CpuListsAsProcWritesThem) {
  EXPECT_EQ(cpu_list_text({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(cpu_list_text({5}), "5");
  EXPECT_EQ(cpu_list_text({}), "");
}

// A thread pinned to one CPU reports that CPU, and the process's union includes it.
TEST(Affinity, APinnedThreadReportsItsCpu) {
  const std::vector<int> mine = allowed_cpus();
  ASSERT_FALSE(mine.empty());
  const int cpu = mine.back();
  std::vector<int> seen;
  std::thread t([&] {
    std::string why;
    ASSERT_TRUE(pin_this_thread({cpu}, &why)) << why;
    seen = allowed_cpus();
  });
  t.join();
  EXPECT_EQ(seen, std::vector<int>{cpu});
  EXPECT_EQ(allowed_cpus(), mine) << "pinning a thread must leave the others alone";
  const std::vector<int> all = process_thread_cpus();
  EXPECT_TRUE(std::includes(all.begin(), all.end(), mine.begin(), mine.end()));
}

}  // namespace
}  // namespace dtrain
