// tests/tools/compute_under_signals.cpp — trains a small conv + dense model on the CPU backend (its
// convolution and inner products run oneDNN's generated GEMM kernels) on the main thread for
// SECONDS (default 2) while a second thread sends SIGUSR1 to this process every 20 µs, with the
// stop signals routed and armed as `dtrain` does (train/signals.hpp). Used by
// tests/cli/test_signals_during_compute.sh.
//
// Those kernels point the stack pointer into a heap buffer while they run: a signal handler run on
// the computing thread wrote its frame there and corrupted the heap (oneDNN issue #4845). With a
// handler installed (before the signal thread), glibc aborted this program within 2 s on every run
// ("corrupted size vs. prev_size while consolidating"). It checks, and exits 1 naming the failure:
//   - SIGTERM, SIGUSR1 and SIGINT are blocked on this thread and on a thread started afterwards,
//     and none has a handler (the kernel never writes a signal frame on a computing thread);
//   - the signals arrived: stop_requested() is set, stop_signal() is SIGUSR1;
//   - the training steps stay finite.
// Prints "<steps> steps, <signals> signals".
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "dtrain/model/model.hpp"
#include "dtrain/train/signals.hpp"

namespace {

using dtrain::Shape;

/// "" when SIGTERM, SIGUSR1 and SIGINT are all blocked on the calling thread, else what is not.
std::string unblocked_here() {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  std::string out;
  for (int s : {SIGTERM, SIGUSR1, SIGINT})
    if (!sigismember(&now, s)) out += std::string(out.empty() ? "" : ", ") + strsignal(s);
  return out;
}

int fail(const std::string& why) {
  std::fprintf(stderr, "compute_under_signals: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const double secs = argc > 1 ? std::atof(argv[1]) : 2.0;
  dtrain::route_stop_signals();
  dtrain::arm_graceful_stop();

  if (const std::string s = unblocked_here(); !s.empty())
    return fail("not blocked on the main thread: " + s);
  std::string later;
  std::thread([&later] { later = unblocked_here(); }).join();
  if (!later.empty()) return fail("not blocked on a thread started afterwards: " + later);
  for (int s : {SIGTERM, SIGUSR1, SIGINT}) {
    struct sigaction sa {};
    sigaction(s, nullptr, &sa);
    if (sa.sa_handler != SIG_DFL)
      return fail(std::string("a handler is installed for ") + strsignal(s));
  }

  auto be = dtrain::make_cpu_backend();
  const int n = 64;
  dtrain::Model m(*be,
                  {"conv filters=8 kernel=3 pad=1", "relu", "flatten", "dense units=256", "relu",
                   "dense units=256", "relu", "dense"},
                  Shape{1, 1, 16, 16}, 10, n);
  m.initialize(1);
  dtrain::DeviceBuffer<float> x(*be, static_cast<std::size_t>(n) * 256);
  dtrain::DeviceBuffer<float> stats(*be, dtrain::kStatsFloats);
  dtrain::DeviceBuffer<std::int32_t> y(*be, n);
  std::vector<float> hx(x.size());
  std::vector<std::int32_t> hy(n);
  for (std::size_t i = 0; i < hx.size(); ++i) hx[i] = static_cast<float>(i % 17) / 17.0f;
  for (int i = 0; i < n; ++i) hy[static_cast<std::size_t>(i)] = i % 10;
  be->copy_to_device(x.data(), hx.data(), hx.size() * sizeof(float));
  be->copy_to_device(y.data(), hy.data(), hy.size() * sizeof(std::int32_t));

  std::atomic<bool> done{false};
  std::atomic<long> sent{0};
  std::thread sender([&] {
    while (!done.load()) {
      kill(getpid(), SIGUSR1);
      ++sent;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  long steps = 0;
  float loss = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < secs) {
    be->fill(stats.data(), 0.0f, dtrain::kStatsFloats);
    m.train_step(x.data(), y.data(), n, 1.0f / n, 9, stats.data());
    be->copy_to_host(&loss, stats.data(), sizeof(float));
    ++steps;
    if (!std::isfinite(loss)) break;
  }
  done = true;
  sender.join();
  std::printf("%ld steps, %ld signals\n", steps, sent.load());
  if (!std::isfinite(loss)) return fail("a non-finite loss at step " + std::to_string(steps));
  if (!dtrain::stop_requested() || dtrain::stop_signal() != SIGUSR1)
    return fail("the signals did not reach the signal thread (stop_requested() " +
                std::to_string(dtrain::stop_requested()) + ", stop_signal() " +
                std::to_string(dtrain::stop_signal()) + ")");
  return 0;
}
