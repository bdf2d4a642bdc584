#!/bin/bash
# tests/cli/test_data_tools.sh — data-tools/convert_idx.py and h5info.py end to end:
# real Fashion-MNIST (when installed) → train.h5/test.h5 with 60000/10000 samples; a small IDX pair
# written here → a schema file; refusal to overwrite; bad IDX inputs fail with a message and leave no
# file behind; h5info.py rejects broken files (also those written by the C++ make_dataset tool).
# Environment (set by CTest; defaults for a manual run): SRC (repo root), BIN (tool dir), SCRATCH.
set -euo pipefail

SRC=${SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
SCRATCH=${SCRATCH:-$(mktemp -d)}
BIN=${BIN:-}
PY=${DTRAIN_PYTHON:-/usr/bin/python3}  # DTRAIN_PYTHON: one with numpy, h5py (and matplotlib)
CONVERT="$PY $SRC/data-tools/convert_idx.py"
H5INFO="$PY $SRC/data-tools/h5info.py"
FASHION=/usr/share/datasets/fashion-mnist

fail() { echo "test_data_tools: FAIL: $*" >&2; exit 1; }
note() { echo "test_data_tools: $*"; }
# expect_fail NEEDLE CMD... : CMD must exit non-zero and print NEEDLE on stderr.
expect_fail() {
  local needle=$1; shift
  local rc=0
  "$@" >"$SCRATCH/out.txt" 2>"$SCRATCH/err.txt" || rc=$?
  [ "$rc" -ne 0 ] || fail "expected failure, got exit 0: $*"
  grep -qF -- "$needle" "$SCRATCH/err.txt" || fail "stderr lacks '$needle' for: $* (stderr: $(cat "$SCRATCH/err.txt"))"
}

rm -rf "$SCRATCH"
mkdir -p "$SCRATCH"

$CONVERT --help >/dev/null || fail "convert_idx.py --help"
$H5INFO --help >/dev/null || fail "h5info.py --help"

# ---- a small IDX pair written here: 50 images 4×5 (gzipped), 50 labels in 0..2 -------------------
$PY - "$SCRATCH" <<'EOF'
import gzip, struct, sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(0)
images = rng.integers(0, 256, size=(50, 4, 5), dtype=np.uint8)
labels = (np.arange(50) % 3).astype(np.uint8)
def idx(arr):
    return bytes([0, 0, 0x08, arr.ndim]) + b"".join(struct.pack(">I", n) for n in arr.shape) + arr.tobytes()
with gzip.open(f"{d}/img.gz", "wb") as f: f.write(idx(images))
open(f"{d}/lab", "wb").write(idx(labels))
open(f"{d}/lab49", "wb").write(idx(labels[:49]))
open(f"{d}/badmagic", "wb").write(b"\x01\x02" + idx(images)[2:])
open(f"{d}/short", "wb").write(idx(images)[:-7])
open(f"{d}/badlabel", "wb").write(idx(np.full(50, 7, np.uint8)))
EOF

mkdir -p "$SCRATCH/small"
$CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/lab" --out "$SCRATCH/small/a.h5" --class-names "x,y,z" \
  || fail "convert small IDX"
$H5INFO "$SCRATCH/small/a.h5" >"$SCRATCH/info.txt" || fail "h5info on converted file"
grep -q "samples      50$" "$SCRATCH/info.txt" || fail "small: wrong sample count: $(cat "$SCRATCH/info.txt")"
grep -q "images       50×1×4×5 uint8" "$SCRATCH/info.txt" || fail "small: wrong shape"
grep -q "num_classes  3$" "$SCRATCH/info.txt" || fail "small: wrong num_classes"
grep -Eq "^ +2 z +16 " "$SCRATCH/info.txt" || fail "small: wrong histogram/class names"
# A second split taking mean/std from the first.
$CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/lab" --out "$SCRATCH/small/b.h5" \
  --mean-std-from "$SCRATCH/small/a.h5" || fail "convert with --mean-std-from"
[ "$($H5INFO --no-pixels "$SCRATCH/small/a.h5" | grep 'mean / std')" = "$($H5INFO --no-pixels "$SCRATCH/small/b.h5" | grep 'mean / std')" ] \
  || fail "--mean-std-from did not copy mean/std"

# ---- refusal to overwrite, --force -------------------------------------------------------------------
before=$(md5sum <"$SCRATCH/small/a.h5")
expect_fail "exists; not overwriting" $CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/lab" --out "$SCRATCH/small/a.h5"
[ "$(md5sum <"$SCRATCH/small/a.h5")" = "$before" ] || fail "refused overwrite still changed the file"
$CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/lab" --out "$SCRATCH/small/a.h5" --force >/dev/null \
  || fail "--force did not overwrite"

# ---- bad IDX inputs: non-zero exit, a message, no output and no temporary left behind ---------------
mkdir -p "$SCRATCH/bad"
expect_fail "bad IDX magic number" $CONVERT --images "$SCRATCH/badmagic" --labels "$SCRATCH/lab" --out "$SCRATCH/bad/o.h5"
expect_fail "does not match its header" $CONVERT --images "$SCRATCH/short" --labels "$SCRATCH/lab" --out "$SCRATCH/bad/o.h5"
expect_fail "50 images but" $CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/lab49" --out "$SCRATCH/bad/o.h5"
expect_fail "expected a 3-D image file" $CONVERT --images "$SCRATCH/lab" --labels "$SCRATCH/lab" --out "$SCRATCH/bad/o.h5"
expect_fail "no such file" $CONVERT --images "$SCRATCH/nonexistent" --labels "$SCRATCH/lab" --out "$SCRATCH/bad/o.h5"
expect_fail "3 class names" $CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/badlabel" --out "$SCRATCH/bad/o.h5" --class-names "x,y,z"
[ -z "$(ls -A "$SCRATCH/bad")" ] || fail "failed conversions left files: $(ls -A "$SCRATCH/bad")"

# ---- h5info rejects broken files ---------------------------------------------------------------------
$PY - "$SCRATCH/bad_rank.h5" <<'EOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["images"] = np.zeros((4, 3, 3), np.uint8)
    f["labels"] = np.zeros(4, np.int64)
EOF
expect_fail "dataset \`images\` has rank 3" $H5INFO "$SCRATCH/bad_rank.h5"
echo "not hdf5" >"$SCRATCH/text.h5"
expect_fail "not an HDF5 file" $H5INFO "$SCRATCH/text.h5"
if [ -n "$BIN" ] && [ -x "$BIN/make_dataset" ]; then
  "$BIN/make_dataset" "$SCRATCH/synth.h5" --n 40 --c 3 --h 4 --w 4 --classes 5 >/dev/null || fail "make_dataset"
  $H5INFO "$SCRATCH/synth.h5" >/dev/null || fail "h5info rejects a valid make_dataset file"
  for kind in label-out-of-range label-negative nan-image inf-image label-huge count-mismatch images-int16 labels-float std-zero; do
    "$BIN/make_dataset" "$SCRATCH/$kind.h5" --n 40 --c 3 --h 4 --w 4 --classes 5 --corrupt "$kind" >/dev/null \
      || fail "make_dataset --corrupt $kind"
    expect_fail "error:" $H5INFO "$SCRATCH/$kind.h5"
  done
else
  note "BIN/make_dataset not built; skipping the C++ writer cross-check"
fi

# ---- the real Fashion-MNIST --------------------------------------------------------------------------
if [ -d "$FASHION" ]; then
  $CONVERT --fashion-mnist "$FASHION" --out-dir "$SCRATCH/fm" >/dev/null || fail "convert Fashion-MNIST"
  $H5INFO "$SCRATCH/fm/train.h5" "$SCRATCH/fm/test.h5" >"$SCRATCH/fm.txt" || fail "h5info Fashion-MNIST"
  grep -q "samples      60000$" "$SCRATCH/fm.txt" || fail "train.h5 does not hold 60000 samples"
  grep -q "samples      10000$" "$SCRATCH/fm.txt" || fail "test.h5 does not hold 10000 samples"
  grep -q "images       60000×1×28×28 uint8" "$SCRATCH/fm.txt" || fail "train.h5 shape"
  grep -q "Ankle boot" "$SCRATCH/fm.txt" || fail "class names missing"
  [ "$(grep -c 'mean / std   \[0.286' "$SCRATCH/fm.txt")" = 2 ] || fail "train mean/std not on both splits: $(grep 'mean' "$SCRATCH/fm.txt")"
  expect_fail "exists; not overwriting" $CONVERT --fashion-mnist "$FASHION" --out-dir "$SCRATCH/fm"
else
  note "$FASHION not installed; skipping the real-data conversion"
fi

note "PASS"
