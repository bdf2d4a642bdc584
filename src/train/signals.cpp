// dtrain/train/signals.cpp — first signal: set a flag; second: _exit immediately.
#include "dtrain/train/signals.hpp"

#include <csignal>
#include <unistd.h>

namespace dtrain {
namespace {
std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int signo) {
  if (g_stop.exchange(true)) _exit(128 + signo);  // second signal: leave now
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
