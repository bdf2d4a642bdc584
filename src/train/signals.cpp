// dtrain/train/signals.cpp — the stop signals, blocked everywhere and taken by one thread
// (sigwait): first signal, a flag; second SIGTERM/SIGINT, _exit at once (signals.hpp says why no
// handler runs on the computing threads).
#include "dtrain/train/signals.hpp"

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>

#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {
std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};
std::atomic<bool> g_armed{false};

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGUSR1, SIGINT}) sigaddset(&set, s);
  return set;
}

/// The signal's default action, as if it had never been blocked: it ends the process.
[[noreturn]] void die_by(int signo) {
  std::signal(signo, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, signo);
  pthread_kill(pthread_self(), signo);          // pending on this thread while blocked,
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);  // delivered here: the process ends
  _exit(128 + signo);                           // not reached
}

void take(int signo) {
  if (!g_armed.load()) die_by(signo);
  if (g_stop.load()) {
    // A repeated SIGUSR1 is the same checkpoint request arriving by several routes (Slurm signals
    // every process of the job, and mpirun/srun and the batch script forward it too): ignore it.
    if (signo == SIGUSR1) return;
    _exit(128 + signo);  // second SIGTERM/SIGINT: leave now
  }
  g_signal.store(signo);  // this thread alone writes both: the number is there before the flag
  g_stop.store(true);
}
}  // namespace

void route_stop_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    const sigset_t set = stop_signal_set();
    if (const int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr); rc != 0)
      throw LibraryError(format_error(
          std::string("pthread_sigmask blocking SIGTERM, SIGUSR1 and SIGINT: ") + std::strerror(rc),
          __FILE__, __LINE__));
    std::thread([set] {
      pthread_setname_np(pthread_self(), "dtrain-signals");  // in ps, top -H and /proc/*/comm
      for (;;) {
        int signo = 0;
        if (sigwait(&set, &signo) == 0) take(signo);
      }
    }).detach();  // blocked in sigwait until the process ends
  });
}

void arm_graceful_stop() {
  route_stop_signals();
  g_armed.store(true);
}

bool stop_requested() { return g_stop.load(); }
const std::atomic<bool>& stop_flag() { return g_stop; }
int stop_signal() { return g_signal.load(); }

}  // namespace dtrain
