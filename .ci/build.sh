#!/usr/bin/env bash
# Configures and builds dtrain (Release) into ${BUILD_DIR:-build}. CUDA is compiled when nvcc,
# cuDNN and NCCL are found (e.g. /usr/local/cuda); otherwise the build is CPU-only.
# Extra CMake arguments pass through: .ci/build.sh -DDTRAIN_SANITIZE=ON
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@" >"$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
grep -E "^-- dtrain:" "$build.configure.log" || true
cmake --build "$build" -j "${JOBS:-$(nproc)}"
