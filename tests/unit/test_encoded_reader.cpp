// tests/unit/test_encoded_reader.cpp — the BatchReader over encoded images with its decode pool
// (src/io/encoded.hpp, job_pool.hpp), which decodes up to three batches at a time — the one being
// filled and the next two, read ahead: the batches are the same bits whatever the number of decode
// threads and the batch size's fit to them, a bad image is left out (skip) or ends the reading at
// its own batch (fail) naming its sample, and skip() or an early end drops the batches read ahead
// without changing what comes next or hanging. Below them: the point-selection read of a batch's
// rows against the file's bytes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/dataset_files.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/io/hdf5.hpp"
#include "io/encoded.hpp"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

constexpr int kImages = 40, kBad = 13;

class EncodedReader : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dtrain_encoded_reader_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "encoded.h5").string();
    testing::write_encoded_dataset(path_, kImages, kBad);
    indices_ = epoch_shard(kImages, 7, 0, 0, 1, true);  // a permutation of the 40 rows
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// The file configured for RandomResizedCrop(12) on `threads` decode threads.
  [[nodiscard]] DatasetInfo info(int threads, bool fail_on_bad = false) const {
    DatasetInfo i = open_dataset_info(path_);
    DecodeOptions d;
    d.crop = 12;
    d.random_resized = true;
    d.threads = threads;
    d.fail_on_bad = fail_on_bad;
    configure_decode(i, d);
    return i;
  }

  /// Every batch from batch `skip` on (with BatchReader::skip()).
  [[nodiscard]] std::vector<HostBatch> read(int threads, int batch, std::int64_t skip = 0,
                                            std::int64_t* bad = nullptr) const {
    BatchReader r(info(threads), indices_, batch, 2, 0, Augmentation{0, true, 3, 1});
    if (skip > 0) r.skip(skip);
    std::vector<HostBatch> out;
    HostBatch b;
    while (r.next(b)) out.push_back(b);
    if (bad != nullptr) *bad = r.bad_images();
    return out;
  }

  fs::path dir_;
  std::string path_;
  std::vector<std::int64_t> indices_;
};

void expect_same(const std::vector<HostBatch>& want, const std::vector<HostBatch>& got,
                 const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (std::size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(want[k].n, got[k].n) << what << ", batch " << k;
    EXPECT_EQ(want[k].y, got[k].y) << what << ", batch " << k;
    EXPECT_EQ(want[k].x, got[k].x) << what << ", batch " << k;  // float ==: the same values
  }
}

TEST_F(EncodedReader, BatchesDoNotDependOnTheDecodeThreads) {
  for (const int batch : {6, 1, 40}) {
    std::int64_t bad_ref = 0;
    const std::vector<HostBatch> ref = read(1, batch, 0, &bad_ref);
    EXPECT_EQ(bad_ref, 1);
    int samples = 0;
    for (const HostBatch& b : ref) {
      samples += b.n;
      EXPECT_EQ(b.x.size(), static_cast<std::size_t>(b.n) * 12 * 12);
    }
    EXPECT_EQ(samples, kImages - 1);  // the bad image is left out
    for (const int threads : {2, 3, 8}) {
      std::int64_t bad = 0;
      expect_same(ref, read(threads, batch, 0, &bad),
                  std::to_string(threads) + " threads, batch " + std::to_string(batch));
      EXPECT_EQ(bad, 1);
    }
  }
}

TEST_F(EncodedReader, SkipAndAnEarlyEndDropTheBatchReadAhead) {
  const std::vector<HostBatch> ref = read(1, 6);
  // skip() restarts the reader thread at batch k after it read ahead batches 1 and 2 (or more):
  // onto a batch held (1, 2) or past them (3).
  for (const int k : {1, 2, 3}) {
    const std::vector<HostBatch> tail = read(3, 6, k);
    expect_same(std::vector<HostBatch>(ref.begin() + k, ref.end()), tail,
                "after skip(" + std::to_string(k) + ")");
  }
  // Readers given up after one batch, their next ones in the pool: each ends, nothing hangs.
  for (int k = 0; k < 5; ++k) {
    BatchReader r(info(4), indices_, 6, 2, 0, Augmentation{0, true, 3, 1});
    HostBatch b;
    ASSERT_TRUE(r.next(b));
    EXPECT_EQ(b.x, ref[0].x);
  }
}

TEST_F(EncodedReader, FailOnBadImageEndsAtItsBatchNamingTheSample) {
  const auto pos = std::find(indices_.begin(), indices_.end(), kBad) - indices_.begin();
  ASSERT_LT(pos, kImages);
  const auto at = static_cast<std::size_t>(pos / 6);  // the batch holding the bad row
  for (const int threads : {1, 3}) {
    BatchReader r(info(threads, true), indices_, 6, 2, 0, Augmentation{0, true, 3, 1});
    HostBatch b;
    std::size_t delivered = 0;
    try {
      while (r.next(b)) ++delivered;
      ADD_FAILURE() << "a bad image under --on-bad-image fail was not reported";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path_), std::string::npos) << msg;
      EXPECT_NE(msg.find("sample " + std::to_string(kBad)), std::string::npos) << msg;
    }
    EXPECT_EQ(delivered, at) << threads << " threads: every batch before the bad one came";
  }
}

TEST(EncodedRows, APointSelectionReadEqualsTheFilesRows) {
  // A vlen uint8 `images` dataset of rows with known bytes (two of several MiB), read out of order.
  const std::string path =
      (fs::temp_directory_path() / ("dtrain_encoded_rows_" + std::to_string(::getpid()) + ".h5"))
          .string();
  auto row = [](int r) {
    const std::size_t n = r == 2 ? (5u << 20) : r == 4 ? (9u << 19) : 1000u + 37u * r;
    std::vector<std::uint8_t> b(n);
    for (std::size_t j = 0; j < n; ++j) b[j] = static_cast<std::uint8_t>((r * 13 + j * 7) % 253);
    return b;
  };
  constexpr int kRows = 7;
  {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    H5File f = create_file(path);
    const hsize_t n = kRows;
    H5Dataspace space(H5Screate_simple(1, &n, nullptr));
    H5Datatype vtype(H5Tvlen_create(H5T_NATIVE_UINT8));
    H5Dataset d(H5Dcreate2(f.get(), "images", vtype.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                           H5P_DEFAULT));
    std::vector<std::vector<std::uint8_t>> rows;
    std::vector<hvl_t> buf;
    for (int r = 0; r < kRows; ++r) rows.push_back(row(r));
    for (auto& b : rows) buf.push_back(hvl_t{b.size(), b.data()});
    ASSERT_GE(H5Dwrite(d.get(), vtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), 0);
  }
  H5File f = open_file_read(path);
  H5Dataset images = open_dataset(f.get(), "images", path);
  const std::vector<std::int64_t> want = {4, 0, 6, 2, 3};
  std::vector<std::vector<std::uint8_t>> got(2);  // sized before: resized to the rows read
  read_encoded_rows(images.get(), want, got, path);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(got[i], row(static_cast<int>(want[i]))) << "row " << want[i];
  fs::remove(path);
}

}  // namespace
}  // namespace dtrain
