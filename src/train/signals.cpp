// dtrain/train/signals.cpp — first signal: set a flag; second SIGTERM/SIGINT: _exit immediately.
#include "dtrain/train/signals.hpp"

#include <csignal>
#include <unistd.h>

namespace dtrain {
namespace {
std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int signo) {
  if (g_stop.exchange(true)) {
    // A repeated SIGUSR1 is the same checkpoint request arriving by several routes (Slurm signals
    // every process of the job, and mpirun/srun and the batch script forward it too): ignore it.
    if (signo == SIGUSR1) return;
    _exit(128 + signo);  // second SIGTERM/SIGINT: leave now
  }
  g_signal.store(signo);
}
}  // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGTERM, SIGUSR1, SIGINT}) sigaction(s, &sa, nullptr);
}

bool stop_requested() { return g_stop.load(); }
const std::atomic<bool>& stop_flag() { return g_stop; }
int stop_signal() { return g_signal.load(); }

}  // namespace dtrain
