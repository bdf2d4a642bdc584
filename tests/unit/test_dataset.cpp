// tests/unit/test_dataset.cpp — io/hdf5.hpp helpers and io/dataset.hpp: schema validation of good
// and broken files, epoch sharding, and the prefetching BatchReader (exact rows, order, partial
// batches, normalization, resume, errors from the reader thread).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <set>
#include <thread>

#include "common/dataset_files.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/io/hdf5.hpp"

namespace dtrain {
namespace {

/// Replaces rank-1 dataset `name` of the HDF5 file at `path` by n values of `type` (written from
/// `data` as `mem_type` when given, else left unwritten). Fails the test on an HDF5 error.
void replace_dataset(const std::string& path, const char* name, hid_t type, hsize_t n,
                     hid_t mem_type = H5I_INVALID_HID, const void* data = nullptr) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0) << path;
  ASSERT_GE(H5Ldelete(f, name, H5P_DEFAULT), 0) << name;
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t ds = H5Dcreate2(f, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(ds, 0) << name;
  if (data != nullptr) {
    ASSERT_GE(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0) << name;
  }
  H5Dclose(ds), H5Sclose(space), H5Fclose(f);
}

namespace fs = std::filesystem;
using testing::RawDataset;
using testing::SyntheticSpec;

/// A fresh scratch directory per test, removed afterwards.
class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("dtrain_" + std::string(info->test_suite_name()) + "_" +
                                        info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

/// A float32 (or uint8) file whose pixel j of sample i is i*16 + j%16 (mod 256 for uint8) and whose
/// label is i % classes: every row read back can be traced to its sample.
RawDataset indexed(std::int64_t n, int c, int h, int w, const std::string& dtype, int classes = 5) {
  RawDataset d;
  d.image_dims = {static_cast<hsize_t>(n), static_cast<hsize_t>(c), static_cast<hsize_t>(h),
                  static_cast<hsize_t>(w)};
  d.image_dtype = dtype;
  const std::size_t sample = static_cast<std::size_t>(c) * h * w;
  d.pixels.resize(static_cast<std::size_t>(n) * sample);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < sample; ++j) {
      const auto v = static_cast<float>(i * 16 + static_cast<std::int64_t>(j % 16));
      d.pixels[static_cast<std::size_t>(i) * sample + j] =
          dtype == "uint8" ? std::fmod(v, 256.0f) : v;
    }
  for (std::int64_t i = 0; i < n; ++i) d.labels.push_back(i % classes);
  d.num_classes = classes;
  return d;
}

/// Reads every batch of a reader into (x rows, labels).
std::vector<HostBatch> read_all(BatchReader& r) {
  std::vector<HostBatch> out;
  HostBatch b;
  while (r.next(b)) out.push_back(b);
  return out;
}

/// Expects that calling f throws InputError whose what() contains every needle.
template <typename F>
void expect_input_error(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no InputError; expected one mentioning " << needles.front();
  } catch (const InputError& e) {
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message lacks '" << n << "': " << e.what();
  }
}

// ---- epoch_shard
// -----------------------------------------------------------------------------------

TEST(DatasetShard, CoversEverySampleExactlyOncePerEpoch) {
  for (std::int64_t n : {std::int64_t{1001}, std::int64_t{7}, std::int64_t{64}}) {
    for (int workers : {1, 2, 3, 4, 7}) {
      for (int epoch : {0, 1, 5}) {
        std::vector<std::int64_t> all;
        std::int64_t smallest = n, largest = 0;
        for (int w = 0; w < workers; ++w) {
          const auto shard = epoch_shard(n, 42, epoch, w, workers);
          ASSERT_EQ(static_cast<std::int64_t>(shard.size()), shard_size(n, w, workers));
          smallest = std::min<std::int64_t>(smallest, shard.size());
          largest = std::max<std::int64_t>(largest, shard.size());
          all.insert(all.end(), shard.begin(), shard.end());
        }
        EXPECT_LE(largest - smallest, 1) << "n=" << n << " workers=" << workers;
        // Blocks of one permutation: concatenated they are the single-worker permutation.
        EXPECT_EQ(all, epoch_shard(n, 42, epoch, 0, 1));
        std::sort(all.begin(), all.end());
        std::vector<std::int64_t> expect(static_cast<std::size_t>(n));
        std::iota(expect.begin(), expect.end(), 0);
        EXPECT_EQ(all, expect) << "n=" << n << " workers=" << workers << " epoch=" << epoch;
      }
    }
  }
}

