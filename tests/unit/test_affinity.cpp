// tests/unit/test_affinity.cpp — `--pin-threads`' CPU blocks (comm/affinity.hpp plan_cores): the
// ranks of a node get disjoint blocks in node-local rank order, the communication thread the last
// CPU of a block of 2 or more (with blocks of one, the CPUs left over, shared), ranks beyond the
// CPUs share them; with SMT, whole cores per rank while there are enough, else one hardware
// thread of every core before any core's second; the cores read from a sysfs layout; CPU lists as
// /proc writes them; and pinning the calling thread shows in what the process reports.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
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

/// Every CPU a core of its own (no SMT).
std::vector<std::vector<int>> single(const std::vector<int>& cpus) {
  std::vector<std::vector<int>> cores;
  for (int c : cpus) cores.push_back({c});
  return cores;
}

/// `n` cores of 2 hardware threads numbered as most x86 machines do: core i is {i, i + n}.
std::vector<std::vector<int>> smt2(int n) {
  std::vector<std::vector<int>> cores;
  for (int i = 0; i < n; ++i) cores.push_back({i, i + n});
  return cores;
}

TEST(Affinity, RanksOfANodeGetDisjointBlocksInLocalRankOrder) {
  // The 16-core lent machine: 8 workers get 2 CPUs each, compute + communication.
  const auto cpus = single(range(0, 16));
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
  EXPECT_EQ(plan_cores(single({1, 3, 5, 7}), 1, 2, true).compute, std::vector<int>{5});
  EXPECT_EQ(plan_cores(single({1, 3, 5, 7}), 1, 2, true).comm, 7);
}

TEST(Affinity, MoreRanksThanCpusShareThem) {
  const CorePlan p = plan_cores(single({0, 1}), 2, 3, true);
  EXPECT_TRUE(p.shared);
  EXPECT_EQ(p.compute, std::vector<int>{0});
  EXPECT_EQ(p.comm, -1);
  EXPECT_THROW((void)plan_cores({}, 0, 1, false), InputError);
  EXPECT_THROW((void)plan_cores({{0}, {}}, 0, 1, false), InputError);
  EXPECT_THROW((void)plan_cores(single({0, 1}), 2, 2, false), InputError);
}

TEST(Affinity, SmtSiblingsStayWithOneRankWhileEveryRankCanHaveACore) {
  // 16 CPUs on 8 cores, siblings i and i + 8: 8 workers get a core each, the compute thread on
  // its first hardware thread and the communication thread on its sibling — never two ranks'
  // compute threads on one core, as blocks of consecutive CPU numbers would put them (0 and 8).
  const auto cores = smt2(8);
  for (int r = 0; r < 8; ++r) {
    const CorePlan p = plan_cores(cores, r, 8, true);
    EXPECT_EQ(p.compute, std::vector<int>{r}) << r;
    EXPECT_EQ(p.comm, r + 8) << r;
  }
  // 4 ranks: 2 cores each; the compute CPUs one thread of each core first (OpenMP threads 0 and
  // 1 on different cores), the communication thread on the last sibling.
  EXPECT_EQ(plan_cores(cores, 1, 4, true).compute, (std::vector<int>{2, 3, 10}));
  EXPECT_EQ(plan_cores(cores, 1, 4, true).comm, 11);
  EXPECT_EQ(plan_cores(cores, 3, 4, false).compute, (std::vector<int>{6, 7, 14, 15}));
  // 3 ranks: 2 cores each, cores 6 and 7 free; nobody's block holds a sibling of another's.
  EXPECT_EQ(plan_cores(cores, 2, 3, false).compute, (std::vector<int>{4, 5, 12, 13}));
  // 12 ranks on 8 cores: one hardware thread each, every core's first before any second; the
  // communication threads on the 4 siblings left over (cores 4-7), 3 to a CPU.
  std::vector<int> compute, per_comm(16, 0);
  for (int r = 0; r < 12; ++r) {
    const CorePlan p = plan_cores(cores, r, 12, true);
    ASSERT_EQ(p.compute.size(), 1U);
    compute.push_back(p.compute[0]);
    ++per_comm[static_cast<std::size_t>(p.comm)];
  }
  EXPECT_EQ(compute, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(per_comm, (std::vector<int>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 3, 3, 3}));
  // Siblings numbered side by side ({0, 1}, {2, 3}, ...): the same blocks by core.
  const std::vector<std::vector<int>> paired = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  EXPECT_EQ(plan_cores(paired, 2, 4, true).compute, std::vector<int>{4});
  EXPECT_EQ(plan_cores(paired, 2, 4, true).comm, 5);
  EXPECT_EQ(plan_cores(paired, 5, 6, false).compute, std::vector<int>{3});  // 6 > 4 cores
  // More ranks than hardware threads: shared, in the same order.
  EXPECT_TRUE(plan_cores(paired, 9, 10, false).shared);
  EXPECT_EQ(plan_cores(paired, 9, 10, false).compute, std::vector<int>{2});  // 0 2 4 6 1 3 5 7
}

TEST(Affinity, CoresComeFromTheSysfsSiblingLists) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("dtrain_affinity_" + std::to_string(::getpid()));
  const std::string sysfs = (dir / "cpu").string();
  // 8 CPUs, siblings i and i + 4; CPU 5's file is missing, CPU 6's is not a list.
  const std::vector<std::string> text = {"0,4", "1,4-5", "2,6", "3,7", "0,4", "", "junk", "3,7"};
  for (int c = 0; c < 8; ++c) {
    if (c == 5) continue;
    const std::string topo = sysfs + "/cpu" + std::to_string(c) + "/topology";
    std::filesystem::create_directories(topo);
    std::ofstream(topo + "/thread_siblings_list") << text[static_cast<std::size_t>(c)] << "\n";
  }
  // CPU 1's list also names 5 (odd but possible): it joins core 1. CPU 2 names 6, whose own
  // file is junk: 6 is already placed with 2. CPU 7 is not usable here: core 3 is {3}.
  const std::vector<std::vector<int>> cores = cores_of({0, 1, 2, 3, 4, 5, 6}, sysfs);
  EXPECT_EQ(cores, (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3}}));
  // No sysfs at all: every CPU a core of its own.
  EXPECT_EQ(cores_of({0, 2, 3}, (dir / "nowhere").string()), single({0, 2, 3}));
  fs::remove_all(dir);
  // This machine's own: every allowed CPU in exactly one core.
  const std::vector<int> mine = allowed_cpus();
  std::vector<int> flat;
  for (const auto& core : cores_of(mine)) flat.insert(flat.end(), core.begin(), core.end());
  std::sort(flat.begin(), flat.end());
  EXPECT_EQ(flat, mine);
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
