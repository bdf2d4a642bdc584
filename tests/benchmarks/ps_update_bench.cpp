// tests/benchmarks/ps_update_bench.cpp — what one push costs a ps: the update it applies to its
// shard, per optimizer rule, against one memcpy of the gradient in the same process (the least a
// ps does with a push: receive it once).
//
// For each shard size the ps's update runs as the async ps runs it (ps/server.cpp): over the
// shard in --ps-chunk-kb chunks (default 1 MiB), with the rule's state (momentum, Adam's m and v,
// DANA's per-worker momenta and look-ahead, 4 workers); the median of the timed rounds after
// warm-up. Prints µs per push, ns per parameter and the ratio update / memcpy.
//   dtrain_ps_update_bench [--min-floats N] [--max-floats N] [--rounds R] [--threads T]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/core/config.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/optim/dana.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/protocol.hpp"

namespace {
using namespace dtrain;

double seconds_of(const std::function<void()>& fn, int rounds) {
  std::vector<double> t;
  for (int i = 0; i < rounds + 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 2) t.push_back(dt);  // two warm-up rounds
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t min_floats = 1 << 14, max_floats = 1 << 26;
  int rounds = 0, threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--min-floats") min_floats = std::stoull(v);
    else if (k == "--max-floats") max_floats = std::stoull(v);
    else if (k == "--rounds") rounds = std::stoi(v);
    else if (k == "--threads") threads = std::stoi(v);
    else {
      std::fprintf(stderr, "ps_update_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  omp_set_num_threads(threads);
  auto backend = make_cpu_backend();
  {  // ~0.1 s of copies first, so that the first size is not timed while the core's clock rises
    std::vector<float> a(1 << 22, 1.0f), b(1 << 22);
    for (int i = 0; i < 40; ++i) std::memcpy(b.data(), a.data(), a.size() * sizeof(float));
  }
  std::printf("# ps_update_bench: one push's update over a shard in 1 MiB chunks, %d thread(s)\n"
              "# %10s %10s %12s %10s %10s\n", threads, "rule", "floats", "us/push", "ns/float",
              "x memcpy");
  for (std::size_t n = min_floats; n <= max_floats; n *= 4) {
    const int r = rounds > 0 ? rounds : n <= (1u << 18) ? 200 : n <= (1u << 22) ? 30 : 8;
    std::vector<float> params(n, 0.5f), grads(n, 1e-3f), copy(n);
    const ChunkLayout chunks(n, kDefaultChunkBytes);
    const double base = seconds_of(
        [&] { std::memcpy(copy.data(), grads.data(), n * sizeof(float)); }, r);
    std::printf("  %10s %10zu %12.1f %10.3f %10.2f\n", "memcpy", n, base * 1e6, base * 1e9 / n,
                1.0);
    for (const std::string rule : {"sgd", "momentum", "adam", "dana"}) {
      Config c;
      c.optimizer = rule == "dana" ? "momentum" : rule;
      c.momentum = 0.9f;
      c.weight_decay = 1e-4f;
      c.lr = 1e-6f;
      Optimizer opt(c, *backend, n, 1 << 30);
      std::optional<DanaMomentum> dana;
      if (rule == "dana") dana.emplace(c, *backend, n, 4, 1 << 30);
      std::int64_t step = 0;
      const double t = seconds_of(
          [&] {
            for (std::size_t i = 0; i < chunks.count(); ++i) {
              const std::size_t b = chunks.begin(i), e = b + chunks.size(i);
              if (dana) dana->apply(static_cast<int>(step % 4), params.data(),
                                             grads.data() + b, step, b, e);
              else opt.apply(params.data(), grads.data() + b, step, b, e);
            }
            ++step;
          },
          r);
      std::printf("  %10s %10zu %12.1f %10.3f %10.2f\n", rule.c_str(), n, t * 1e6, t * 1e9 / n,
                  t / base);
    }
    std::fflush(stdout);
  }
  return 0;
}
