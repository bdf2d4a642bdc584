// tests/unit/test_encoded_cache.cpp — io/encoded_cache.hpp: the prefix of a file's encoded rows
// that fits the byte budget, loaded once, the rows' bytes equal to the file's, hits and misses.
// The cache in training (bit-identical results with and without it): test_encoded_images.sh.
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>

#include "dtrain/io/encoded_cache.hpp"

namespace dtrain {
namespace {

/// A "file" of rows whose sizes and bytes are known: row r has 100 + (r * 37) % 50 bytes, byte j
/// of it (r * 7 + j) % 251.
std::vector<std::uint8_t> row_bytes(std::int64_t r) {
  std::vector<std::uint8_t> b(static_cast<std::size_t>(100 + (r * 37) % 50));
  for (std::size_t j = 0; j < b.size(); ++j) b[j] = static_cast<std::uint8_t>((r * 7 + j) % 251);
  return b;
}

struct FakeFile {
  std::int64_t calls = 0, rows_read = 0;
  EncodedCache::ReadRows reader() {
    return [this](std::int64_t first, std::int64_t count,
                  std::vector<std::vector<std::uint8_t>>& out) {
      ++calls;
      rows_read += count;
      out.resize(static_cast<std::size_t>(count));
      for (std::int64_t i = 0; i < count; ++i)
        out[static_cast<std::size_t>(i)] = row_bytes(first + i);
    };
  }
};

TEST(EncodedCache, HoldsTheLongestPrefixThatFitsTheBudget) {
  for (const std::size_t capacity : {0ul, 99ul, 100ul, 1000ul, 5000ul, 12345ul, 1ul << 20}) {
    SCOPED_TRACE(capacity);
    FakeFile file;
    EncodedCache cache(capacity);
    cache.load(500, file.reader(), 16);
    // Closed form: the prefix sums of the row sizes.
    std::size_t sum = 0;
    std::int64_t k = 0;
    while (k < 500 && sum + row_bytes(k).size() <= capacity) sum += row_bytes(k++).size();
    EXPECT_EQ(cache.rows(), k);
    EXPECT_EQ(cache.bytes(), sum);
    EXPECT_LE(cache.bytes(), capacity);  // never more than the budget, counted in bytes
    EXPECT_EQ(cache.capacity(), capacity);
    // Reads stop at the block holding the first row that does not fit (or the end).
    EXPECT_EQ(file.rows_read, capacity == 0 ? 0 : std::min<std::int64_t>(500, (k / 16 + 1) * 16));
  }
}

TEST(EncodedCache, RowsEqualTheFilesAndCountHitsAndMisses) {
  FakeFile file;
  EncodedCache cache(5000);
  cache.load(300, file.reader(), 7);
  ASSERT_GT(cache.rows(), 20);
  ASSERT_LT(cache.rows(), 300);
  for (std::int64_t r = 0; r < cache.rows(); ++r) {
    const std::vector<std::uint8_t>* b = cache.find(r);
    ASSERT_NE(b, nullptr) << r;
    EXPECT_EQ(*b, row_bytes(r)) << r;
    EXPECT_EQ(b->capacity(), b->size());  // exactly sized
  }
  EXPECT_EQ(cache.find(cache.rows()), nullptr);
  EXPECT_EQ(cache.find(299), nullptr);
  EXPECT_EQ(cache.find(-1), nullptr);
  EXPECT_EQ(cache.hits(), cache.rows());
  EXPECT_EQ(cache.misses(), 3);
}

TEST(EncodedCache, LoadsOnceAndAWholeSmallFile) {
  FakeFile file;
  EncodedCache cache(1 << 20);
  cache.load(40, file.reader());
  EXPECT_EQ(cache.rows(), 40);  // the whole file fits: every row held, one read of 40 rows
  EXPECT_EQ(file.calls, 1);
  cache.load(40, file.reader());
  std::thread other([&] { cache.load(40, file.reader()); });
  other.join();
  EXPECT_EQ(file.calls, 1);
}

TEST(EncodedCache, AFailedReadKeepsTheRowsSoFarAndRetries) {
  FakeFile file;
  EncodedCache cache(1 << 20);
  int calls = 0;
  const auto flaky = [&](std::int64_t first, std::int64_t count,
                         std::vector<std::vector<std::uint8_t>>& out) {
    if (++calls == 2) throw std::runtime_error("read failed");
    file.reader()(first, count, out);
  };
  EXPECT_THROW(cache.load(50, flaky, 10), std::runtime_error);
  EXPECT_EQ(cache.rows(), 10);
  cache.load(50, flaky, 10);
  EXPECT_EQ(cache.rows(), 50);
  for (std::int64_t r = 0; r < 50; ++r) EXPECT_EQ(*cache.find(r), row_bytes(r));
}

}  // namespace
}  // namespace dtrain
