// tests/unit/test_checkpoint.cpp — HDF5 checkpoints (io/checkpoint.hpp): write/read round trip of
// every field, keep-last-N pruning, `.tmp` files never listed or loaded, a corrupt newest
// checkpoint (bytes flipped inside a checksummed dataset) skipped in favour of the previous one, a
// newer format version refused, compatibility checks (model signature, mode, size) naming the file,
// and prepare_run_dir refusing a regular file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/io/checkpoint.hpp"
#include "dtrain/io/hdf5.hpp"

namespace fs = std::filesystem;

namespace dtrain {
namespace {

#define EXPECT_MENTIONS(msg, word) \
  EXPECT_NE(std::string(msg).find(word), std::string::npos) << "no '" << (word) << "' in: " << (msg)

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("dtrain_ckpt_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// A state whose every field depends on `step` (params of P floats, m and v as given).
  static CheckpointState state(std::int64_t step, std::size_t P = 100, bool m = true,
                               bool v = true) {
    CheckpointState s;
    s.global_step = step;
    s.epoch = step / 10;
    s.step_in_epoch = step % 10;
    s.seed = 0xC0FFEEull + static_cast<std::uint64_t>(step);
    s.num_workers = 3;
    s.mode = "sync";
    s.model_signature = "0 conv filters=4 kernel=3 [4×1×3×3, 4]\n1 relu\n2 dense [10×64, 10]\n";
    s.config = "# effective\n[train]\nepochs = 2\n";
    s.wall_seconds = 12.5 + static_cast<double>(step);
    s.params.resize(P);
    for (std::size_t i = 0; i < P; ++i) s.params[i] = 0.001f * static_cast<float>(i) - 0.3f + step;
    if (m) {
      s.m.resize(P);
      for (std::size_t i = 0; i < P; ++i) s.m[i] = -0.5f * static_cast<float>(i % 17) + step;
    }
    if (v) {
      s.v.resize(P);
      for (std::size_t i = 0; i < P; ++i) s.v[i] = 1e-3f * static_cast<float>(i % 29) + step;
    }
    s.state_rows = 3;
    s.model_state.resize(3 * 8);
    for (std::size_t i = 0; i < s.model_state.size(); ++i) s.model_state[i] = 0.25f * i + step;
    return s;
  }

  static void flip_bytes(const std::string& path, std::uintmax_t at, int count) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    for (int i = 0; i < count; ++i) {
      f.seekg(static_cast<std::streamoff>(at + i));
      char c = 0;
      f.read(&c, 1);
      f.seekp(static_cast<std::streamoff>(at + i));
      c = static_cast<char>(c ^ 0x5A);
      f.write(&c, 1);
    }
  }

  /// The InputError read_checkpoint(path) throws (the test fails when it reads the file).
  static std::string read_error(const std::string& path) {
    try {
      read_checkpoint(path);
    } catch (const InputError& e) {
      return e.what();
    }
    ADD_FAILURE() << "read '" << path << "' without an error";
    return "";
  }

  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripKeepsEveryField) {
  const CheckpointState s = state(1234);
  write_checkpoint(dir_, s, 3);
  const std::string path = checkpoint_path(dir_, 1234);
  EXPECT_EQ(fs::path(path).filename().string(), "ckpt-0000001234.h5");
  ASSERT_TRUE(fs::exists(path));
  const CheckpointState r = read_checkpoint(path);
  EXPECT_EQ(r.format_version, kCheckpointFormatVersion);
  EXPECT_EQ(r.global_step, s.global_step);
  EXPECT_EQ(r.epoch, s.epoch);
  EXPECT_EQ(r.step_in_epoch, s.step_in_epoch);
  EXPECT_EQ(r.seed, s.seed);
  EXPECT_EQ(r.num_workers, s.num_workers);
  EXPECT_EQ(r.mode, s.mode);
  EXPECT_EQ(r.model_signature, s.model_signature);
  EXPECT_EQ(r.config, s.config);
  EXPECT_DOUBLE_EQ(r.wall_seconds, s.wall_seconds);
  EXPECT_EQ(r.params, s.params);
  EXPECT_EQ(r.m, s.m);
  EXPECT_EQ(r.v, s.v);
  EXPECT_EQ(r.model_state, s.model_state);
  EXPECT_EQ(r.state_rows, s.state_rows);
}

TEST_F(CheckpointTest, RoundTripWithoutOptimizerState) {
  CheckpointState s = state(7, 33, /*m=*/false, /*v=*/false);
  s.mode = "async";
  s.seed = 0xFFFFFFFFFFull;
  write_checkpoint(dir_, s, 1);
  const CheckpointState r = read_checkpoint(checkpoint_path(dir_, 7));
  EXPECT_TRUE(r.m.empty());
  EXPECT_TRUE(r.v.empty());
  EXPECT_EQ(r.params, s.params);
  EXPECT_EQ(r.mode, "async");
  EXPECT_EQ(r.seed, s.seed);
}

TEST_F(CheckpointTest, KeepsTheNewestN) {
  for (std::int64_t step : {10, 20, 30, 40, 50}) write_checkpoint(dir_, state(step), 2);
  const auto list = list_checkpoints(dir_);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0], checkpoint_path(dir_, 50));
  EXPECT_EQ(list[1], checkpoint_path(dir_, 40));
  EXPECT_FALSE(fs::exists(checkpoint_path(dir_, 30)));
  EXPECT_FALSE(fs::exists(checkpoint_path(dir_, 10)));
  // Newest first by step, not by name length or write order.
  write_checkpoint(dir_, state(45), 5);
  const auto again = list_checkpoints(dir_);
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[0], checkpoint_path(dir_, 50));
  EXPECT_EQ(again[1], checkpoint_path(dir_, 45));
  EXPECT_EQ(again[2], checkpoint_path(dir_, 40));
}

