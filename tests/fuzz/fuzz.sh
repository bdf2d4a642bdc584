#!/usr/bin/env bash
# tests/fuzz/fuzz.sh [N] — the long fuzz run, outside the test suite: N in-process cases per input
# kind (default 5000; tests/unit/test_fuzz_inputs.cpp with DTRAIN_FUZZ_CASES=N) and N/25 end-to-end
# dtrain runs (tests/cli/test_fuzz_e2e.sh with DTRAIN_FUZZ_RUNS, seeds after those of the suite).
# Uses the build in ${BUILD_DIR:-build} (build it first: bash .ci/build.sh). Exit 0: no case crashed,
# hung or ended in anything but success or a clear input error.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-5000}
build=${BUILD_DIR:-build}
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
echo "== in-process: $N dataset and $((N * 3 / 2)) job-file mutations"
DTRAIN_FUZZ_CASES=$N "$build/tests/dtrain_unit_tests" --gtest_filter='FuzzTest.*'
runs=$((N / 25 > 20 ? N / 25 : 20))
echo "== end to end: $runs dtrain runs"
DTRAIN=$PWD/$build/bin/dtrain BIN=$PWD/$build/bin SRC=$PWD MPIEXEC=$(command -v mpiexec) \
  SCRATCH=$PWD/$build/fuzz-scratch DTRAIN_FUZZ_RUNS=$runs DTRAIN_FUZZ_SEED=100000 \
  bash tests/cli/test_fuzz_e2e.sh
