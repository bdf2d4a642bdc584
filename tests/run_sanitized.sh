#!/usr/bin/env bash
# The sanitizer run (the last stage of tests/run_all.sh, the README's test command): builds dtrain and the test suite with
# AddressSanitizer + UndefinedBehaviorSanitizer (-DDTRAIN_SANITIZE=ON, CPU only, RelWithDebInfo) into
# ${ASAN_BUILD_DIR:-build-asan}, then runs every unit test and a subset of the MPI and CLI tests that
# drives the fault, bad-input, fuzz and stop-signal paths (the whole suite would take too long under
# ASan on 2 cores).
# Any sanitizer report fails the run: UBSan is built with -fno-sanitize-recover, ASan halts on error.
# Leak detection is off (ASAN_OPTIONS=detect_leaks=0): Open MPI and oneDNN keep allocations until
# exit by design and are not instrumented, so their reports are noise. Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh
build=${ASAN_BUILD_DIR:-build-asan}
BUILD_DIR=$build BUILD_TYPE=RelWithDebInfo bash .ci/build.sh -DDTRAIN_SANITIZE=ON -DDTRAIN_WITH_CUDA=OFF
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "== unit tests (ASan + UBSan)"
ctest --test-dir "$build" --output-on-failure -j 2 --timeout 900 -E '^(cli_|mpi_)' "$@"
echo "== MPI and CLI subset (ASan + UBSan)"
ctest --test-dir "$build" --output-on-failure -j 2 --timeout 900 \
  -R '^(mpi_tests_np2|cli_test_(bad_input|bad_labels|bad_checkpoints|faults_nonfinite|faults_checkpoint|faults_bad_input|fuzz_e2e|signals_during_compute))$' "$@"
