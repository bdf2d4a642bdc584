// src/dnn/cuda/device_memory.cpp — the count of device memory dtrain allocates (cuda_raii.hpp):
// live bytes per pointer and their peak, for results.json's gpu_peak_allocated_mb (the figure
// PyTorch reports as torch.cuda.max_memory_allocated).
#include <mutex>
#include <unordered_map>

#include "cuda_raii.hpp"

namespace dtrain::cuda {
namespace {

struct Registry {
  std::mutex mu;
  std::unordered_map<const void*, std::size_t> live;
  std::size_t bytes = 0, peak = 0;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void note_device_alloc(const void* p, std::size_t bytes) noexcept {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mu);
  try {
    r.live[p] = bytes;
  } catch (...) {  // out of host memory: the count is only a report
    return;
  }
  r.bytes += bytes;
  if (r.bytes > r.peak) r.peak = r.bytes;
}

void note_device_free(const void* p) noexcept {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.live.find(p);
  if (it == r.live.end()) return;
  r.bytes -= it->second;
  r.live.erase(it);
}

std::size_t device_peak_bytes() noexcept {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mu);
  return r.peak;
}

}  // namespace dtrain::cuda
