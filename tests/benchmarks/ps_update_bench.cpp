// tests/benchmarks/ps_update_bench.cpp — what one push costs a ps: the update it applies to its
// shard, per optimizer rule, against one memcpy of the gradient in the same process (the least a
// ps does with a push: receive it once).
//
// For each shard size the ps's update runs as the async ps runs it (ps/async_applier.cpp): over
// the shard in --ps-chunk-kb chunks (default 1 MiB), with the rule's state (momentum, Adam's m and
// v, DANA's per-worker momenta and look-ahead, 4 workers); the median of the timed rounds after
// warm-up. Prints µs per push, ns per parameter and the ratio update / memcpy.
//
// --cross-core adds what the same work costs right after another core has read the array it
// writes, as a worker's copy of a reply reads the ps's parameters (on shared memory the receiver
// copies): before each timed round a thread pinned to a second CPU copies the parameters (for
// memcpy: its destination, as the worker's copy of a bare MPI reply reads the ps's receive
// buffer) out. Its columns: µs per push then, and that time over the local one — the price of
// writing cache lines another core holds (each store waits for their invalidation). That price
// depends on where the two CPUs sit (one core complex, two, two sockets; on a VM, where the host
// puts its vCPUs at the moment) and is what comm_bench's push-pull pays per byte of update; a
// copy's full-line stores pay it less.
//   dtrain_ps_update_bench [--min-floats N] [--max-floats N] [--rounds R] [--threads T]
//                          [--rules sgd,momentum,adam,dana] [--cross-core]
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/core/config.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/optim/dana.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/protocol.hpp"

namespace {
using namespace dtrain;

/// The median time of fn() over `rounds` rounds after two warm-up rounds; prepare() (untimed)
/// runs before each.
double seconds_of(const std::function<void()>& fn, int rounds,
                  const std::function<void()>& prepare = {}) {
  std::vector<double> t;
  for (int i = 0; i < rounds + 2; ++i) {
    if (prepare) prepare();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 2) t.push_back(dt);  // two warm-up rounds
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// The CPUs this process may run on.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  DT_REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0,
             "ps_update_bench: cannot pin a thread to CPU " + std::to_string(cpu));
}

/// A thread pinned to another CPU that copies an array out on request (read(): returns once the
/// copy is done), as a worker's receive of a reply does on shared memory.
class RemoteReader {
 public:
  explicit RemoteReader(int cpu) : thread_([this, cpu] { loop(cpu); }) {}
  RemoteReader(const RemoteReader&) = delete;
  RemoteReader& operator=(const RemoteReader&) = delete;
  ~RemoteReader() {
    job_.store(-1);
    thread_.join();
  }
  void read(const float* p, std::size_t n) {
    src_ = p;
    n_ = n;
    job_.store(1);
    while (job_.load() != 0) std::this_thread::yield();
  }

