// dtrain/core/log.cpp — line-buffered, thread-safe logging; the clock and the polling sleep.
#include "dtrain/core/log.hpp"

#include <sys/prctl.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {
std::mutex g_log_mu;
}

void log_info(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

void log_error(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  std::fprintf(stderr, "dtrain: error: %s\n", with_error_prefix(line).c_str());
  std::fflush(stderr);
}

void log_warn(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  std::fprintf(stderr, "dtrain: warning: %s%s\n", error_prefix().c_str(), line.c_str());
  std::fflush(stderr);
}

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

void nap_us(int microseconds) {
  thread_local const bool slack_set = prctl(PR_SET_TIMERSLACK, kNapSlackNs, 0, 0, 0) == 0;
  (void)slack_set;  // where prctl fails, the sleep is only less precise
  std::this_thread::sleep_for(std::chrono::microseconds(microseconds));
}

double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux reports KiB
}

}  // namespace dtrain
