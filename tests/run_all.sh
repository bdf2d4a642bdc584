#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what is missing, builds dtrain
# (with the CUDA backend when the CUDA toolkit, cuDNN and NCCL are present), and runs every test
# with ctest: unit tests, MPI tests (mpiexec -n 2/3/4), end-to-end CLI tests. First the style check
# of the changed C++ lines (tests/style_check.sh: clang-format, 100 columns, functions ≤ 80 lines).
# GPU tests skip with a reason when no GPU is present. Then the sanitizer stage
# (tests/run_sanitized.sh: ASan + UBSan build of the unit, MPI and fault tests); set
# DTRAIN_SKIP_SANITIZE=1 to run the plain suite only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh
bash tests/style_check.sh
bash .ci/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j 2 --timeout 600 "$@"
if [ "${DTRAIN_SKIP_SANITIZE:-0}" != 1 ]; then bash tests/run_sanitized.sh; fi
