#!/usr/bin/env bash
# tests/gpu/stage.sh — run HERE (the build machine) before a lent-GPU session: builds dtrain with
# the CUDA backend required, and stages into .device/ (git-ignored; the device tool's `carry`) all
# that tests/gpu/device.sh needs on a bare GPU machine that has a driver, nvcc and PyTorch's CUDA
# wheels but no Open MPI, HDF5, Boost, oneDNN or network:
#   .device/build.tar.xz   the build tree without objects and scratch (binaries, test executables,
#                          CTest files; paths are absolute, device.sh links /work/main to the copy)
#   .device/debs/*.deb     the Debian runtime closure of every binary and Open MPI plug-in (ldd →
#                          dpkg -S → apt-get download; libc6 excluded)
#   .device/fashion-mnist  the Fashion-MNIST IDX files (/usr/share/datasets/fashion-mnist; the
#                          image files as .xz, device.sh makes the .gz; with FMNIST_TRAIN=N
#                          only the first N training images)
#   .device/srcdir         this checkout's path, which the build's CTest files name (device.sh links
#                          it to the copy on the GPU machine)
# Usage: bash tests/gpu/stage.sh            (then: device tool run, carry [".device"],
#                                            command "bash tests/gpu/device.sh STEP...")
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
# device.sh runs build/ and the CTest files' absolute paths: another folder would not be found there.
[ "$build" = build ] || { echo "stage: device.sh runs build/ (BUILD_DIR=$build: stage from build)" >&2; exit 2; }
# CUDA archs 90 (H100/H200) and 80 (A100) keep the fat binaries small; -DDTRAIN_REQUIRE_CUDA=ON
# makes a CPU-only fallback a configure error instead of a silent surprise on the GPU machine.
BUILD_DIR=$build bash .ci/build.sh -DDTRAIN_REQUIRE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-80;90}"
ldd "$build/bin/dtrain" | grep libcudnn >/dev/null || { echo "stage: $build/bin/dtrain has no cuDNN" >&2; exit 1; }

out=.device
rm -rf "$out/build.tar.xz"
mkdir -p "$out/debs" "$out/fashion-mnist"
pwd -P >"$out/srcdir"
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
if [ -n "${FMNIST_TRAIN:-}" ]; then
  # The first FMNIST_TRAIN training images only (idx headers rewritten): what the bench's
  # throughput rows and input_bench need; the CNN's time-to-accuracy row needs all 60,000.
  cp -u /usr/share/datasets/fashion-mnist/t10k-*.gz "$out/fashion-mnist/"
  rm -f "$out/fashion-mnist/t10k-images-idx3-ubyte.xz"
  /usr/bin/python3 - "$FMNIST_TRAIN" "$out/fashion-mnist" <<'PY'
import gzip, sys
n, dst = int(sys.argv[1]), sys.argv[2]
src = "/usr/share/datasets/fashion-mnist"
for name, head, item in (("train-images-idx3-ubyte.gz", 16, 784), ("train-labels-idx1-ubyte.gz", 8, 1)):
    with gzip.open(f"{src}/{name}") as f:
        d = f.read()
    h = bytearray(d[:head])
    h[4:8] = min(n, int.from_bytes(d[4:8], "big")).to_bytes(4, "big")
    with gzip.open(f"{dst}/{name}", "wb") as f:
        f.write(bytes(h) + d[head:head + n * item])
PY
  rm -f "$out/fashion-mnist/train-images-idx3-ubyte.xz"
else
  # All of it; the image files in xz (22.7 + 3.8 MB against gzip's 26.4 + 4.4: what keeps the call
  # under 64 MiB), recompressed to .gz on the device machine by device.sh.
  cp /usr/share/datasets/fashion-mnist/*-labels-*.gz "$out/fashion-mnist/"
  for f in train-images-idx3-ubyte t10k-images-idx3-ubyte; do
    rm -f "$out/fashion-mnist/$f.gz"
    [ -s "$out/fashion-mnist/$f.xz" ] ||
      zcat "/usr/share/datasets/fashion-mnist/$f.gz" | xz -9 -T2 >"$out/fashion-mnist/$f.xz"
  done
fi
grep -qx '/.device/' .gitignore || echo '/.device/' >>.gitignore
echo "stage: $(ls "$out/debs" | wc -l) debs; sizes:"
du -sh "$out"/* | sed 's/^/  /'
du -sh "$out" | sed 's/^/  total /'
# What a device call carries: the tracked and untracked-not-ignored files plus .device, at most
# 64 MiB in all.
tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null |
       awk '$2 == "total" {s += $1} END {print s + 0}')
dev=$(du -sb "$out" | cut -f1)
echo "stage: working tree $((tree >> 20)) MiB + .device $((dev >> 20)) MiB = $(((tree + dev) >> 20)) MiB (limit 64)"
if [ $((tree + dev)) -gt $((64 << 20)) ]; then
  echo "stage: over the device tool's 64 MiB: stage again with FMNIST_TRAIN=5000 (the bench's CNN and time-to-accuracy rows then train on 5,000 images)" >&2
  exit 1
fi
[ $((tree + dev)) -le $((63 << 20)) ] ||
  echo "stage: warning: less than 1 MiB below the 64 MiB limit (a file added to the tree puts the call over)" >&2
