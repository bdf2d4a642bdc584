// dtrain/io/encoded_cache.cpp — EncodedCache of io/encoded_cache.hpp: the prefix of a file's
// encoded rows that fits a byte budget, loaded once.
#include "dtrain/io/encoded_cache.hpp"

#include <algorithm>

namespace dtrain {

EncodedCache::EncodedCache(std::size_t capacity_bytes) : capacity_(capacity_bytes) {}

void EncodedCache::load(std::int64_t num_rows, const ReadRows& read, std::int64_t block) {
  std::lock_guard<std::mutex> lock(mu_);
  if (loaded_) return;
  std::vector<std::vector<std::uint8_t>> got;
  bool full = capacity_ == 0;
  while (!full && rows() < num_rows) {
    const std::int64_t first = rows();
    const std::int64_t count = std::min(std::max<std::int64_t>(block, 1), num_rows - first);
    read(first, count, got);
    for (std::int64_t i = 0; i < count && !full; ++i) {
      auto& row = got[static_cast<std::size_t>(i)];
      if (row.size() > capacity_ - bytes_) {
        full = true;
        break;
      }
      bytes_ += row.size();
      rows_.emplace_back(row.begin(), row.end());  // exactly sized
    }
  }
  loaded_ = true;
}

const std::vector<std::uint8_t>* EncodedCache::find(std::int64_t row) {
  if (row >= 0 && row < rows()) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    return &rows_[static_cast<std::size_t>(row)];
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

}  // namespace dtrain
