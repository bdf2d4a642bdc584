// dtrain/io/encoded_cache.hpp — the encoded (compressed JPEG/PNG) bytes of a training file held
// in memory, up to a byte budget (--cache-mb), so that the rows it holds are never read from HDF5
// again: the way FFCV and DALI users keep JPEG bytes in RAM and decode every epoch.
//
// Policy: a prefix of the file, loaded once, no eviction. The first reader that uses the cache
// reads rows 0, 1, 2, ... in blocks and keeps each row while the bytes held stay within the
// budget; the first row that does not fit ends the loading (so the cache holds rows [0, rows())).
// Every epoch draws a fresh uniform permutation of the whole file and cuts it over the workers, so
// a worker reads every row with the same probability: any fixed set of rows of a given size hits
// as often as any other, and a replacement policy (LRU) would only add eviction churn for the same
// hit rate. Loading up front, rather than on first use, makes the rows held the same for every
// worker count and lets the first epoch hit too.
//
// Memory: bytes() counts the encoded bytes held and never exceeds capacity(); bookkeeping adds
// about 40 bytes per row (one exactly sized buffer each).
//
// Thread-safety: load() may be called from any thread, concurrently; it returns once the cache is
// loaded. find() and the counters are safe from any thread that has called load().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace dtrain {

class EncodedCache {
 public:
  /// Reads rows [first, first + count) of the file into out (out[i] = row first + i's bytes).
  using ReadRows = std::function<void(std::int64_t first, std::int64_t count,
                                      std::vector<std::vector<std::uint8_t>>& out)>;

  /// A cache of at most `capacity_bytes` encoded bytes (0: holds nothing).
  explicit EncodedCache(std::size_t capacity_bytes);

  /// The first call loads the prefix of a file of `num_rows` rows through `read`, `block` rows a
  /// call, as described above; later calls return at once. An exception thrown by `read` leaves
  /// the rows loaded so far and propagates; the next call retries from there.
  void load(std::int64_t num_rows, const ReadRows& read, std::int64_t block = 256);

  /// The bytes of `row` when held (counted as a hit), else nullptr (a miss).
  const std::vector<std::uint8_t>* find(std::int64_t row);

  [[nodiscard]] std::size_t capacity() const { return capacity_; }  ///< the budget, bytes
  [[nodiscard]] std::size_t bytes() const { return bytes_; }        ///< encoded bytes held
  /// Rows held: [0, rows()).
  [[nodiscard]] std::int64_t rows() const { return static_cast<std::int64_t>(rows_.size()); }
  [[nodiscard]] std::int64_t hits() const { return hits_.load(); }
  [[nodiscard]] std::int64_t misses() const { return misses_.load(); }

 private:
  std::size_t capacity_;
  std::size_t bytes_ = 0;
  std::vector<std::vector<std::uint8_t>> rows_;
  bool loaded_ = false;
  std::mutex mu_;
  std::atomic<std::int64_t> hits_{0}, misses_{0};
};

}  // namespace dtrain
