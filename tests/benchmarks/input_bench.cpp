// tests/benchmarks/input_bench.cpp — dtrain's input pipeline alone, for
// tests/benchmarks/input_bench.sh: a BatchReader over an encoded-image file (images_to_h5.py
// --store encoded) with the training transforms — HDF5 read, JPEG/PNG decode, RandomResizedCrop(S)
// + flip, normalization to float32 — on --data-threads N decode threads, as a training worker runs
// it. Prints one JSON line:
//   {"threads": N, "samples": n, "seconds": t, "samples_per_s": n / t, "per_thread": ...}
// timed from the end of the first batch (the pool and file are warm) to the last.
//
// Usage: dtrain_input_bench FILE [--threads N] [--crop S] [--batch B] [--samples N] [--eval]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dtrain/core/error.hpp"
#include "dtrain/io/dataset.hpp"

using namespace dtrain;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dtrain_input_bench FILE [--threads N] [--crop S] [--batch B] "
                         "[--samples N] [--eval]\n");
    return 2;
  }
  int threads = 1, crop = 224, batch = 64;
  long samples = 2048;
  bool eval = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atol(argv[++i]) : 0L; };
    if (a == "--threads") threads = static_cast<int>(next());
    else if (a == "--crop") crop = static_cast<int>(next());
    else if (a == "--batch") batch = static_cast<int>(next());
    else if (a == "--samples") samples = next();
    else if (a == "--eval") eval = true;
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
    std::vector<std::int64_t> indices;
    for (int epoch = 0; static_cast<long>(indices.size()) < samples + batch; ++epoch) {
      const auto shard = epoch_shard(info.num_samples, 1, epoch, 0, 1, true);
      indices.insert(indices.end(), shard.begin(), shard.end());
    }
    indices.resize(static_cast<std::size_t>(samples + batch));
    BatchReader reader(info, indices, batch, 2, 0, Augmentation{0, true, 1, 0}, 0);
    HostBatch b;
    reader.next(b);  // warm-up batch
    const auto t0 = std::chrono::steady_clock::now();
    long n = 0;
    double checksum = 0;
    while (reader.next(b)) {
      n += b.n;
      checksum += b.x[static_cast<std::size_t>(n % static_cast<long>(b.x.size()))];
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("{\"threads\": %d, \"samples\": %ld, \"seconds\": %.4f, \"samples_per_s\": %.1f, "
                "\"per_thread\": %.1f, \"bad_images\": %lld, \"checksum\": %.3f}\n",
                threads, n, secs, n / secs, n / secs / threads,
                static_cast<long long>(reader.bad_images()), checksum);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain_input_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
