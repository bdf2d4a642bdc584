// dtrain/comm/affinity.cpp — CPU blocks per rank and thread pinning (comm/affinity.hpp).
#include "dtrain/comm/affinity.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "dtrain/core/error.hpp"

namespace dtrain {

namespace {

/// "0-3,8" → {0, 1, 2, 3, 8} added to `out`.
void parse_cpu_list(const std::string& text, std::set<int>& out) {
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    if (item.empty()) continue;
    const std::size_t dash = item.find('-');
    const int lo = std::stoi(item.substr(0, dash));
    const int hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1));
    for (int cpu = lo; cpu <= hi; ++cpu) out.insert(cpu);
  }
}

/// The CPUs of `cores` (a range of them), one hardware thread of every core first, then every
/// core's second, and so on.
std::vector<int> threads_across(std::vector<std::vector<int>>::const_iterator first,
                                std::vector<std::vector<int>>::const_iterator last) {
  std::vector<int> out;
  for (std::size_t t = 0;; ++t) {
    const std::size_t before = out.size();
    for (auto core = first; core != last; ++core)
      if (t < core->size()) out.push_back((*core)[t]);
    if (out.size() == before) return out;
  }
}

}  // namespace

CorePlan plan_cores(const std::vector<std::vector<int>>& cores, int local_rank, int local_size,
                    bool comm_thread) {
  DT_REQUIRE(!cores.empty(), "--pin-threads: no CPU to pin to");
  for (const auto& core : cores) DT_REQUIRE(!core.empty(), "--pin-threads: a core without CPUs");
  DT_REQUIRE(local_rank >= 0 && local_rank < local_size,
             "--pin-threads: node-local rank " + std::to_string(local_rank) + " outside [0, " +
                 std::to_string(local_size) + ")");
  CorePlan plan;
  const auto n_cores = static_cast<int>(cores.size());
  std::vector<int> mine, rest;  // this rank's CPUs, and those no rank's block takes
  if (local_size <= n_cores) {  // whole cores
    const int per = n_cores / local_size;
    const auto first = cores.begin() + static_cast<std::ptrdiff_t>(local_rank) * per;
    mine = threads_across(first, first + per);
    rest =
        threads_across(cores.begin() + static_cast<std::ptrdiff_t>(per) * local_size, cores.end());
  } else {  // hardware threads, one of every core first
    const std::vector<int> all = threads_across(cores.begin(), cores.end());
    const auto n = static_cast<int>(all.size());
    const int block = n / local_size;
    if (block == 0) {
      plan.shared = true;
      plan.compute = {all[static_cast<std::size_t>(local_rank % n)]};
      return plan;
    }
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(local_rank) * block;
    mine.assign(first, first + block);
    rest.assign(all.begin() + static_cast<std::ptrdiff_t>(block) * local_size, all.end());
  }
  plan.compute = mine;
  if (comm_thread && mine.size() >= 2) {
    plan.comm = plan.compute.back();
    plan.compute.pop_back();
  } else if (comm_thread && !rest.empty()) {
    // Blocks of one CPU: the communication threads share the CPUs left over, not their rank's.
    plan.comm = rest[static_cast<std::size_t>(local_rank) % rest.size()];
  }
  return plan;
}

std::vector<std::vector<int>> cores_of(const std::vector<int>& cpus, const std::string& sysfs) {
  const std::set<int> usable(cpus.begin(), cpus.end());
  std::map<int, std::vector<int>> by_first;  // a core's first usable CPU → its usable CPUs
  std::set<int> placed;
  for (int cpu : cpus) {
    if (placed.count(cpu)) continue;
    std::set<int> siblings;
    std::ifstream in(sysfs + "/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list");
    std::string text;
    if (in >> text) {
      try {
        parse_cpu_list(text, siblings);
      } catch (const std::exception&) {
        siblings.clear();  // unreadable: a core of its own
      }
    }
    siblings.insert(cpu);
    std::vector<int> core;
    for (int s : siblings)
      if (usable.count(s) && placed.insert(s).second) core.push_back(s);
    if (!core.empty()) by_first.emplace(core.front(), std::move(core));
  }
  std::vector<std::vector<int>> out;
  for (auto& [first, core] : by_first) out.push_back(std::move(core));
  return out;
}

std::vector<int> allowed_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0)
    throw LibraryError(format_error(
        std::string("sched_getaffinity failed: ") + std::strerror(errno), __FILE__, __LINE__));
  std::vector<int> out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask)) out.push_back(cpu);
  return out;
}

namespace {
/// sched_setaffinity(tid, cpus): 0 is the calling thread.
bool pin_task(pid_t tid, const std::vector<int>& cpus, std::string* why) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int cpu : cpus)
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &mask);
  if (CPU_COUNT(&mask) > 0 && sched_setaffinity(tid, sizeof mask, &mask) == 0) return true;
  if (why)
    *why = "sched_setaffinity(" + cpu_list_text(cpus) +
           ") failed: " + (CPU_COUNT(&mask) > 0 ? std::strerror(errno) : "no valid CPU");
  return false;
}
}  // namespace

bool pin_this_thread(const std::vector<int>& cpus, std::string* why) {
  return pin_task(0, cpus, why);
}

bool pin_process_threads(const std::vector<int>& cpus, std::string* why) {
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const std::string tid = task.path().filename().string();
    if (!pin_task(static_cast<pid_t>(std::stol(tid)), cpus, why)) {
      if (errno == ESRCH) continue;  // the thread ended meanwhile
      return false;
    }
  }
  if (ec && why) *why = "cannot list /proc/self/task: " + ec.message();
  return !ec;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> process_threads() {
  std::vector<std::pair<std::string, std::string>> out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::string name, cpus;
    std::ifstream(task.path() / "comm") >> name;
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Cpus_allowed_list:", 0) == 0 && line.size() > 18) cpus = line.substr(18);
    cpus.erase(0, cpus.find_first_not_of(" \t"));
    if (!cpus.empty()) out.emplace_back(name, cpus);
  }
  return out;
}

std::vector<int> process_thread_cpus() {
  std::set<int> cpus;
  for (const auto& [name, list] : process_threads()) parse_cpu_list(list, cpus);
  return {cpus.begin(), cpus.end()};
}

}  // namespace dtrain