// Only ckpt-<10 digits>.h5 files count: other spellings, near misses and a directory so named do
// not, whatever their step.
TEST_F(CheckpointTest, OnlyItsOwnFileNamesAreListed) {
  write_checkpoint(dir_, state(3), 3);
  for (const char* name :
       {"ckpt-12.h5", "ckpt-00000000012.h5", "ckpt-00000000a1.h5", "xckpt-0000000013.h5",
        "ckpt-0000000014.h5.bak", "ckpt-0000000015.H5", "ckpt-+000000016.h5"})
    std::ofstream(dir_ + "/" + name) << "not a checkpoint";
  fs::create_directory(checkpoint_path(dir_, 99));
  const auto list = list_checkpoints(dir_);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0], checkpoint_path(dir_, 3));
}

TEST_F(CheckpointTest, TmpFilesAreNeverListedOrLoaded) {
  write_checkpoint(dir_, state(5), 3);
  EXPECT_TRUE(list_checkpoints(dir_).size() == 1);
  EXPECT_FALSE(fs::exists(checkpoint_path(dir_, 5) + ".tmp"));  // renamed away
  // A crash mid-write leaves a .tmp of a newer step (here: a complete file, so only the name
  // counts).
  write_checkpoint(dir_, state(9), 3);
  fs::rename(checkpoint_path(dir_, 9), checkpoint_path(dir_, 9) + ".tmp");
  std::ofstream(checkpoint_path(dir_, 11) + ".tmp") << "half a file";
  const auto list = list_checkpoints(dir_);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0], checkpoint_path(dir_, 5));
  const auto latest = load_latest_checkpoint(dir_);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->global_step, 5);
  EXPECT_TRUE(list_checkpoints(dir_ + "/no_such_dir").empty());
  EXPECT_FALSE(load_latest_checkpoint(dir_ + "/no_such_dir").has_value());
}

TEST_F(CheckpointTest, CorruptNewestFallsBackToThePrevious) {
  // Params dominate the file (4 MB of 4.1 MB), so its middle is inside /params' checksummed chunks.
  const std::size_t P = 1 << 20;
  write_checkpoint(dir_, state(100, P, false, false), 3);
  write_checkpoint(dir_, state(200, P, false, false), 3);
  const std::string newest = checkpoint_path(dir_, 200);
  const auto size = fs::file_size(newest);
  ASSERT_GT(size, 4u * P);
  flip_bytes(newest, size / 2, 4);

  EXPECT_MENTIONS(read_error(newest), newest);
  const auto latest = load_latest_checkpoint(dir_);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->global_step, 100);
  EXPECT_EQ(latest->params, state(100, P, false, false).params);
}

TEST_F(CheckpointTest, AllCorruptMeansNoCheckpoint) {
  write_checkpoint(dir_, state(3), 3);
  std::ofstream(checkpoint_path(dir_, 3), std::ios::trunc) << "not hdf5 at all";
  EXPECT_THROW(read_checkpoint(checkpoint_path(dir_, 3)), InputError);
  EXPECT_FALSE(load_latest_checkpoint(dir_).has_value());
}

