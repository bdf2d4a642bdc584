// tests/benchmarks/input_bench.cpp — dtrain's input pipeline alone, for
// tests/benchmarks/input_bench.sh: a BatchReader over an encoded-image file (images_to_h5.py
// --store encoded) with the training transforms — HDF5 read, JPEG/PNG decode, RandomResizedCrop(S)
// + flip, normalization to float32 — on --data-threads N decode threads, as a training worker runs
// it. Prints one JSON line:
//   {"threads": N, "samples": n, "seconds": t, "samples_per_s": n / t, "per_thread": ...}
// timed from the end of the first batch (the pool and file are warm) to the last.
//
// With --uint8 the batches stay uint8 (HostBatch::raw), as a GPU worker's reader hands them out
// (the normalization runs on the device): the CPU's part of feeding a GPU.
//
// With --epochs E (E ≥ 1) it instead reads E whole epochs, one BatchReader each over the epoch's
// permutation, sharing one EncodedCache of --cache-mb MiB (0: none) as a training worker does, and
// prints one JSON line per epoch, timed from the reader's construction to its last batch (the
// first epoch includes loading the cache): "ms_per_batch" is the data wait of a training step
// whose compute took no time.
//
// Usage: dtrain_input_bench FILE [--threads N] [--crop S] [--batch B] [--samples N] [--eval]
//                               [--epochs E] [--cache-mb M] [--uint8]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "dtrain/core/error.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/io/encoded_cache.hpp"

using namespace dtrain;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// User + system CPU seconds of this process so far (every thread).
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/// One value of batch b picked by the running sample count n, for a checksum: from the uint8
/// batch (--uint8) or the float32 one.
double pick(const HostBatch& b, long n, bool uint8) {
  return uint8 ? b.raw[static_cast<std::size_t>(n % static_cast<long>(b.raw.size()))]
               : b.x[static_cast<std::size_t>(n % static_cast<long>(b.x.size()))];
}

/// --epochs: whole epochs through one cache, a line each.
void run_epochs(const DatasetInfo& info, int epochs, int batch, long cache_mb, bool uint8) {
  std::unique_ptr<EncodedCache> cache;
  if (cache_mb > 0)
    cache = std::make_unique<EncodedCache>(static_cast<std::size_t>(cache_mb) << 20);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    const std::int64_t hits0 = cache ? cache->hits() : 0;
    const auto t0 = std::chrono::steady_clock::now();
    BatchReader reader(info, epoch_shard(info.num_samples, 1, epoch, 0, 1, true), batch, 2, 0,
                       Augmentation{0, true, 1, epoch}, 0, cache.get(), uint8);
    HostBatch b;
    long n = 0, batches = 0;
    double checksum = 0;
    while (reader.next(b)) {
      n += b.n;
      ++batches;
      checksum += pick(b, n, uint8);
    }
    const double secs = seconds_since(t0);
    std::printf("{\"epoch\": %d, \"threads\": %d, \"cache_mb\": %ld, \"samples\": %ld, "
                "\"seconds\": %.4f, \"ms_per_batch\": %.3f, \"samples_per_s\": %.1f, "
                "\"cache_rows\": %lld, \"cache_hits\": %lld, \"checksum\": %.3f}\n",
                epoch + 1, info.decode.threads, cache_mb, n, secs, 1e3 * secs / batches, n / secs,
                static_cast<long long>(cache ? cache->rows() : 0),
                static_cast<long long>(cache ? cache->hits() - hits0 : 0), checksum);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dtrain_input_bench FILE [--threads N] [--crop S] [--batch B] "
                         "[--samples N] [--eval] [--epochs E] [--cache-mb M] [--uint8]\n");
    return 2;
  }
  int threads = 1, crop = 224, batch = 64, epochs = 0;
  long samples = 2048, cache_mb = 0;
  bool eval = false, uint8 = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atol(argv[++i]) : 0L; };
    if (a == "--threads") threads = static_cast<int>(next());
    else if (a == "--crop") crop = static_cast<int>(next());
    else if (a == "--batch") batch = static_cast<int>(next());
    else if (a == "--samples") samples = next();
    else if (a == "--eval") eval = true;
    else if (a == "--epochs") epochs = static_cast<int>(next());
    else if (a == "--cache-mb") cache_mb = next();
    else if (a == "--uint8") uint8 = true;
    else {
      std::fprintf(stderr, "dtrain_input_bench: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    DatasetInfo info = open_dataset_info(argv[1]);
    DT_REQUIRE(info.encoded, std::string(argv[1]) + ": not an encoded-image file");
    DecodeOptions d;
    d.crop = crop;
    d.random_resized = !eval;
    d.resize = static_cast<int>(crop / 0.875 + 0.5);
    d.threads = threads;
    configure_decode(info, d);
    if (epochs > 0) {
      run_epochs(info, epochs, batch, cache_mb, uint8);
      return 0;
    }
    std::vector<std::int64_t> indices;
    for (int epoch = 0; static_cast<long>(indices.size()) < samples + batch; ++epoch) {
      const auto shard = epoch_shard(info.num_samples, 1, epoch, 0, 1, true);
      indices.insert(indices.end(), shard.begin(), shard.end());
    }
    indices.resize(static_cast<std::size_t>(samples + batch));
    BatchReader reader(info, indices, batch, 2, 0, Augmentation{0, true, 1, 0}, 0, nullptr, uint8);
    HostBatch b;
    reader.next(b);  // warm-up batch
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = cpu_seconds();
    long n = 0;
    double checksum = 0;
    while (reader.next(b)) {
      n += b.n;
      checksum += pick(b, n, uint8);
    }
    const double secs = seconds_since(t0);
    const double cpu = cpu_seconds() - cpu0;
    std::printf("{\"threads\": %d, \"uint8\": %s, \"samples\": %ld, \"seconds\": %.4f, "
                "\"samples_per_s\": %.1f, "
                "\"per_thread\": %.1f, \"cpu_seconds\": %.4f, \"busy_threads\": %.2f, "
                "\"bad_images\": %lld, \"checksum\": %.3f}\n",
                threads, uint8 ? "true" : "false", n, secs, n / secs, n / secs / threads, cpu,
                cpu / secs, static_cast<long long>(reader.bad_images()), checksum);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain_input_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
