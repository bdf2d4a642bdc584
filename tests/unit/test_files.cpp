// tests/unit/test_files.cpp — the run directory's outputs are written whole or not at all (a
// failed write leaves no temporary file), files named by --out never replace one
// (core/files.hpp), and a metrics row that cannot be written is an error, not a silent gap
// (train/report.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "dtrain/core/error.hpp"
#include "dtrain/core/files.hpp"
#include "dtrain/train/report.hpp"
#include "common/file_size_limit.hpp"

namespace fs = std::filesystem;
using namespace dtrain;

namespace {

/// A fresh directory for one test, removed at the end.
struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& name)
      : path(fs::temp_directory_path() /
             ("dtrain_files_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
};

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// what() of the Error `fn` throws ("no error" when it throws none).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Files, WriteFileAtomicallyReplacesTheFileAndLeavesNoTemporary) {
  ScratchDir d("replace");
  const std::string p = (d.path / "results.json").string();
  write_file_atomically(p, "{\"a\": 1}\n");
  EXPECT_EQ(read(p), "{\"a\": 1}\n");
  write_file_atomically(p, "{\"a\": 2}\n");
  EXPECT_EQ(read(p), "{\"a\": 2}\n");
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST(Files, AFailedWriteNamesTheFileAndKeepsTheOldOne) {
  ScratchDir d("fail");
  const std::string p = (d.path / "results.json").string();
  write_file_atomically(p, "old\n");
  fs::create_directory(p + ".tmp");  // the temporary cannot be opened as a file
  const std::string msg = error_of([&] { write_file_atomically(p, "new\n"); });
  EXPECT_NE(msg.find("cannot write '" + p + ".tmp'"), std::string::npos) << msg;
  EXPECT_EQ(read(p), "old\n");
  EXPECT_THROW(write_file_atomically(p, "new\n"), LibraryError);  // exit code 3, as other I/O
  // A directory that does not exist: the same error, naming the file.
  const std::string missing = (d.path / "no_such_dir" / "x.json").string();
  EXPECT_NE(error_of([&] { write_file_atomically(missing, "x"); }).find(missing + ".tmp"),
            std::string::npos);
}

TEST(Files, AWriteThatFailsPartWayLeavesNoTemporary) {
  ScratchDir d("partial");
  const std::string p = (d.path / "timeline.json").string();
  write_file_atomically(p, "old\n");
  std::string msg;
  {
    // Files past 4 KiB cannot grow: as a disk that fills up part-way.
    const dtrain::testing::FileSizeLimit limit(4096);
    ASSERT_TRUE(limit.set());
    msg = error_of([&] { write_file_atomically(p, std::string(1 << 16, 'x')); });
  }
  EXPECT_NE(msg.find("cannot write '" + p + ".tmp': File too large"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(p + ".tmp")) << "the part written is left behind";
  EXPECT_EQ(read(p), "old\n");
}

TEST(Files, AFailedRenameNamesBothPathsAndTheReason) {
  ScratchDir d("rename");
  const std::string from = (d.path / "a.tmp").string(), to = (d.path / "full").string();
  write_file_atomically(from, "x");
  fs::create_directories(fs::path(to) / "child");  // rename(2) cannot replace a non-empty directory
  const std::string msg = error_of([&] { replace_file(from, to); });
  EXPECT_NE(msg.find("cannot rename '" + from + "' to '" + to + "': "), std::string::npos) << msg;
  EXPECT_TRUE(fs::exists(from));
  EXPECT_TRUE(fs::exists(fs::path(to) / "child"));
}

TEST(Files, FsyncPathSyncsFilesAndDirectoriesAndNamesWhatIsMissing) {
  ScratchDir d("fsync");
  const std::string file = (d.path / "f.txt").string();
  std::ofstream(file) << "x";
  EXPECT_NO_THROW(fsync_path(file));
  EXPECT_NO_THROW(fsync_path(d.path.string()));
  const std::string missing = (d.path / "missing").string();
  const std::string msg = error_of([&] { fsync_path(missing); });
  EXPECT_NE(msg.find("'" + missing + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
}

TEST(Files, FileLockIsHeldByOneOwnerAtATimeAndNamesItToTheNext) {
  ScratchDir d("lock");
  const std::string path = (d.path / ".dtrain.lock").string();
  std::optional<FileLock> first(FileLock(path, "its chief: pid 1 on nodeA"));  // moved: still held
  ASSERT_EQ(first->state(), FileLock::State::held);
  EXPECT_EQ(read(path), "its chief: pid 1 on nodeA");
  // flock belongs to the open file: a second open, even in this process, finds it taken.
  const FileLock second(path, "its chief: pid 2 on nodeB");
  EXPECT_EQ(second.state(), FileLock::State::busy);
  EXPECT_EQ(second.holder(), "its chief: pid 1 on nodeA");
  EXPECT_EQ(read(path), "its chief: pid 1 on nodeA");  // the loser wrote nothing
  // lock_holder() finds the holder without holding the lock: the next owner still gets it.
  EXPECT_EQ(lock_holder(path), std::optional<std::string>("its chief: pid 1 on nodeA"));
  first.reset();  // released: the next one gets it
  EXPECT_EQ(lock_holder(path), std::nullopt);
  FileLock third(path, "pid 3");
  EXPECT_EQ(third.state(), FileLock::State::held);
  EXPECT_EQ(read(path), "pid 3");
  third.discard();  // a file it found is kept, unlocked
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(FileLock(path, "").state(), FileLock::State::held);
  fs::remove(path);
  FileLock made(path, "pid 4");
  made.discard();  // a file it made goes with it
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(lock_holder(path), std::nullopt);  // no file: no holder, and none made
  EXPECT_FALSE(fs::exists(path));
  const std::string msg = error_of([&] { FileLock((d.path / "no" / "dir").string(), ""); });
  EXPECT_NE(msg.find("no/dir'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
}

TEST(Files, CreateNewFileWritesWholeAndNeverReplaces) {
  ScratchDir d("create");
  const std::string p = (d.path / "m.onnx").string();
  create_new_file(p, [](std::ostream& o) { o << "model"; });
  EXPECT_EQ(read(p), "model");
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  // The file exists: the link fails (EEXIST) instead of replacing it, and the temporary goes.
  const std::string msg = error_of([&] { create_new_file(p, [](std::ostream& o) { o << "x"; }); });
  EXPECT_NE(msg.find("'" + p + "' already exists"), std::string::npos) << msg;
  EXPECT_NE(msg.find("never overwrites"), std::string::npos) << msg;
  EXPECT_EQ(read(p), "model");
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  // The writer throws half-way: no file, no temporary, the writer's error passed on.
  const std::string q = (d.path / "half.onnx").string();
  EXPECT_THROW(create_new_file(q,
                               [](std::ostream& o) {
                                 o << "half";
                                 throw InputError("layer #2 has no mapping");
                               }),
               InputError);
  EXPECT_FALSE(fs::exists(q));
  EXPECT_FALSE(fs::exists(q + ".tmp"));
}

TEST(Files, RequireNewFileNamesTheOptionAndWhatIsWrong) {
  ScratchDir d("require");
  const std::string p = (d.path / "m.onnx").string();
  require_new_file(p, "--out");  // nothing there, directory writable
  write_file_atomically(p, "x");
  std::string msg = error_of([&] { require_new_file(p, "--out"); });
  EXPECT_NE(msg.find("option --out: '" + p + "' already exists; dtrain never overwrites a file"),
            std::string::npos)
      << msg;
  fs::create_symlink(d.path / "nowhere", d.path / "dangling");  // a link to nothing counts too
  EXPECT_THROW(require_new_file((d.path / "dangling").string(), "--out"), InputError);
  const std::string missing = (d.path / "no_dir" / "m.onnx").string();
  msg = error_of([&] { require_new_file(missing, "--out"); });
  EXPECT_NE(msg.find("its directory '" + (d.path / "no_dir").string() + "' does not exist"),
            std::string::npos)
      << msg;
}

TEST(Files, AMetricsRowThatCannotBeWrittenIsAnErrorNamingMetricsCsv) {
  ScratchDir d("metrics");
  fs::create_symlink("/dev/full", d.path / "metrics.csv");  // every write: ENOSPC
  MetricsWriter w(d.path.string());
  MetricsRow r;
  r.kind = "train";
  r.global_step = 1;
  const std::string msg = error_of([&] { w.write(r); });
  EXPECT_NE(msg.find("cannot append to '" + (d.path / "metrics.csv").string() + "'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;  // the reason
  EXPECT_THROW(w.write(r), LibraryError);
}

TEST(Files, MetricsRowsAppendAfterTheHeader) {
  ScratchDir d("rows");
  {
    MetricsWriter w(d.path.string());
    MetricsRow r;
    r.kind = "train";
    r.global_step = 7;
    r.top5 = 0.625;
    w.write(r);
  }
  const std::string csv = read(d.path / "metrics.csv");
  EXPECT_EQ(csv.rfind("kind,global_step,", 0), 0u) << csv;
  EXPECT_NE(csv.find(",exposed_comm_ms,top5\n"), std::string::npos) << csv;  // the last column
  EXPECT_NE(csv.find("\ntrain,7,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",0.625000\n"), std::string::npos) << csv;
}

TEST(Files, ResumeSetsAsideRowsPastTheStepAndATornLastRow) {
  ScratchDir d("past");
  const std::string header = "kind,global_step,epoch\n";
  // Rows up to step 12, one past it, and the row the killed run was writing, cut short: its
  // "1" is a prefix of "12", not step 1.
  std::ofstream(d.path / "metrics.csv") << header << "train,4,0\ntrain,8,0\ntrain,16,0\ntrain,1";
  const auto [aside, moved] = set_aside_metrics_past(d.path.string(), 12);
  EXPECT_EQ(moved, 2);
  EXPECT_EQ(aside, (d.path / "metrics-past-12.csv").string());
  EXPECT_EQ(read(d.path / "metrics.csv"), header + "train,4,0\ntrain,8,0\n");
  EXPECT_EQ(read(aside), header + "train,16,0\ntrain,1\n");
  // A file that ends with its newline keeps every row at or before the step.
  EXPECT_EQ(set_aside_metrics_past(d.path.string(), 8).second, 0);
  EXPECT_EQ(read(d.path / "metrics.csv"), header + "train,4,0\ntrain,8,0\n");
}

TEST(Files, AnOlderMetricsHeaderGainsTheNewColumnsOnResume) {
  ScratchDir d("header");
  // metrics.csv as dtrain wrote it before exposed_comm_ms and top5: a resumed run's rows have
  // 12 fields, so the header gets the 12 names; the old row is kept as it was.
  const std::string old = "kind,global_step,epoch,wall_seconds,loss,accuracy,samples_per_sec,lr,"
                          "staleness,ms_per_step\ntrain,8,0,1.0,2.0,0.5,100.0,0.1,0.0,10.0\n";
  std::ofstream(d.path / "metrics.csv") << old;
  {
    MetricsWriter w(d.path.string());
    MetricsRow r;
    r.kind = "train";
    r.global_step = 12;
    w.write(r);
  }
  const std::string csv = read(d.path / "metrics.csv");
  EXPECT_EQ(csv.rfind("kind,global_step,epoch,wall_seconds,loss,accuracy,samples_per_sec,lr,"
                      "staleness,ms_per_step,exposed_comm_ms,top5\ntrain,8,0,1.0,",
                      0),
            0u)
      << csv;
  EXPECT_NE(csv.find("\ntrain,12,"), std::string::npos) << csv;
}