 private:
  void loop(int cpu) {
    pin_to(cpu);
    for (;;) {
      const int job = job_.load();
      if (job < 0) return;
      if (job == 0) {
        std::this_thread::yield();
        continue;
      }
      if (buf_.size() < n_) buf_.resize(n_);
      std::memcpy(buf_.data(), src_, n_ * sizeof(float));
      job_.store(0);
    }
  }
  std::atomic<int> job_{0};
  const float* src_ = nullptr;
  std::size_t n_ = 0;
  std::vector<float> buf_;
  std::thread thread_;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

/// The command line (see --help).
struct Options {
  std::size_t min_floats = 1 << 14, max_floats = 1 << 26;
  int rounds = 0, threads = 1;
  bool cross_core = false;
  std::vector<std::string> rules{"sgd", "momentum", "adam", "dana"};
};

/// Reads the command line into `o`. Returns the exit code when the program is to end here
/// (--help: 0; a bad option: 2, after a message), else -1.
int parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::puts(
          "usage: dtrain_ps_update_bench [--min-floats N (16384)] [--max-floats N (67108864)]\n"
          "         [--rounds R (0: by size)] [--threads T (1)]\n"
          "         [--rules sgd,momentum,adam,dana] [--cross-core]");
      return 0;
    }
    if (k == "--cross-core") {
      o.cross_core = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "ps_update_bench: %s needs a value\n", k.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (k == "--min-floats") o.min_floats = std::stoull(v);
    else if (k == "--max-floats") o.max_floats = std::stoull(v);
    else if (k == "--rounds") o.rounds = std::stoi(v);
    else if (k == "--threads") o.threads = std::stoi(v);
    else if (k == "--rules") o.rules = split(v);
    else {
      std::fprintf(stderr, "ps_update_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  for (const std::string& r : o.rules) {
    if (r != "sgd" && r != "momentum" && r != "adam" && r != "dana") {
      std::fprintf(stderr,
                   "ps_update_bench: --rules: unknown rule '%s' (sgd, momentum, adam, dana)\n",
                   r.c_str());
      return 2;
    }
  }
  return -1;
}

/// The rows of one shard size n: memcpy, then each rule's update in 1 MiB chunks (and, with
/// `remote`, the same right after another core read the array written).
void bench_size(std::size_t n, const Options& o, Backend& backend, RemoteReader* remote) {
  const int r = o.rounds > 0 ? o.rounds : n <= (1u << 18) ? 200 : n <= (1u << 22) ? 30 : 8;
  std::vector<float> params(n, 0.5f), grads(n, 1e-3f), copy(n);
  const ChunkLayout chunks(n, kDefaultChunkBytes);
  // Prints one row; `written` is the array the work stores to (what the reader reads first).
  auto row = [&](const std::string& name, const std::function<void()>& fn, const float* written,
                 double base) {
    const double t = seconds_of(fn, r);
    std::printf("  %10s %10zu %12.1f %10.3f %10.2f", name.c_str(), n, t * 1e6, t * 1e9 / n,
                base > 0 ? t / base : 1.0);
    if (remote) {
      const double tr = seconds_of(fn, r, [&] { remote->read(written, n); });
      std::printf(" %14.1f %10.2f", tr * 1e6, tr / t);
    }
    std::printf("\n");
    return t;
  };
  const double base = row(
      "memcpy", [&] { std::memcpy(copy.data(), grads.data(), n * sizeof(float)); }, copy.data(), 0);
  for (const std::string& rule : o.rules) {
    Config c;
    c.optimizer = parse_enum<OptimizerKind>(rule == "dana" ? "momentum" : rule, "optimizer");
    c.momentum = 0.9f;
    c.weight_decay = 1e-4f;
    c.lr = 1e-6f;
    Optimizer opt(c, backend, n, 1 << 30);
    std::optional<DanaMomentum> dana;
    if (rule == "dana") dana.emplace(c, backend, n, 4, 1 << 30);
    std::int64_t step = 0;
    // DANA's reply carries its look-ahead, the array a worker reads; every other rule's, θ.
    const float* sent = dana ? dana->look_ahead() : params.data();
    row(
        rule,
        [&] {
          for (std::size_t i = 0; i < chunks.count(); ++i) {
            const std::size_t b = chunks.begin(i), e = b + chunks.size(i);
            if (dana)
              dana->apply(static_cast<int>(step % 4), params.data(), grads.data() + b, step, b, e);
            else opt.apply(params.data(), grads.data() + b, step, b, e);
          }
          ++step;
        },
        sent, base);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const int code = parse_options(argc, argv, o); code >= 0) return code;
  std::optional<RemoteReader> remote;
  if (o.cross_core) {
    const std::vector<int> cpus = allowed_cpus();
    if (cpus.size() < 2) {
      std::printf(
          "# ps_update_bench: --cross-core skipped: this process may run on one CPU only\n");
      o.cross_core = false;
    } else {
      pin_to(cpus[0]);
      remote.emplace(cpus[1]);
      std::printf("# cross-core: the update runs on CPU %d, the reader on CPU %d\n", cpus[0],
                  cpus[1]);
    }
  }
  omp_set_num_threads(o.threads);
  auto backend = make_cpu_backend();
  {  // ~0.1 s of copies first, so that the first size is not timed while the core's clock rises
    std::vector<float> a(1 << 22, 1.0f), b(1 << 22);
    for (int i = 0; i < 40; ++i) std::memcpy(b.data(), a.data(), a.size() * sizeof(float));
  }
  std::printf("# ps_update_bench: one push's update over a shard in 1 MiB chunks, %d thread(s)\n"
              "# %10s %10s %12s %10s %10s",
              o.threads, "rule", "floats", "us/push", "ns/float", "x memcpy");
  if (o.cross_core) std::printf(" %14s %10s", "us after read", "x local");
  std::printf("\n");
  for (std::size_t n = o.min_floats; n <= o.max_floats; n *= 4)
    bench_size(n, o, *backend, remote ? &*remote : nullptr);
  return 0;
}
