// tests/unit/test_fuzz_inputs.cpp — seeded mutation fuzzing of the two inputs a user hands dtrain:
// an HDF5 dataset (byte flips, zeroed runs and truncations at random offsets of a valid file, read
// through open_dataset_info() and a full BatchReader pass) and a job file (random key/value edits,
// deletions, duplicated and garbage lines, truncation, parsed by parse_config() and built into a
// Model). Every case must end in success or a dtrain::InputError (exit code 2, a message naming the
// input): never a crash, another exception type, or a hang (ctest's timeout).
// Cases: DTRAIN_FUZZ_CASES (default 200 per kind; tests/fuzz/fuzz.sh runs thousands). Case i uses
// seed i, so a failure names a reproducible case (replay a dataset case: DTRAIN_FUZZ_FIRST=i
// DTRAIN_FUZZ_CASES=1).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "common/dataset_files.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

int fuzz_cases() {
  const char* v = std::getenv("DTRAIN_FUZZ_CASES");
  return v ? std::max(1, std::atoi(v)) : 200;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class FuzzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dtrain_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

/// Runs one case in this process: `body` must return normally or throw InputError.
template <typename Body>
void expect_clean(int seed, const std::string& what, int& errors, Body body) {
  try {
    body();
  } catch (const InputError& e) {
    ++errors;
    EXPECT_FALSE(std::string(e.what()).empty()) << what << " seed " << seed;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " seed " << seed << ": not an InputError (exit code " << exit_code(e)
                  << "): " << e.what();
  }
}

/// Byte-level mutation of a valid HDF5 dataset file.
std::string mutate_bytes(const std::string& good, std::mt19937_64& rng) {
  std::string b = good;
  auto pick = [&](std::size_t n) {
    return static_cast<std::size_t>(rng() % std::max<std::size_t>(n, 1));
  };
  switch (rng() % 4) {
    case 0: {  // flip 1..16 single bytes anywhere
      const int k = 1 + static_cast<int>(rng() % 16);
      for (int i = 0; i < k; ++i) b[pick(b.size())] ^= static_cast<char>(1 + rng() % 255);
      break;
    }
    case 1: {  // flip bytes in the first 2 KiB (superblock, object headers, B-trees)
      const int k = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < k; ++i)
        b[pick(std::min<std::size_t>(2048, b.size()))] ^= static_cast<char>(1 + rng() % 255);
      break;
    }
    case 2: {  // zero or randomize a run of up to 64 bytes
      const std::size_t at = pick(b.size()),
                        len = std::min<std::size_t>(1 + rng() % 64, b.size() - at);
      const bool zero = rng() % 2;
      for (std::size_t i = at; i < at + len; ++i) b[i] = zero ? 0 : static_cast<char>(rng());
      break;
    }
    default:  // truncate
      b.resize(pick(b.size()));
  }
  return b;
}

/// The forked child's work for dataset mutation `seed`: open the file and read every sample
/// through a BatchReader. Returns the child's exit code: 0 read fine, 2 InputError (or the open
/// deadline fired: HDF5 stuck on damaged metadata, reported as a corrupt file), 1 anything else.
int read_mutated_dataset(const fs::path& p, int seed) {
  set_dataset_open_deadline(5.0);
  try {
    const DatasetInfo info = open_dataset_info(p.string());
    // A damaged `dims` can declare many (fill-value) samples: valid, but slow to read.
    if (info.num_samples > 4096) return 0;
    std::vector<std::int64_t> idx(static_cast<std::size_t>(info.num_samples));
    for (std::size_t j = 0; j < idx.size(); ++j) idx[j] = static_cast<std::int64_t>(j);
    BatchReader reader(info, idx, 16);
    HostBatch batch;
    std::int64_t seen = 0;
    while (reader.next(batch)) {
      for (int y : batch.y)
        if (y < 0 || y >= info.num_classes) throw std::runtime_error("label out of range");
      seen += batch.n;
    }
    if (seen != info.num_samples) throw std::runtime_error("wrong sample count");
    return 0;
  } catch (const InputError&) {
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dataset mutation seed %d: not an InputError (exit code %d): %s\n", seed,
                 exit_code(e), e.what());
    return 1;
  }
}