TEST_F(CheckpointTest, NewerFormatVersionIsRefused) {
  CheckpointState s = state(8);
  s.format_version = kCheckpointFormatVersion + 1;
  write_checkpoint(dir_, s, 3);
  const std::string path = checkpoint_path(dir_, 8);
  const std::string msg = read_error(path);
  EXPECT_MENTIONS(msg, path);
  EXPECT_MENTIONS(msg, "format version");
}

TEST_F(CheckpointTest, ModelStateWithoutRowsIsRefused) {
  write_checkpoint(dir_, state(9), 3);
  const std::string path = checkpoint_path(dir_, 9);
  {  // rewritten as 0 rows of 8: mean_of_rows would make every running statistic NaN
    H5File f = open_file_rw(path);
    DT_CHECK_HDF5(H5Ldelete(f.get(), "model_state", H5P_DEFAULT), path);
    write_dataset_floats(f.get(), "model_state", {0, 8}, nullptr);
  }
  const std::string msg = read_error(path);
  EXPECT_MENTIONS(msg, path);
  EXPECT_MENTIONS(msg, "model_state has no rows");
}

TEST_F(CheckpointTest, CompatibilityChecksNameTheFile) {
  const CheckpointState s = state(1);
  const std::string path = dir_ + "/ckpt-0000000001.h5";
  EXPECT_NO_THROW(check_checkpoint_compatible(s, path, s.model_signature, "sync", s.params.size()));
  std::string other = s.model_signature;
  other.replace(other.find("filters=4"), 9, "filters=8");
  try {
    check_checkpoint_compatible(s, path, other, "sync", s.params.size());
    ADD_FAILURE() << "other model accepted";
  } catch (const InputError& e) {
    EXPECT_MENTIONS(e.what(), path);
    EXPECT_MENTIONS(e.what(), "another model");
    EXPECT_MENTIONS(e.what(), "filters=8");  // the first differing layer is quoted
  }
  // A model with one more layer is another model too.
  EXPECT_THROW(
      check_checkpoint_compatible(s, path, s.model_signature + "3 relu\n", "sync", s.params.size()),
      InputError);
  try {
    check_checkpoint_compatible(s, path, s.model_signature, "async", s.params.size());
    ADD_FAILURE() << "other mode accepted";
  } catch (const InputError& e) {
    EXPECT_MENTIONS(e.what(), path);
    EXPECT_MENTIONS(e.what(), "--mode");
  }
  try {
    check_checkpoint_compatible(s, path, s.model_signature, "sync", s.params.size() + 1);
    ADD_FAILURE() << "other size accepted";
  } catch (const InputError& e) {
    EXPECT_MENTIONS(e.what(), path);
    EXPECT_MENTIONS(e.what(), "parameters");
  }
}

TEST_F(CheckpointTest, ResumingWithAnotherOptimizerIsRefused) {
  CheckpointState s = state(1);
  s.config = "# effective dtrain configuration\n[optimizer]\noptimizer = momentum\nlr = 0.1\n";
  const std::string path = dir_ + "/ckpt-0000000001.h5";
  EXPECT_NO_THROW(
      check_checkpoint_compatible(s, path, s.model_signature, "sync", s.params.size(), "momentum"));
  // predict passes no optimizer: any checkpoint's parameters score the same.
  EXPECT_NO_THROW(check_checkpoint_compatible(s, path, s.model_signature, "sync", s.params.size()));
  try {
    check_checkpoint_compatible(s, path, s.model_signature, "sync", s.params.size(), "adam");
    ADD_FAILURE() << "a momentum checkpoint resumed with adam";
  } catch (const InputError& e) {
    EXPECT_MENTIONS(e.what(), path);
    EXPECT_MENTIONS(e.what(), "written with --optimizer momentum, this run uses --optimizer adam");
  }
}

TEST_F(CheckpointTest, PrepareRunDir) {
  const std::string nested = dir_ + "/a/b/run";
  prepare_run_dir(nested);
  EXPECT_TRUE(fs::is_directory(nested));
  prepare_run_dir(nested);  // existing directory: fine
  const std::string file = dir_ + "/plain_file";
  std::ofstream(file) << "x";
  try {
    prepare_run_dir(file);
    ADD_FAILURE() << "regular file accepted as run dir";
  } catch (const InputError& e) {
    EXPECT_MENTIONS(e.what(), file);
    EXPECT_MENTIONS(e.what(), "--run-dir");
  }
  EXPECT_TRUE(fs::is_regular_file(file));
}

}  // namespace
}  // namespace dtrain
