// tests/benchmarks/checkpoint_bench.cpp — what writing and reading one checkpoint costs for a job's
// model: write_checkpoint() (temporary file, Fletcher32, fsync, rename) and read_checkpoint()
// (checksums verified) of a state the size a training run saves — parameters, momentum m, one
// row of batchnorm statistics — the median of --rounds after one warm-up round each.
//   dtrain_checkpoint_bench --config jobs/resnet50_imagenet.ini [--rounds 5] [--dir
//   /tmp/ckpt-bench]
// Built with -DDTRAIN_BENCH_FLAT it leaves the tensor names out (the state as format 1 knew it), so
// that the same source measures dtrain before named tensors (compiled against that library).
// Prints one line: job, parameters, file MiB, write ms, read ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtrain/io/checkpoint.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/model/model.hpp"
#ifndef DTRAIN_BENCH_FLAT
#include "dtrain/train/checkpointer.hpp"
#endif

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

int main(int argc, char** argv) {
  using namespace dtrain;
  std::string job, dir = "/tmp/dtrain-checkpoint-bench";
  int rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--config") job = argv[i + 1];
    else if (k == "--rounds") rounds = std::stoi(argv[i + 1]);
    else if (k == "--dir") dir = argv[i + 1];
  }
  if (job.empty() || rounds < 1) {
    std::fprintf(stderr,
                 "usage: dtrain_checkpoint_bench --config JOB.ini [--rounds R] [--dir D]\n");
    return 2;
  }
  try {
    // The job's `layer =` lines and `synthetic =` input (the model's input shape and classes).
    std::ifstream in(job);
    if (!in) throw std::runtime_error("cannot read " + job);
    std::vector<std::string> layers;
    std::string synthetic, config;
    for (std::string line; std::getline(in, line);) {
      config += line + "\n";
      if (line.rfind("layer = ", 0) == 0) layers.push_back(line.substr(8));
      if (line.rfind("synthetic = ", 0) == 0) synthetic = line.substr(12);
    }
    const DatasetInfo data = parse_synthetic(synthetic);
    const Model layout(layers, data.sample, data.num_classes, 1);
    CheckpointState s;
    s.mode = "sync";
    s.model_signature = layout.signature();
    s.config = config;
    s.params.resize(layout.param_count());
    s.m.resize(layout.param_count());
    for (std::size_t i = 0; i < s.params.size(); ++i) {
      s.params[i] = static_cast<float>(i % 977) * 1e-3f;
      s.m[i] = static_cast<float>(i % 331) * 1e-4f;
    }
    s.model_state.assign(std::max<std::size_t>(layout.state_count(), 1), 0.5f);
#ifndef DTRAIN_BENCH_FLAT
    name_tensors(s, layout);
#endif
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::vector<double> w, r;
    for (int k = 0; k <= rounds; ++k) {
      s.global_step = k;
      const double t0 = now();
      write_checkpoint(dir, s, 1);
      const double t1 = now();
      const CheckpointState back = read_checkpoint(checkpoint_path(dir, k));
      const double t2 = now();
      if (back.params != s.params) throw std::runtime_error("read back other parameters");
      if (k > 0) {
        w.push_back(t1 - t0);
        r.push_back(t2 - t1);
      }
    }
    const double mib =
        static_cast<double>(std::filesystem::file_size(checkpoint_path(dir, rounds))) / (1 << 20);
    std::printf("%s params %zu file %.1f MiB write %.1f ms read %.1f ms (median of %d)\n",
                job.c_str(), s.params.size(), mib, median(w) * 1e3, median(r) * 1e3, rounds);
    std::filesystem::remove_all(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain_checkpoint_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
