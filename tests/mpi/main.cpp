// tests/mpi/main.cpp — the main() of dtrain_mpi_tests: MPI initialized once around GoogleTest,
// output only from rank 0 (the other ranks' default printers are removed), and the exit code
// non-zero when ANY rank had a failure (the failure flag is max-allreduced), so a failure seen only
// by a non-root rank still fails the ctest entry. Failures on other ranks are also printed to
// stderr with their rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "dtrain/comm/mpi_check.hpp"

namespace {

/// On non-root ranks: prints only failed assertions, prefixed by the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  const int rank = dtrain::init_mpi(&argc, &argv);  // as dtrain does
  // No wait in the tests may block longer than this; a hang becomes a RuntimeFault.
  dtrain::set_comm_timeout(60.0);

  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int local_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = local_failed;
  MPI_Allreduce(&local_failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !local_failed)
    std::fprintf(stderr,
                 "dtrain_mpi_tests: a test failed on another rank (see its [rank N] lines)\n");
  MPI_Finalize();
  return any_failed ? 1 : 0;
}