/// The wait status of child `pid` (dataset mutation `seed`); killed, and a test failure, after 60
/// s.
int wait_for_child(pid_t pid, int seed) {
  int status = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "dataset mutation seed " << seed << ": hang (> 60 s)";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return status;
}

TEST_F(FuzzTest, DatasetMutationsEndInSuccessOrInputError) {
  const int cases = fuzz_cases();
  std::string good[2];
  for (int k = 0; k < 2; ++k) {
    testing::SyntheticSpec spec;
    spec.n = 40;
    spec.c = k ? 2 : 1;
    spec.h = spec.w = 6;
    spec.classes = 3;
    spec.dtype = k ? "float32" : "uint8";
    spec.seed = 11 + k;
    const fs::path p = dir_ / ("good" + std::to_string(k) + ".h5");
    testing::write_synthetic_dataset(p.string(), spec);
    good[k] = slurp(p);
    const DatasetInfo info = open_dataset_info(p.string());  // the base file is valid
    ASSERT_EQ(info.num_samples, 40);
  }
  // Each case runs in a forked child: a crash (signal) or a hang inside libhdf5 must be seen, not
  // take the test binary down. Child exit: 0 read fine, 2 InputError (or the open deadline fired:
  // HDF5 stuck on damaged metadata, reported as a corrupt file), 1 anything else.
  int errors = 0, opened = 0, stuck = 0;
  const char* first_env = std::getenv("DTRAIN_FUZZ_FIRST");  // replay: DTRAIN_FUZZ_FIRST=seed
  const int first = first_env ? std::atoi(first_env) : 0;
  for (int i = first; i < first + cases; ++i) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(i));
    const fs::path p = dir_ / "case.h5";
    spit(p, mutate_bytes(good[i % 2], rng));
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const int code = read_mutated_dataset(p, i);
      std::fflush(nullptr);
      ::_exit(code);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const int status = wait_for_child(pid, i);
    if (WIFSIGNALED(status)) {
      ADD_FAILURE() << "dataset mutation seed " << i << ": crashed with signal "
                    << WTERMSIG(status);
    } else if (WIFEXITED(status)) {
      const int code = WEXITSTATUS(status);
      EXPECT_TRUE(code == 0 || code == 2) << "dataset mutation seed " << i << ": exit " << code;
      if (code == 0) ++opened;
      if (code == 2) ++errors;
      if (code == 2 && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(4)) ++stuck;
    }
  }
  std::printf("dataset fuzz: %d cases, %d rejected as bad input (%d of them by the open deadline: "
              "HDF5 stuck), %d read fine\n",
              cases, errors, stuck, opened);
  // Still fuzzing: at 20 or more cases both outcomes occur (200 cases: about half each), so a
  // mutator that stopped breaking files, or a reader that stopped accepting them, fails here.
  if (cases >= 20) {
    EXPECT_GT(errors, 0) << "no mutation was rejected";
    EXPECT_GT(opened, 0) << "no mutated file was read";
  }
}

/// The tests' tiny CNN job (tests/common/tiny_cnn.ini, its path compiled in by
/// tests/CMakeLists.txt) without its comment lines, read once: the valid job every job-file case
/// mutates (every edit lands on a line the parser reads).
const std::string& base_job() {
  static const std::string text = [] {
    std::ifstream f(DTRAIN_TINY_CNN_JOB);
    EXPECT_TRUE(f) << "cannot read " << DTRAIN_TINY_CNN_JOB;
    std::string job;
    for (std::string line; std::getline(f, line);)
      if (line.rfind('#', 0) != 0) job += line + "\n";
    return job;
  }();
  return text;
}

