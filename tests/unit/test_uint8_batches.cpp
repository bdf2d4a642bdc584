// tests/unit/test_uint8_batches.cpp — uint8 batches (io/dataset.hpp: BatchReader's
// uint8_batches, HostBatch::raw, uint8_lut; Backend::normalize_uint8; the worker's BatchUpload,
// which writes the first layer's layout and dtype, test_normalize_uint8.cpp checking each):
// a reader handing out raw bytes gives, once they go through the file's table, exactly the float
// batch the normalizing reader gives — decoded-pixel files with and without mean/std and
// augmentation (crop + flip), encoded JPEG files with random-resized crop, flip and a bad image
// left out — on the CPU backend's loop and, bit for bit again, on the GPU's kernel (CudaUint8*:
// skipped without a GPU, failed with DTRAIN_REQUIRE_GPU=1).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/dataset_files.hpp"
#include "common/gpu.hpp"
#include "common/jpeg_writer.hpp"
#include "common/model_step.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/io/hdf5.hpp"
#include "train/batch_upload.hpp"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

/// A scratch file name of this test, removed with its directory at the end.
class Scratch {
 public:
  Scratch() {
    const auto* t = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("dtrain_" + std::string(t->name()) + "_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  ~Scratch() { fs::remove_all(dir_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  [[nodiscard]] std::string file(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
};

/// A uint8 file of n samples 3×5×7 with every byte value present, mean/std when asked.
std::string write_pixels(const Scratch& s, bool mean_std, const std::string& dtype = "uint8") {
  testing::RawDataset d;
  const int n = 23;
  d.image_dims = {static_cast<hsize_t>(n), 3, 5, 7};
  d.image_dtype = dtype;
  std::mt19937 gen(5);
  for (int i = 0; i < n * 3 * 5 * 7; ++i) d.pixels.push_back(static_cast<float>(gen() % 256));
  for (int i = 0; i < n; ++i) d.labels.push_back(i % 4);
  d.num_classes = 4;
  if (mean_std) {
    d.mean = {0.49f, 0.48f, 0.45f};
    d.stddev = {0.247f, 0.243f, 0.261f};
  }
  const std::string path = s.file(dtype + (mean_std ? "_norm.h5" : "_raw.h5"));
  testing::write_raw_dataset(path, d);
  return path;
}

/// testing::write_encoded_dataset() into the test's scratch folder.
std::string encoded_file(const Scratch& s, int n, int bad) {
  const std::string path = s.file("encoded.h5");
  testing::write_encoded_dataset(path, n, bad);
  return path;
}

/// Every batch of both readers: the float one (normalized on the host) and the uint8 one.
struct Batches {
  std::vector<HostBatch> floats, bytes;
};
Batches read_both(const DatasetInfo& info, const std::vector<std::int64_t>& indices,
                  const Augmentation& a) {
  Batches out;
  for (const bool raw : {false, true}) {
    BatchReader r(info, indices, 4, 2, 0, a, 0, nullptr, raw);
    HostBatch b;
    while (r.next(b)) (raw ? out.bytes : out.floats).push_back(b);
  }
  return out;
}

/// The raw batches through the table on `be` equal the float batches bit for bit.
void expect_same_bits(Backend& be, const DatasetInfo& info, const Batches& b) {
  ASSERT_EQ(b.floats.size(), b.bytes.size());
  ASSERT_FALSE(b.floats.empty());
  const std::vector<float> lut = uint8_lut(info);
  ASSERT_EQ(lut.size(), static_cast<std::size_t>(info.sample.c) * 256);
  DeviceBuffer<float> table(be, lut.size());
  be.copy_to_device(table.data(), lut.data(), lut.size() * sizeof(float));
  for (std::size_t k = 0; k < b.floats.size(); ++k) {
    const HostBatch &f = b.floats[k], &r = b.bytes[k];
    ASSERT_EQ(f.n, r.n) << "batch " << k;
    EXPECT_EQ(f.y, r.y) << "batch " << k;
    EXPECT_TRUE(r.x.empty());
    ASSERT_EQ(r.raw.size(), f.x.size()) << "batch " << k;
    DeviceBuffer<std::uint8_t> x(be, r.raw.size());
    DeviceBuffer<float> y(be, f.x.size());
    be.copy_to_device(x.data(), r.raw.data(), r.raw.size());
    be.normalize_uint8(x.data(), table.data(), y.data(), info.sample.with_n(r.n), Layout::nchw,
                       DType::f32);
    std::vector<float> got(f.x.size());
    be.synchronize();
    be.copy_to_host(got.data(), y.data(), got.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(got.data(), f.x.data(), got.size() * sizeof(float)), 0)
        << "batch " << k << " differs from the host-normalized one";
  }
}

const std::vector<std::int64_t> kOrder = {5, 0, 22, 7, 7, 13, 1, 2, 19, 11, 3, 20, 8};

TEST(Uint8Batches, TableIsThePerPixelFormula) {
  Scratch s;
  const DatasetInfo info = open_dataset_info(write_pixels(s, true));
  const std::vector<float> lut = uint8_lut(info);
  for (int c = 0; c < 3; ++c)
    for (int b : {0, 1, 128, 255})
      EXPECT_EQ(lut[static_cast<std::size_t>(c) * 256 + b],
                (static_cast<float>(b) / 255.0f - info.mean[c]) / info.stddev[c]);
  EXPECT_EQ(uint8_lut(open_dataset_info(write_pixels(s, false)))[255], 1.0f);
  EXPECT_TRUE(uint8_lut(open_dataset_info(write_pixels(s, true, "float32"))).empty());
}

TEST(Uint8Batches, DecodedPixelsEqualTheFloatBatchesBitForBit) {
  Scratch s;
  auto cpu = make_cpu_backend();
  for (const bool mean_std : {true, false})
    for (const Augmentation& a : {Augmentation{}, Augmentation{2, true, 9, 1}}) {
      SCOPED_TRACE(std::string(mean_std ? "mean/std" : "/255 only") +
                   (a.enabled() ? ", crop + flip" : ""));
      const DatasetInfo info = open_dataset_info(write_pixels(s, mean_std));
      expect_same_bits(*cpu, info, read_both(info, kOrder, a));
    }
}

TEST(Uint8Batches, EncodedImagesEqualTheFloatBatchesBitForBit) {
  Scratch s;
  auto cpu = make_cpu_backend();
  DatasetInfo info = open_dataset_info(encoded_file(s, 11, 6));
  DecodeOptions d;
  d.crop = 12;
  d.random_resized = true;
  d.threads = 2;
  configure_decode(info, d);
  const Batches b = read_both(info, {3, 6, 0, 10, 2, 9, 1}, Augmentation{0, true, 4, 2});
  ASSERT_EQ(b.bytes.size(), 2u);
  EXPECT_EQ(b.bytes[0].n, 3);  // sample 6 is left out of both
  expect_same_bits(*cpu, info, b);
}

TEST(Uint8Batches, RefusedForFloatFilesAndBadShapes) {
  Scratch s;
  const std::string path = write_pixels(s, true, "float32");
  try {
    BatchReader r(open_dataset_info(path), {0, 1}, 2, 2, 0, {}, 0, nullptr, true);
    ADD_FAILURE() << "a float32 file gave uint8 batches";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  auto cpu = make_cpu_backend();
  std::uint8_t x = 0;
  float lut[256] = {}, y = 0;
  for (const Shape& bad :
       {Shape{1, 0, 1, 1}, Shape{1, 1, 0, 1}, Shape{1, 1, 1, 0}, Shape{-1, 1, 1, 1}})
    EXPECT_THROW(cpu->normalize_uint8(&x, lut, &y, bad, Layout::nchw, DType::f32), InputError)
        << bad.str();
  cpu->normalize_uint8(&x, lut, &y, Shape{0, 0, 0, 0}, Layout::nhwc, DType::bf16);  // nothing
}

/// The worker's BatchUpload on `be` for a model whose first layer reads `layout`: uint8 batches
/// exactly when want_uint8 (a GPU), written in the first layer's form (InputForm::network: the
/// host-normalized batch as Model::network_input would convert and round it, bit for bit);
/// otherwise the host-normalized fp32 NCHW batch itself. The labels either way.
void expect_upload(Backend& be, bool want_uint8, Layout layout) {
  Scratch s;
  const DatasetInfo info = open_dataset_info(write_pixels(s, true));
  BatchUpload up(be, info, 4, layout);
  ASSERT_EQ(up.uint8_batches(), want_uint8);
  ASSERT_EQ(up.form(), want_uint8 ? InputForm::network : InputForm::f32_nchw);
  const Batches b = read_both(info, kOrder, {});
  const HostBatch& want = b.floats[2];
  std::vector<std::byte> want_x(want.x.size() * sizeof(float));
  std::memcpy(want_x.data(), want.x.data(), want_x.size());
  if (want_uint8)
    want_x = test::network_form(*make_cpu_backend(), want.x, info.sample.with_n(want.n), layout,
                                be.act_dtype());
  DeviceBuffer<float> x(be, 4 * info.sample.sample_count());
  DeviceBuffer<std::int32_t> y(be, 4);
  up(want_uint8 ? b.bytes[2] : want, x.data(), y.data());
  std::vector<std::byte> got(want_x.size());
  std::vector<std::int32_t> labels(4);
  be.synchronize();
  be.copy_to_host(got.data(), x.data(), got.size());
  be.copy_to_host(labels.data(), y.data(), labels.size() * sizeof(std::int32_t));
  EXPECT_TRUE(got == want_x);
  EXPECT_EQ(labels, want.y);
}

// On the CPU the reader normalizes (no uint8 batches); the upload puts the float batch into x,
// which the model converts itself.
TEST(Uint8Batches, CpuWorkersUploadFloatBatches) {
  for (const Layout layout : {Layout::nchw, Layout::nhwc}) {
    auto cpu = make_cpu_backend();
    cpu->set_precision(Precision::bf16);
    expect_upload(*cpu, false, layout);
  }
}

class CudaUint8Batches : public ::testing::Test {
 protected:
  void SetUp() override {
    DT_SKIP_WITHOUT_CUDA();
    gpu_ = make_cuda_backend(0);
  }
  std::unique_ptr<Backend> gpu_;
};

TEST_F(CudaUint8Batches, DeviceNormalizationEqualsTheHostBitForBit) {
  Scratch s;
  for (const bool mean_std : {true, false}) {
    const DatasetInfo info = open_dataset_info(write_pixels(s, mean_std));
    expect_same_bits(*gpu_, info, read_both(info, kOrder, Augmentation{2, true, 9, 1}));
  }
  DatasetInfo info = open_dataset_info(encoded_file(s, 11, 6));
  DecodeOptions d;
  d.crop = 12;
  d.random_resized = true;
  configure_decode(info, d);
  expect_same_bits(*gpu_, info,
                   read_both(info, {3, 6, 0, 10, 2, 9, 1}, Augmentation{0, true, 4, 2}));
}

// More elements than the kernel's grid covers in one pass (65,536 blocks of 256 threads, one
// element a thread where y is not 16-byte aligned: written from its second float here): the
// grid-stride loop, against the CPU backend's loop; and aligned (16-byte packs).
TEST_F(CudaUint8Batches, LargeBatchMatchesTheCpuLoop) {
  const std::size_t n = 130, c = 3, hw = 224 * 224, total = n * c * hw;
  std::vector<std::uint8_t> raw(total);
  std::mt19937 gen(3);
  for (auto& b : raw) b = static_cast<std::uint8_t>(gen());
  std::vector<float> lut(c * 256);
  for (std::size_t i = 0; i < lut.size(); ++i) lut[i] = static_cast<float>(i) * 0.37f - 50.0f;
  auto cpu = make_cpu_backend();
  std::vector<float> want(total);
  const Shape s{static_cast<int>(n), static_cast<int>(c), 224, 224};
  cpu->normalize_uint8(raw.data(), lut.data(), want.data(), s, Layout::nchw, DType::f32);
  DeviceBuffer<std::uint8_t> x(*gpu_, total);
  DeviceBuffer<float> table(*gpu_, lut.size()), y(*gpu_, total + 1);
  gpu_->copy_to_device(x.data(), raw.data(), total);
  gpu_->copy_to_device(table.data(), lut.data(), lut.size() * sizeof(float));
  for (const std::size_t at : {std::size_t{1}, std::size_t{0}}) {
    gpu_->normalize_uint8(x.data(), table.data(), y.data() + at, s, Layout::nchw, DType::f32);
    std::vector<float> got(total);
    gpu_->synchronize();
    gpu_->copy_to_host(got.data(), y.data() + at, total * sizeof(float));
    EXPECT_EQ(got, want) << "y from float " << at;
  }
}

// On a GPU: uint8 batches, the bytes uploaded and normalized on the device into the first
// layer's form, for each layout and precision.
TEST_F(CudaUint8Batches, GpuWorkersUploadBytes) {
  for (const Layout layout : {Layout::nchw, Layout::nhwc})
    for (const Precision p : {Precision::fp32, Precision::bf16}) {
      SCOPED_TRACE(std::string(layout_name(layout)) + " " + precision_name(p));
      gpu_->set_precision(p);
      expect_upload(*gpu_, true, layout);
    }
}

}  // namespace
}  // namespace dtrain
