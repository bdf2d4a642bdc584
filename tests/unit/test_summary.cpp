// tests/unit/test_summary.cpp — TensorBoard event files (train/summary.hpp): the masked CRC-32C of
// TFRecord framing against values from TensorBoard's own implementation, a second writer in the
// same second getting a new name (never the existing file), the record framing of the file_version
// event, summary_scalars' tags per row kind, and a write that fails (a full disk) being a
// LibraryError naming the file, as every output's. Reading back with TensorBoard:
// tests/cli/test_tensorboard.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "dtrain/core/error.hpp"
#include "dtrain/train/report.hpp"
#include "dtrain/train/summary.hpp"
#include "common/file_size_limit.hpp"

namespace fs = std::filesystem;

namespace dtrain {
namespace {

TEST(Summary, MaskedCrc32cMatchesTensorBoard) {
  // tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c(b"123456789") and (8 zero
  // bytes); CRC-32C("123456789") = 0xe3069283 is the Castagnoli check value.
  EXPECT_EQ(masked_crc32c("123456789", 9), 0xc78ab0e5u);
  const char zeros[8] = {};
  EXPECT_EQ(masked_crc32c(zeros, 8), 0x07980329u);
}

TEST(Summary, NewFileNeverOverwritesAndStartsWithFileVersion) {
  const fs::path dir = fs::temp_directory_path() / ("dtrain_summary_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string first, second;
  {
    EventWriter a(dir.string());
    EventWriter b(dir.string());  // same second, same host: must get another name
    first = a.path();
    second = b.path();
  }
  EXPECT_NE(first, second);
  EXPECT_NE(fs::path(first).filename().string().find("events.out.tfevents."), std::string::npos);
  std::ifstream in(first, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 16u);
  std::uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  ASSERT_EQ(bytes.size(), 16 + len) << "one record: the file_version event";
  std::uint32_t crc_len = 0, crc_data = 0;
  std::memcpy(&crc_len, bytes.data() + 8, 4);
  std::memcpy(&crc_data, bytes.data() + 12 + len, 4);
  EXPECT_EQ(crc_len, masked_crc32c(bytes.data(), 8));
  EXPECT_EQ(crc_data, masked_crc32c(bytes.data() + 12, len));
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Summary, ScalarsPerRowKind) {
  MetricsRow train{"train", 12, 2, 3.5, 0.25, 0.75, 1000, 0.01, 1.5, 42.0, 7.5, 0.875};
  const auto t = summary_scalars(train);
  ASSERT_EQ(t.size(), 10u);
  EXPECT_EQ(t[0], (Scalar{"train/loss", 0.25}));
  EXPECT_EQ(t[2], (Scalar{"train/top5", 0.875}));
  EXPECT_EQ(t[6], (Scalar{"train/ms_per_step", 42.0}));
  EXPECT_EQ(t[7], (Scalar{"train/exposed_comm_ms", 7.5}));
  EXPECT_EQ(t[8], (Scalar{"train/epoch", 2.0}));
  MetricsRow test{"test", 12, 2, 3.5, 0.5, 0.9, 0, 0, 0, 0, 0, 0.97};
  const auto e = summary_scalars(test);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[1], (Scalar{"test/accuracy", 0.9}));
  EXPECT_EQ(e[2], (Scalar{"test/top5", 0.97}));
}

TEST(Summary, AWriteThatFailsIsALibraryErrorNamingTheFile) {
  const fs::path dir =
      fs::temp_directory_path() / ("dtrain_summary_full_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string msg = "no error", path;
  int code = 0;
  {
    // Files past 4 KiB cannot grow: as a full disk part-way through.
    const dtrain::testing::FileSizeLimit limit(4096);
    ASSERT_TRUE(limit.set());
    try {
      EventWriter w(dir.string());
      path = w.path();
      for (int step = 1; step <= 1000; ++step) w.write_scalars(step, {{"train/loss", 0.5}});
    } catch (const LibraryError& e) {  // exit code 3, as metrics.csv's or a checkpoint's
      msg = e.what();
      code = exit_code(e);
    } catch (const std::exception& e) {
      msg = std::string("not a LibraryError: ") + e.what();
    }
  }
  fs::remove_all(dir);
  EXPECT_NE(msg.find("cannot write TensorBoard event file '" + path + "': File too large"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("summary.cpp:"), std::string::npos) << msg;  // (file:line), as the others
  EXPECT_EQ(code, kExitLibrary);
}

}  // namespace
}  // namespace dtrain