std::string mutate_job(std::mt19937_64& rng) {
  static const std::vector<std::string> tokens = {"",
                                                  "-1",
                                                  "0",
                                                  "1e999",
                                                  "nan",
                                                  "inf",
                                                  "abc",
                                                  "99999999999999999999",
                                                  "0x10",
                                                  " ",
                                                  "=",
                                                  "[",
                                                  "]",
                                                  "true",
                                                  "-0",
                                                  "3.5",
                                                  "1e-40",
                                                  "conv",
                                                  "dense units=-3",
                                                  "kernel=0",
                                                  "filters=0",
                                                  "rate=1.5",
                                                  "pad=-1",
                                                  "stride=0",
                                                  "units=",
                                                  "\xff\xfe",
                                                  "layer",
                                                  "#",
                                                  ";",
                                                  "\t"};
  std::vector<std::string> lines;
  std::istringstream in(base_job());
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  auto pick = [&](std::size_t n) {
    return static_cast<std::size_t>(rng() % std::max<std::size_t>(n, 1));
  };
  auto token = [&] { return tokens[pick(tokens.size())]; };
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits && !lines.empty(); ++e) {
    std::string& l = lines[pick(lines.size())];
    const auto eq = l.find('=');
    switch (rng() % 8) {
      case 0:
        lines.erase(lines.begin() + static_cast<long>(pick(lines.size())));
        break;  // delete
      case 1:
        lines.insert(lines.begin() + static_cast<long>(pick(lines.size())), l);
        break;  // dup
      case 2:   // new value
        if (eq != std::string::npos) l = l.substr(0, eq + 1) + " " + token();
        break;
      case 3:  // new key
        if (eq != std::string::npos) l = token() + l.substr(eq);
        break;
      case 4: {  // garbage line
        std::string g;
        const int n = static_cast<int>(rng() % 40);
        for (int i = 0; i < n; ++i) g += static_cast<char>(32 + rng() % 95);
        lines.insert(lines.begin() + static_cast<long>(pick(lines.size())), g);
        break;
      }
      case 5:  // append a token to a layer argument list or a value
        l += " " + token();
        break;
      case 6: {  // flip a character
        if (!l.empty()) l[pick(l.size())] = static_cast<char>(32 + rng() % 95);
        break;
      }
      default:  // a random known-but-wrong key = value
        lines.push_back(std::string(rng() % 2 ? "batch-size" : "layer") + " = " + token());
    }
  }
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  if (rng() % 10 == 0) text.resize(pick(text.size()));  // truncated file
  return text;
}

TEST_F(FuzzTest, JobFileMutationsEndInSuccessOrInputError) {
  const int cases = fuzz_cases() * 3 / 2;
  auto backend = make_cpu_backend();
  int errors = 0, built = 0;
  for (int i = 0; i < cases; ++i) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(1000003 + i));
    const fs::path p = dir_ / "job.ini";
    spit(p, mutate_job(rng));
    expect_clean(i, "job-file mutation", errors, [&] {
      const std::string ps = p.string();
      std::vector<const char*> argv = {"dtrain", "--config", ps.c_str(), "--train-data", "x.h5"};
      const ParseResult r = parse_config(static_cast<int>(argv.size()), argv.data());
      Model model(*backend, r.config.layers, Shape{1, 1, 12, 12}, 4,
                  std::min(r.config.batch_size, 64));
      ++built;
    });
  }
  std::printf("job-file fuzz: %d cases, %d rejected with InputError, %d built a model\n", cases,
              errors, built);
  if (cases >= 20) {  // both outcomes occur (300 cases: about 4 rejected to 1 built)
    EXPECT_GT(errors, 0) << "no mutated job file was rejected";
    EXPECT_GT(built, 0) << "no mutated job file built a model";
  }
}

}  // namespace
}  // namespace dtrain