TEST(DatasetShard, DeterministicAndDifferentPerEpochAndSeed) {
  const auto a = epoch_shard(1001, 7, 3, 1, 3);
  EXPECT_EQ(a, epoch_shard(1001, 7, 3, 1, 3));
  EXPECT_NE(a, epoch_shard(1001, 7, 4, 1, 3));
  EXPECT_NE(a, epoch_shard(1001, 8, 3, 1, 3));
  // Really shuffled: not the sorted block, and samples cross block boundaries.
  std::vector<std::int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(a, sorted);
  EXPECT_GT(sorted.back() - sorted.front(), 500);
  // Pinned values: a resumed run must see the same order on any platform and build.
  EXPECT_EQ(epoch_shard(10, 42, 0, 0, 1),
            (std::vector<std::int64_t>{0, 8, 1, 6, 3, 2, 9, 7, 4, 5}));
}

TEST(DatasetShard, UnshuffledIsContiguousBlocks) {
  EXPECT_EQ(epoch_shard(10, 1, 0, 0, 3, false), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(epoch_shard(10, 1, 0, 1, 3, false), (std::vector<std::int64_t>{4, 5, 6}));
  EXPECT_EQ(epoch_shard(10, 1, 0, 2, 3, false), (std::vector<std::int64_t>{7, 8, 9}));
  EXPECT_EQ(shard_size(2, 2, 3), 0);
  EXPECT_TRUE(epoch_shard(2, 1, 0, 2, 3).empty());
}

TEST(DatasetShard, RejectsBadArguments) {
  EXPECT_THROW(epoch_shard(10, 1, 0, 3, 3), InputError);
  EXPECT_THROW(epoch_shard(10, 1, 0, -1, 3), InputError);
  EXPECT_THROW(epoch_shard(10, 1, 0, 0, 0), InputError);
  EXPECT_THROW(epoch_shard(10, 1, -1, 0, 1), InputError);
  EXPECT_THROW(shard_size(-1, 0, 1), InputError);
}

// ---- open_dataset_info
// -----------------------------------------------------------------------------

TEST_F(DatasetTest, InfoOfSyntheticFile) {
  SyntheticSpec s;
  s.n = 100, s.c = 3, s.h = 5, s.w = 4, s.classes = 6;
  testing::write_synthetic_dataset(file("a.h5"), s);
  const DatasetInfo info = open_dataset_info(file("a.h5"));
  EXPECT_EQ(info.path, file("a.h5"));
  EXPECT_EQ(info.num_samples, 100);
  EXPECT_EQ(info.sample, (Shape{1, 3, 5, 4}));
  EXPECT_EQ(info.num_classes, 6);
  EXPECT_TRUE(info.is_uint8);
  ASSERT_EQ(info.mean.size(), 3u);
  ASSERT_EQ(info.stddev.size(), 3u);
  for (int c = 0; c < 3; ++c) {
    EXPECT_GT(info.mean[c], 0.2f);
    EXPECT_LT(info.mean[c], 0.8f);
    EXPECT_GT(info.stddev[c], 0.05f);
  }
  EXPECT_EQ(info.class_names.size(), 6u);
  EXPECT_EQ(info.class_names[5], "class5");
  EXPECT_NO_THROW(open_dataset_info(file("a.h5"), 6));
}

TEST_F(DatasetTest, NumClassesFromLabelsAndBroadcastMeanStd) {
  RawDataset d = indexed(10, 2, 2, 2, "float32", 3);
  d.num_classes = 0;  // → max(label) + 1 = 3
  d.mean = {0.5f};
  d.stddev = {2.0f};
  d.label_dtype = "uint8";
  testing::write_raw_dataset(file("b.h5"), d);
  const DatasetInfo info = open_dataset_info(file("b.h5"));
  EXPECT_EQ(info.num_classes, 3);
  EXPECT_FALSE(info.is_uint8);
  EXPECT_EQ(info.mean, (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(info.stddev, (std::vector<float>{2.0f, 2.0f}));
  EXPECT_TRUE(info.class_names.empty());
  // A test set whose labels exceed the training set's classes.
  expect_input_error([&] { open_dataset_info(file("b.h5"), 2); },
                     {file("b.h5"), "`labels`", "2 classes"});
}

TEST_F(DatasetTest, EveryBrokenKindThrowsInputErrorNamingFileAndObject) {
  const std::map<std::string, std::vector<std::string>> expect = {
      {"missing-images", {"`images`"}},
      {"missing-labels", {"`labels`"}},
      {"images-rank3", {"`images`", "rank 3", "expected rank 4"}},
      {"images-int16", {"`images`", "int16", "uint8 or float32"}},
      {"labels-float", {"`labels`", "float32", "integer"}},
      {"count-mismatch", {"`labels`", "`images`", "N = 20"}},
      {"zero-samples", {"`images`", "zero samples"}},
      {"label-out-of-range", {"`labels`", "label 4", "sample 10", "num_classes = 4"}},
      {"label-negative", {"`labels`", "label -1", "sample 10"}},
      {"truncated", {"truncated"}},
      {"not-hdf5", {"not an HDF5 file"}},
      {"mean-length", {"`mean`", "expected 1 or C = 1"}},
      {"std-zero", {"`std`", "expected > 0"}},
      {"label-huge",
       {"`labels`", "label 1000000", "sample 10", "1000001 classes", "999996 have no sample",
        "`num_classes`", "--num-classes"}},
  };
  for (const auto& kind : testing::corrupt_kinds()) {
    if (kind == "nan-image" || kind == "inf-image") continue;  // valid schema; caught by the reader
    SCOPED_TRACE(kind);
    ASSERT_TRUE(expect.count(kind)) << "untested kind " << kind;
    SyntheticSpec s;
    s.n = 20, s.classes = 4, s.corrupt = kind;
    const std::string path = file(kind + ".h5");
    testing::write_synthetic_dataset(path, s);
    std::vector<std::string> needles = expect.at(kind);
    needles.push_back(path);
    expect_input_error([&] { open_dataset_info(path); }, needles);
  }
  expect_input_error([&] { open_dataset_info(file("absent.h5")); },
                     {file("absent.h5"), "no such file"});
  expect_input_error([&] { open_dataset_info(dir_.string()); }, {"not a regular file"});
}

TEST_F(DatasetTest, VariableLengthImagesOfAnotherTypeAreNamedByTheirDtype) {
  // Encoded images are variable-length uint8; variable-length int8 is named as such (not as a
  // rank-1 dataset of plain images).
  testing::write_raw_dataset(file("vlen.h5"), indexed(4, 1, 2, 2, "uint8", 2));
  const hid_t vtype = H5Tvlen_create(H5T_NATIVE_INT8);
  replace_dataset(file("vlen.h5"), "images", vtype, 4);
  H5Tclose(vtype);
  expect_input_error([&] { open_dataset_info(file("vlen.h5")); },
                     {file("vlen.h5"), "`images`", "dtype variable-length int8",
                      "or variable-length uint8: encoded images"});
}

TEST_F(DatasetTest, AUint64LabelAboveInt64IsNamedWithItsOwnValue) {
  // HDF5 converts uint64 → int64 by clamping: 2^64 - 1 would read as 2^63 - 1 and the message
  // would name a label the file does not hold.
  testing::write_raw_dataset(file("u64.h5"), indexed(6, 1, 2, 2, "uint8", 3));
  const std::uint64_t labels[6] = {0, 1, 2, 18446744073709551615ULL, 1, 0};
  replace_dataset(file("u64.h5"), "labels", H5T_STD_U64LE, 6, H5T_NATIVE_UINT64, labels);
  expect_input_error([&] { open_dataset_info(file("u64.h5")); },
                     {file("u64.h5"), "`labels`", "18446744073709551615", "index 3",
                      "at most 9223372036854775807"});
}

TEST_F(DatasetTest, ClassCountMismatchesAreInputErrors) {
  SyntheticSpec s;
  s.n = 30, s.classes = 12;
  testing::write_synthetic_dataset(file("k12.h5"), s);
  expect_input_error([&] { open_dataset_info(file("k12.h5"), 10); },
                     {file("k12.h5"), "`num_classes` = 12", "10 classes"});
  RawDataset d = indexed(4, 1, 2, 2, "uint8", 2);
  d.class_names = {"a", "b", "c"};
  testing::write_raw_dataset(file("names.h5"), d);
  expect_input_error([&] { open_dataset_info(file("names.h5")); }, {"`class_names`", "3 names"});
  d.class_names.clear();
  d.stddev = {1.0f};  // std without mean
  testing::write_raw_dataset(file("std_only.h5"), d);
  expect_input_error([&] { open_dataset_info(file("std_only.h5")); }, {"`std`", "`mean`"});
  // A test file's class names must be the training file's, in its order, where both have them.
  DatasetInfo train, test;
  train.path = "train.h5", test.path = "test.h5";
  train.class_names = {"cat", "dog"};
  test.class_names = {"dog", "cat"};
  expect_input_error([&] { check_class_names(train, test); },
                     {"test.h5: attribute `class_names`", "train.h5", "label 0 is 'dog' here"});
  test.class_names = train.class_names;
  EXPECT_NO_THROW(check_class_names(train, test));
  test.class_names.clear();  // a file without names: nothing to compare
  EXPECT_NO_THROW(check_class_names(train, test));
}

TEST_F(DatasetTest, ClassCountFromOptionAttributeOrMostlyUsedLabels) {
  // No attribute: the given count (--num-classes) wins over max(label) + 1.
  SyntheticSpec s;
  s.n = 30, s.classes = 4, s.num_classes_attr = false;
  testing::write_synthetic_dataset(file("noattr.h5"), s);
  EXPECT_EQ(open_dataset_info(file("noattr.h5")).num_classes, 4);
  EXPECT_EQ(open_dataset_info(file("noattr.h5"), 10, "--num-classes").num_classes, 10);
  expect_input_error(
      [&] { open_dataset_info(file("noattr.h5"), 3, "--num-classes"); },
      {file("noattr.h5"), "`labels`", "label 3", "at sample", "expected < 3 (--num-classes)"});
  // An attribute must agree with the option.
  s.num_classes_attr = true;
  testing::write_synthetic_dataset(file("attr.h5"), s);
  EXPECT_EQ(open_dataset_info(file("attr.h5"), 4, "--num-classes").num_classes, 4);
  expect_input_error([&] { open_dataset_info(file("attr.h5"), 10, "--num-classes"); },
                     {file("attr.h5"), "`num_classes` = 4", "--num-classes is 10"});
  // max(label) + 1 is accepted while at most half of the classes are empty.
  auto with_labels = [&](const std::string& name, std::vector<std::int64_t> labels) {
    RawDataset d = indexed(static_cast<std::int64_t>(labels.size()), 1, 2, 2, "uint8", 2);
    d.labels = std::move(labels);
    d.num_classes = 0;
    testing::write_raw_dataset(file(name), d);
    return file(name);
  };
  EXPECT_EQ(open_dataset_info(with_labels("half.h5", {0, 3, 3, 0})).num_classes,
            4);  // 2 of 4 empty
  EXPECT_EQ(open_dataset_info(with_labels("one.h5", {0, 1, 3, 1})).num_classes, 4);
  expect_input_error(
      [&] {
        open_dataset_info(with_labels("sparse.h5", {0, 4, 0, 0}));
      },
      {file("sparse.h5"), "label 4 at sample 1", "5 classes", "3 have no sample"});
  // The huge label with a class count given: out of range, named with its index.
  s.corrupt = "label-huge";
  testing::write_synthetic_dataset(file("huge.h5"), s);
  expect_input_error(
      [&] { open_dataset_info(file("huge.h5"), 4, "--num-classes"); },
      {file("huge.h5"), "label 1000000 at sample 15", "expected < 4 (--num-classes)"});
}

TEST_F(DatasetTest, CheckDatasetFits) {
  SyntheticSpec s;
  s.n = 10;
  testing::write_synthetic_dataset(file("ten.h5"), s);
  const DatasetInfo info = open_dataset_info(file("ten.h5"));
  expect_input_error([&] { check_dataset_fits(info, 3, 4); },
                     {file("ten.h5"), "fewer samples (10) than workers × batch size (3 × 4 = 12)"});
  EXPECT_EQ(check_dataset_fits(info, 3, 3), 1);  // shards 4,3,3 → 1 full batch each
  EXPECT_EQ(check_dataset_fits(info, 1, 3), 3);
  EXPECT_THROW(check_dataset_fits(info, 0, 3), InputError);
}

// ---- BatchReader
// -----------------------------------------------------------------------------------

TEST_F(DatasetTest, ReaderReturnsExactlyTheRequestedRowsInOrder) {
  constexpr int kC = 2, kH = 3, kW = 2, kSample = kC * kH * kW;
  testing::write_raw_dataset(file("idx.h5"), indexed(50, kC, kH, kW, "float32"));
  const DatasetInfo info = open_dataset_info(file("idx.h5"));
  // A shuffled shard, plus hand-made runs and a duplicate, across two batch sizes.
  std::vector<std::int64_t> shard = epoch_shard(50, 3, 1, 1, 2);
  const std::vector<std::int64_t> handmade = {5, 6, 7, 8, 49, 0, 1, 2, 30, 30, 12, 11, 10};
  for (const auto& indices : {shard, handmade}) {
    for (int batch : {1, 7, 64}) {
      BatchReader reader(info, indices, batch, 2);
      const auto batches = read_all(reader);
      ASSERT_EQ(static_cast<std::int64_t>(batches.size()), reader.batches());
      ASSERT_EQ(reader.batches(), (static_cast<std::int64_t>(indices.size()) + batch - 1) / batch);
      std::size_t k = 0;
      for (const auto& b : batches) {
        ASSERT_EQ(b.x.size(), static_cast<std::size_t>(b.n) * kSample);
        ASSERT_EQ(b.y.size(), static_cast<std::size_t>(b.n));
        for (int p = 0; p < b.n; ++p, ++k) {
          const std::int64_t i = indices[k];
          EXPECT_EQ(b.y[p], i % 5);
          for (int j = 0; j < kSample; ++j)
            ASSERT_EQ(b.x[static_cast<std::size_t>(p) * kSample + j],
                      static_cast<float>(i * 16 + j % 16))
                << "sample " << i << " pixel " << j;
        }
      }
      EXPECT_EQ(k, indices.size());
      HostBatch extra;
      EXPECT_FALSE(reader.next(extra));
    }
  }
}

TEST_F(DatasetTest, ReaderCacheGivesTheSameBatches) {
  // The in-memory cache (cache_bytes) must not change a single value, order or label, for both file
  // dtypes, a shuffled shard and hand-made runs with a duplicate; a cache too small is not used.
  for (const char* dtype : {"uint8", "float32"}) {
    SCOPED_TRACE(dtype);
    const std::string path = file(std::string("cache_") + dtype + ".h5");
    testing::write_raw_dataset(path, indexed(50, 2, 3, 2, dtype));
    const DatasetInfo info = open_dataset_info(path);
    const std::vector<std::int64_t> handmade = {5, 6, 7, 8, 49, 0, 1, 2, 30, 30, 12, 11, 10};
    for (const auto& indices : {epoch_shard(50, 3, 1, 1, 2), handmade}) {
      BatchReader plain(info, indices, 7, 2);
      BatchReader cached(info, indices, 7, 2, 0, {}, std::size_t(1) << 20);
      BatchReader tight(info, indices, 7, 2, 0, {}, 16);  // 16 bytes: no cache
      EXPECT_FALSE(plain.cached());
      EXPECT_TRUE(cached.cached());
      EXPECT_FALSE(tight.cached());
      const auto a = read_all(plain), b = read_all(cached);
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t k = 0; k < a.size(); ++k) {
        EXPECT_EQ(a[k].n, b[k].n);
        EXPECT_EQ(a[k].x, b[k].x) << "batch " << k;
        EXPECT_EQ(a[k].y, b[k].y) << "batch " << k;
      }
    }
  }
}

TEST_F(DatasetTest, ReaderPartialLastBatchAndCursor) {
  testing::write_raw_dataset(file("p.h5"), indexed(23, 1, 2, 2, "uint8"));
  const DatasetInfo info = open_dataset_info(file("p.h5"));
  std::vector<std::int64_t> idx(23);
  std::iota(idx.begin(), idx.end(), 0);
  BatchReader reader(info, idx, 10, 3);
  EXPECT_EQ(reader.batches(), 3);
  HostBatch b;
  std::vector<int> sizes;
  while (reader.next(b)) sizes.push_back(b.n);
  EXPECT_EQ(sizes, (std::vector<int>{10, 10, 3}));
  EXPECT_EQ(b.x.size(), 3u * 4u);
  EXPECT_EQ(reader.position(), 3);
  EXPECT_THROW(reader.skip(1), InputError);  // after next()
}

TEST_F(DatasetTest, ReaderNormalization) {
  // uint8 with per-channel mean/std: (raw/255 − mean[c]) / std[c].
  RawDataset d = indexed(6, 2, 2, 2, "uint8");
  d.mean = {0.5f, 0.25f};
  d.stddev = {0.5f, 2.0f};
  testing::write_raw_dataset(file("u8.h5"), d);
  // uint8 without mean/std: raw/255. float32 with a single mean/std: (raw − m)/s.
  RawDataset plain = indexed(6, 2, 2, 2, "uint8");
  testing::write_raw_dataset(file("u8plain.h5"), plain);
  RawDataset f = indexed(6, 2, 2, 2, "float32");
  f.mean = {10.0f};
  f.stddev = {4.0f};
  testing::write_raw_dataset(file("f32.h5"), f);

  auto check = [&](const std::string& path, const RawDataset& raw, auto expected) {
    SCOPED_TRACE(path);
    BatchReader reader(open_dataset_info(path), {5, 0, 3}, 4);
    HostBatch b;
    ASSERT_TRUE(reader.next(b));
    ASSERT_EQ(b.n, 3);
    const std::int64_t rows[] = {5, 0, 3};
    for (int p = 0; p < 3; ++p)
      for (int j = 0; j < 8; ++j)
        EXPECT_FLOAT_EQ(b.x[p * 8 + j], expected(raw.pixels[rows[p] * 8 + j], j / 4));
  };
  check(file("u8.h5"), d,
        [&](float raw, int c) { return (raw / 255.0f - d.mean[c]) / d.stddev[c]; });
  check(file("u8plain.h5"), plain, [](float raw, int) { return raw / 255.0f; });
  check(file("f32.h5"), f, [](float raw, int) { return (raw - 10.0f) / 4.0f; });
}

TEST_F(DatasetTest, ReaderStartBatchAndSkipResumeMidEpoch) {
  testing::write_raw_dataset(file("r.h5"), indexed(40, 1, 2, 2, "float32"));
  const DatasetInfo info = open_dataset_info(file("r.h5"));
  const auto idx = epoch_shard(40, 9, 2, 0, 1);
  BatchReader full(info, idx, 6);
  const auto all = read_all(full);
  BatchReader from_ctor(info, idx, 6, 2, 4);
  BatchReader skipped(info, idx, 6);
  skipped.skip(4);
  EXPECT_EQ(skipped.position(), 4);
  for (BatchReader* r : {&from_ctor, &skipped}) {
    const auto rest = read_all(*r);
    ASSERT_EQ(rest.size(), all.size() - 4);
    for (std::size_t k = 0; k < rest.size(); ++k) {
      EXPECT_EQ(rest[k].x, all[k + 4].x);
      EXPECT_EQ(rest[k].y, all[k + 4].y);
    }
  }
  EXPECT_THROW(BatchReader(info, idx, 6, 2, 8), InputError);  // 7 batches
  EXPECT_THROW(BatchReader(info, {40}, 6), InputError);       // index out of range
  EXPECT_THROW(BatchReader(info, idx, 0), InputError);
}

TEST_F(DatasetTest, ReaderRethrowsNonFinitePixelAfterGoodBatches) {
  SyntheticSpec s;
  s.n = 20, s.corrupt = "nan-image";  // NaN in sample 10
  testing::write_synthetic_dataset(file("nan.h5"), s);
  const DatasetInfo info = open_dataset_info(file("nan.h5"));
  std::vector<std::int64_t> idx(20);
  std::iota(idx.begin(), idx.end(), 0);
  BatchReader reader(info, idx, 5);
  HostBatch b;
  EXPECT_TRUE(reader.next(b));  // samples 0..4
  EXPECT_TRUE(reader.next(b));  // 5..9
  expect_input_error([&] { reader.next(b); },
                     {file("nan.h5"), "`images`", "sample 10", "non-finite"});
  EXPECT_THROW(reader.next(b), InputError);  // stays failed
  s.corrupt = "inf-image";                   // +Inf in sample 10, found in the second batch of 8
  testing::write_synthetic_dataset(file("inf.h5"), s);
  BatchReader inf_reader(open_dataset_info(file("inf.h5")), idx, 8);
  EXPECT_TRUE(inf_reader.next(b));
  expect_input_error([&] { inf_reader.next(b); },
                     {file("inf.h5"), "`images`", "sample 10", "non-finite value (inf)"});
}

TEST_F(DatasetTest, ReaderDestroyedEarlyJoinsCleanly) {
  testing::write_raw_dataset(file("e.h5"), indexed(200, 1, 4, 4, "uint8"));
  const DatasetInfo info = open_dataset_info(file("e.h5"));
  for (int i = 0; i < 5; ++i) {
    BatchReader reader(info, epoch_shard(200, 1, i, 0, 1), 8, 2);
    HostBatch b;
    if (i % 2) ASSERT_TRUE(reader.next(b));
  }  // destructor with the ring full and the thread waiting
}

TEST_F(DatasetTest, ReadersAndCheckpointWritesShareHdf5Safely) {
  testing::write_raw_dataset(file("s.h5"), indexed(300, 1, 8, 8, "float32"));
  const DatasetInfo info = open_dataset_info(file("s.h5"));
  auto run_reader = [&](int seed, std::int64_t* checksum) {
    BatchReader reader(info, epoch_shard(300, seed, 0, 0, 1), 16, 2);
    HostBatch b;
    while (reader.next(b)) *checksum += std::accumulate(b.y.begin(), b.y.end(), std::int64_t{0});
  };
  std::int64_t c1 = 0, c2 = 0;
  std::thread t1(run_reader, 1, &c1), t2(run_reader, 2, &c2);
  for (int k = 0; k < 20; ++k) {  // a checkpoint writer on this thread meanwhile
    H5File f = create_file(file("ckpt.h5"));
    std::vector<float> w(1000, static_cast<float>(k));
    write_dataset_floats(f.get(), "w", {10, 100}, w.data());
    write_attr_int(f.get(), "global_step", k);
  }
  t1.join();
  t2.join();
  std::int64_t expect = 0;
  for (int i = 0; i < 300; ++i) expect += i % 5;
  EXPECT_EQ(c1, expect);
  EXPECT_EQ(c2, expect);
}

// ---- io/hdf5.hpp helpers
// ---------------------------------------------------------------------------

TEST_F(DatasetTest, Hdf5AttributeAndDatasetRoundTrip) {
  {
    H5File f = create_file(file("rt.h5"));
    write_attr_int(f.get(), "step", 1234567890123);
    write_attr_double(f.get(), "lr", 0.125);
    write_attr_floats(f.get(), "v", {1.5f, -2.0f});
    write_attr_string(f.get(), "model", "cnn: conv(8)");
    write_attr_strings(f.get(), "names", {"T-shirt/top", "", "Ankle boot"});
    write_attr_int(f.get(), "step", 7);  // replaces
    H5Group g = create_group(f.get(), "opt");
    std::vector<float> data(3000);
    std::iota(data.begin(), data.end(), 0.0f);
    write_dataset_floats(g.get(), "m", {3, 1000}, data.data());
    const std::vector<std::int64_t> cur = {-1, 1LL << 40};
    write_dataset_int64s(f.get(), "cursor", {2}, cur.data());
    write_dataset_floats(f.get(), "empty", {0}, nullptr);
  }
  H5File f = open_file_read(file("rt.h5"));
  const std::string where = file("rt.h5");
  EXPECT_EQ(read_attr_int(f.get(), "step", where), 7);
  EXPECT_EQ(read_attr_double(f.get(), "lr", where), 0.125);
  EXPECT_EQ(read_attr_floats(f.get(), "v", where), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(read_attr_string(f.get(), "model", where), "cnn: conv(8)");
  EXPECT_EQ(read_attr_strings(f.get(), "names", where),
            (std::vector<std::string>{"T-shirt/top", "", "Ankle boot"}));
  std::vector<hsize_t> dims;
  const auto m = read_dataset_floats(f.get(), "opt/m", where, &dims);
  EXPECT_EQ(dims, (std::vector<hsize_t>{3, 1000}));
  EXPECT_EQ(m[2999], 2999.0f);
  EXPECT_EQ(read_dataset_int64s(f.get(), "cursor", where),
            (std::vector<std::int64_t>{-1, 1LL << 40}));
  EXPECT_TRUE(read_dataset_floats(f.get(), "empty", where).empty());
  {  // checksummed and chunked
    std::lock_guard lock(hdf5_mutex());
    H5Dataset d = open_dataset(f.get(), "opt/m", where);
    H5PropList dcpl(DT_CHECK_HDF5(H5Dget_create_plist(d.get()), "opt/m"));
    EXPECT_EQ(H5Pget_layout(dcpl.get()), H5D_CHUNKED);
    EXPECT_EQ(H5Pget_nfilters(dcpl.get()), 1);
    unsigned flags = 0;
    size_t nelem = 0;
    EXPECT_EQ(H5Pget_filter2(dcpl.get(), 0, &flags, &nelem, nullptr, 0, nullptr, nullptr),
              H5Z_FILTER_FLETCHER32);
  }
  expect_input_error([&] { read_attr_int(f.get(), "model", where); }, {"`model`", "string"});
  expect_input_error([&] { read_attr_strings(f.get(), "lr", where); },
                     {"`lr`", "expected strings"});
  expect_input_error([&] { read_attr_double(f.get(), "nope", where); },
                     {where, "missing attribute `nope`"});
  expect_input_error([&] { read_dataset_floats(f.get(), "nope", where); },
                     {where, "no dataset `nope`"});
}

TEST_F(DatasetTest, Hdf5ChecksumDetectsCorruptionAndCheckMacroNamesCall) {
  std::vector<float> data(4096);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = 1000.0f + static_cast<float>(i);
  {
    H5File f = create_file(file("c.h5"));
    write_dataset_floats(f.get(), "w", {4096}, data.data());
  }
  // Flip one byte inside the stored floats (found by their byte pattern).
  std::string bytes;
  {
    std::ifstream in(file("c.h5"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string needle(reinterpret_cast<const char*>(&data[100]), 4 * sizeof(float));
  const auto pos = bytes.find(needle);
  ASSERT_NE(pos, std::string::npos);
  bytes[pos + 1] ^= 0x5A;
  std::ofstream(file("c.h5"), std::ios::binary | std::ios::trunc) << bytes;
  H5File f = open_file_read(file("c.h5"));
  try {
    read_dataset_floats(f.get(), "w", file("c.h5"));
    ADD_FAILURE() << "corruption not detected";
  } catch (const LibraryError& e) {
    EXPECT_NE(std::string(e.what()).find("H5Dread"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("`w`"), std::string::npos) << e.what();
  }
  // The check macro: call text, what, file:line.
  std::lock_guard lock(hdf5_mutex());
  try {
    DT_CHECK_HDF5(H5Dopen2(f.get(), "/no/such", H5P_DEFAULT), "dataset /no/such of c.h5");
    ADD_FAILURE() << "no throw";
  } catch (const LibraryError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("H5Dopen2(f.get(), \"/no/such\", H5P_DEFAULT)"), std::string::npos) << w;
    EXPECT_NE(w.find("dataset /no/such of c.h5"), std::string::npos) << w;
    EXPECT_NE(w.find("test_dataset.cpp:"), std::string::npos) << w;
  }
}

}  // namespace
}  // namespace dtrain
