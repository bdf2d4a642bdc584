#!/usr/bin/env bash
# tests/gpu/stage.sh — run HERE (the build machine) before a lent-GPU session: builds dtrain with
# the CUDA backend required, and stages into .device/ (git-ignored; the device tool's `carry`) all
# that tests/gpu/device.sh needs on a bare GPU machine that has a driver, nvcc and PyTorch's CUDA
# wheels but no Open MPI, HDF5, Boost, oneDNN or network:
#   .device/build.tar.xz   the build tree without objects and scratch (binaries, test executables,
#                          CTest files; paths are absolute, device.sh links /work/main to the copy)
#   .device/debs/*.deb     the Debian runtime closure of every binary and Open MPI plug-in (ldd →
#                          dpkg -S → apt-get download; libc6 excluded)
#   .device/fashion-mnist  the Fashion-MNIST IDX files (/usr/share/datasets/fashion-mnist)
# Usage: bash tests/gpu/stage.sh            (then: device tool run, carry [".device"],
#                                            command "bash tests/gpu/device.sh STEP...")
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
# CUDA archs 90 (H100/H200) and 80 (A100) keep the fat binaries small; -DDTRAIN_REQUIRE_CUDA=ON
# makes a CPU-only fallback a configure error instead of a silent surprise on the GPU machine.
BUILD_DIR=$build bash .ci/build.sh -DDTRAIN_REQUIRE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-80;90}"
ldd "$build/bin/dtrain" | grep libcudnn >/dev/null || { echo "stage: $build/bin/dtrain has no cuDNN" >&2; exit 1; }

out=.device
rm -rf "$out/build.tar.xz"
mkdir -p "$out/debs" "$out/fashion-mnist"
tar -cJf "$out/build.tar.xz" --exclude='*.o' --exclude='*.a' --exclude="$build/tests/scratch" \
    --exclude="$build/Testing" "$build"

# Runtime closure: every shared library of our binaries and of Open MPI's and PMIx's plug-ins,
# minus the CUDA ones (the GPU machine has them as wheels) and glibc's.
bins=("$build"/bin/* "$build"/tests/dtrain_unit_tests "$build"/tests/dtrain_mpi_tests
      "$(readlink -f "$(command -v mpirun)")" /usr/bin/orted
      /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so)
libs=$(for b in "${bins[@]}"; do ldd "$b" 2>/dev/null | awk '/=> \//{print $3}'; done | sort -u |
       grep -vE '/usr/local/cuda|/libc\.so|/libm\.so|ld-linux|libcuda\.so')
pkgs=$(for l in $libs; do dpkg -S "$(readlink -f "$l")" 2>/dev/null || dpkg -S "$l"; done |
       cut -d: -f1 | sort -u | grep -vx libc6)
pkgs="$pkgs openmpi-bin openmpi-common"
(cd "$out/debs" && rm -f ./*.deb && apt-get download $pkgs >/dev/null 2>&1) ||
  { apt-get update >/dev/null && (cd "$out/debs" && apt-get download $pkgs >/dev/null); }
cp -u /usr/share/datasets/fashion-mnist/*.gz "$out/fashion-mnist/"
grep -qx '/.device/' .gitignore || echo '/.device/' >>.gitignore
echo "stage: $(ls "$out/debs" | wc -l) debs; sizes:"
du -sh "$out"/* | sed 's/^/  /'
du -sh "$out" | sed 's/^/  total /'
