#!/bin/bash
# tests/cli/test_data_tools.sh — data-tools/convert_idx.py and h5info.py end to end:
# real Fashion-MNIST (when installed) → train.h5/test.h5 with 60000/10000 samples; a small IDX pair
# written here → a schema file; refusal to overwrite; bad IDX inputs fail with a message and leave no
# file behind; h5info.py rejects broken files (also those written by the C++ make_dataset tool).
# --classes keeps a subset relabelled in the order given (small file; Fashion-MNIST 5-9), and
# refuses a bad list, an id beyond the classes (a huge range at once) and a class without samples.
# Without --class-names, a corrupt label (max label + 1 classes, more than half empty) is refused.
# Bad outputs and inputs (an output that is a directory or under a file, a negative label, an
# oversized IDX header, a damaged gzip stream, images of 0 pixels a row, a --fashion-mnist set whose
# test split is bad, SIGTERM while writing, a full disk): exit 1 with one line naming the file, no
# traceback, no output or directory left behind. --fashion-mnist refuses --class-names and
# --mean-std-from; images all of one value are refused naming the image file. make_model_jobs.py
# on a full disk replaces and leaves no job file. h5info.py names the file and object for an
# `images` link that leads nowhere, a group and a zero image dimension, and accepts big-endian
# float32 images; a closed stdout (`| head`) is no error about a file; a missing `channels` is
# called missing.
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
# expect_rc RC NEEDLE CMD... : CMD must exit with RC, print NEEDLE on stderr, and no traceback.
expect_rc() {
  local want=$1 needle=$2; shift 2
  local rc=0
  "$@" >"$SCRATCH/out.txt" 2>"$SCRATCH/err.txt" || rc=$?
  [ "$rc" = "$want" ] || fail "exit $rc (want $want): $* (stderr: $(cat "$SCRATCH/err.txt"))"
  grep -qF -- "$needle" "$SCRATCH/err.txt" || fail "stderr lacks '$needle' for: $* (stderr: $(cat "$SCRATCH/err.txt"))"
  ! grep -q Traceback "$SCRATCH/err.txt" || fail "traceback for: $* (stderr: $(cat "$SCRATCH/err.txt"))"
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
neg = (np.arange(50) % 3).astype(np.int8)
neg[4] = -2
open(f"{d}/neglabel", "wb").write(bytes([0, 0, 0x09, 1]) + struct.pack(">I", 50) + neg.tobytes())
open(f"{d}/huge", "wb").write(bytes([0, 0, 0x08, 3]) + struct.pack(">III", 4000000000, 4000000000, 4000000000))
damaged = bytearray(gzip.compress(idx(images)))
damaged[10] = 0xFF  # the first byte of the deflate stream: an invalid block type
open(f"{d}/damaged.gz", "wb").write(damaged)
open(f"{d}/h0", "wb").write(idx(np.zeros((50, 0, 5), np.uint8)))  # 50 images of 0×5 pixels
# Two small Fashion-MNIST-like folders: fm-ok (valid), fm-bad (a test label 12 >= the 10 classes).
import os, shutil
for name, test_labels in (("fm-ok", labels), ("fm-bad", np.full(50, 12, np.uint8))):
    os.makedirs(f"{d}/{name}")
    shutil.copy(f"{d}/img.gz", f"{d}/{name}/train-images-idx3-ubyte.gz")
    shutil.copy(f"{d}/lab", f"{d}/{name}/train-labels-idx1-ubyte")
    shutil.copy(f"{d}/img.gz", f"{d}/{name}/t10k-images-idx3-ubyte.gz")
    open(f"{d}/{name}/t10k-labels-idx1-ubyte", "wb").write(idx(test_labels))
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
# A --mean-std-from file whose mean is not numbers, or whose std is NaN or 0: one error naming that
# file (not the output), no traceback, no output.
$PY - "$SCRATCH/small" <<'EOF'
import shutil, sys, h5py, numpy as np
d = sys.argv[1]
for name, key, value in (("strmean", "mean", "abc"), ("nanstd", "std", np.float32([np.nan])),
                         ("zerostd", "std", np.float32([0]))):
    shutil.copy(f"{d}/a.h5", f"{d}/{name}.h5")
    with h5py.File(f"{d}/{name}.h5", "r+") as f:
        f.attrs[key] = value
EOF
for want in "strmean|attribute \`mean\` has dtype <U3, expected float" \
            "nanstd|attribute \`std\` has a non-finite value" \
            "zerostd|attribute \`std\` = [0.0], expected > 0"; do
  file=$SCRATCH/small/${want%%|*}.h5
  expect_rc 1 "--mean-std-from $file: ${want#*|}" $CONVERT --images "$SCRATCH/img.gz" \
    --labels "$SCRATCH/lab" --out "$SCRATCH/small/c.h5" --mean-std-from "$file"
  [[ ! -e $SCRATCH/small/c.h5 ]] || fail "--mean-std-from ${want%%|*}.h5 wrote c.h5"
done

# ---- --classes: a subset, relabelled in the order given -------------------------------------------
$CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/lab" --out "$SCRATCH/small/sub.h5" \
  --class-names "x,y,z" --classes 2,0 >/dev/null || fail "convert with --classes 2,0"
$PY - "$SCRATCH/img.gz" "$SCRATCH/small/sub.h5" <<'EOF2' || fail "--classes 2,0 wrote the wrong subset"
import gzip, sys, h5py, numpy as np
src = np.frombuffer(gzip.open(sys.argv[1]).read(), np.uint8, offset=16).reshape(50, 1, 4, 5)
label = np.arange(50) % 3
keep = label != 1
with h5py.File(sys.argv[2], "r") as f:
    assert np.array_equal(f["images"][()], src[keep]), "images are not the kept samples in order"
    assert np.array_equal(f["labels"][()], np.where(label[keep] == 2, 0, 1)), f["labels"][()]
    assert f.attrs["num_classes"] == 2 and list(f.attrs["class_names"]) == ["z", "x"]
    mean = src[keep].astype(np.float64).mean() / 255
    assert abs(f.attrs["mean"][0] - mean) < 1e-6, (f.attrs["mean"], mean)
EOF2
mkdir -p "$SCRATCH/badcls"
for bad in "3|asks for class 3 but there are 3 classes (0-2)" "1-x|'1-x' is not a class id or a range" \
           "0,1-2,0|class 0 given twice" "2-1|'2-1' is not a range of ids >= 0"; do
  expect_rc 1 "${bad#*|}" $CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/lab" \
    --out "$SCRATCH/badcls/o.h5" --classes "${bad%%|*}"
done
expect_rc 1 "$SCRATCH/lab: no sample of class 3 (--classes)" $CONVERT --images "$SCRATCH/img.gz" \
  --labels "$SCRATCH/lab" --out "$SCRATCH/badcls/o.h5" --class-names "a,b,c,d" --classes 1,3
[ -z "$(ls -A "$SCRATCH/badcls")" ] || fail "refused --classes left $(ls -A "$SCRATCH/badcls")"
# A huge range is refused at once (it used to be listed and counted pairwise: minutes), and a
# repeat inside overlapping ranges is found without listing them.
rc=0
timeout 20 $CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/lab" --out "$SCRATCH/badcls/o.h5" \
  --classes 0-200000 >"$SCRATCH/out.txt" 2>"$SCRATCH/err.txt" || rc=$?
[ "$rc" = 1 ] && grep -qF "$SCRATCH/lab: --classes asks for class 3 but there are 3 classes (0-2)" "$SCRATCH/err.txt" \
  || fail "--classes 0-200000: exit $rc (124: too slow): $(cat "$SCRATCH/err.txt")"
expect_rc 1 "--classes '0,5-9,2-6': class 5 given twice" $CONVERT --images "$SCRATCH/img.gz" \
  --labels "$SCRATCH/lab" --out "$SCRATCH/badcls/o.h5" --class-names "$(seq -s, 0 9)" --classes 0,5-9,2-6
[ -z "$(ls -A "$SCRATCH/badcls")" ] || fail "refused --classes left $(ls -A "$SCRATCH/badcls")"

# ---- a corrupt label without --class-names: refused as dtrain refuses max label + 1 ---------------
# (labels 0-2 and one 1000000: 1000001 classes, most of them empty; a `num_classes` attribute
# written from it would make dtrain build a 1000001-way model). Labels 0, 2 (one of 3 empty): fine.
$PY - "$SCRATCH" <<'EOF2'
import struct, sys
import numpy as np
d = sys.argv[1]
def idx(arr):
    return bytes([0, 0, 0x0C, arr.ndim]) + b"".join(struct.pack(">I", n) for n in arr.shape) + arr.astype(">i4").tobytes()
corrupt = np.arange(50) % 3
corrupt[7] = 1000000
open(f"{d}/corruptlabel", "wb").write(idx(corrupt))
open(f"{d}/gaplabel", "wb").write(idx(np.arange(50) % 2 * 2))
EOF2
mkdir -p "$SCRATCH/corrupt"
expect_rc 1 "$SCRATCH/corruptlabel: label 1000000 at index 7: max label + 1 = 1000001 classes, of which 999997 have no sample (more than half)" \
  $CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/corruptlabel" --out "$SCRATCH/corrupt/o.h5"
[ -z "$(ls -A "$SCRATCH/corrupt")" ] || fail "a refused corrupt label left $(ls -A "$SCRATCH/corrupt")"
$CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/gaplabel" --out "$SCRATCH/corrupt/gap.h5" >/dev/null \
  || fail "labels 0 and 2 (one of 3 classes empty) refused"
$H5INFO --no-pixels "$SCRATCH/corrupt/gap.h5" >"$SCRATCH/info.txt" || fail "h5info gap.h5"
grep -q "num_classes  3$" "$SCRATCH/info.txt" || fail "labels 0, 2: num_classes is not 3"

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

# ---- bad outputs and inputs: one line naming the file, no traceback, nothing written --------------
mkdir -p "$SCRATCH/bad/dir.h5"
expect_rc 1 "cannot write $SCRATCH/bad/dir.h5: it is a directory" \
  $CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/lab" --out "$SCRATCH/bad/dir.h5" --force
[ -z "$(ls -A "$SCRATCH/bad/dir.h5")" ] && rmdir "$SCRATCH/bad/dir.h5" || fail "wrote into the output directory"
expect_rc 1 "cannot write $SCRATCH/lab/sub/o.h5: $SCRATCH/lab is not a directory" \
  $CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/lab" --out "$SCRATCH/lab/sub/o.h5"
expect_rc 1 "$SCRATCH/neglabel: label -2 at index 4" \
  $CONVERT --images "$SCRATCH/img.gz" --labels "$SCRATCH/neglabel" --out "$SCRATCH/bad/new/o.h5"
expect_rc 1 "$SCRATCH/huge: size 16 bytes does not match its header (dims [4000000000, 4000000000, 4000000000], 1-byte values: expected 64000000000000000000000000016 bytes)" \
  $CONVERT --images "$SCRATCH/huge" --labels "$SCRATCH/lab" --out "$SCRATCH/bad/new/o.h5"
expect_rc 1 "$SCRATCH/damaged.gz: cannot read: Error -3 while decompressing data" \
  $CONVERT --images "$SCRATCH/damaged.gz" --labels "$SCRATCH/lab" --out "$SCRATCH/bad/new/o.h5"
expect_rc 1 "$SCRATCH/h0: images of 0×5 pixels (dims [50, 0, 5]), expected H, W >= 1" \
  $CONVERT --images "$SCRATCH/h0" --labels "$SCRATCH/lab" --out "$SCRATCH/bad/new/o.h5"
[ ! -e "$SCRATCH/bad/new" ] || fail "refused conversions created the output directory"
# --fashion-mnist: a bad test split is found before train.h5 is written; no output dir is created.
expect_rc 1 "$SCRATCH/fm-bad/t10k-labels-idx1-ubyte: labels span [12, 12] but there are 10 class names" \
  $CONVERT --fashion-mnist "$SCRATCH/fm-bad" --out-dir "$SCRATCH/fm-bad-out"
expect_rc 1 "$SCRATCH/nowhere: no train-images-idx3-ubyte[.gz]" \
  $CONVERT --fashion-mnist "$SCRATCH/nowhere" --out-dir "$SCRATCH/fm-bad-out"
[ ! -e "$SCRATCH/fm-bad-out" ] || fail "a refused --fashion-mnist left $(ls -A "$SCRATCH/fm-bad-out")"
expect_rc 1 "cannot write $SCRATCH/lab/train.h5: $SCRATCH/lab is not a directory" \
  $CONVERT --fashion-mnist "$SCRATCH/fm-ok" --out-dir "$SCRATCH/lab"
# SIGTERM while the second split (test.h5) is being checked, train.h5 complete in its temporary:
# exit 143, no traceback, neither split nor a temporary left behind.
mkdir -p "$SCRATCH/fm-term"
rc=0
$PY -B - "$SRC/data-tools" "$SCRATCH/fm-ok" "$SCRATCH/fm-term" 2>"$SCRATCH/err.txt" <<'EOF' || rc=$?
import os, runpy, signal, sys
tools, src, out = sys.argv[1:]
sys.path.insert(0, tools)
import h5info
validate, calls = h5info.validate, []
def validate_then_kill(*args, **kwargs):
    calls.append(args[0])
    if len(calls) == 2:
        temps = sorted(f".{s}.h5.tmp-{os.getpid()}" for s in ("train", "test"))
        assert sorted(os.listdir(out)) == temps, os.listdir(out)
        os.kill(os.getpid(), signal.SIGTERM)
    return validate(*args, **kwargs)
h5info.validate = validate_then_kill
sys.argv = ["convert_idx.py", "--fashion-mnist", src, "--out-dir", out]
runpy.run_path(f"{tools}/convert_idx.py", run_name="__main__")
EOF
[ "$rc" = 143 ] || fail "SIGTERM during --fashion-mnist: exit $rc (want 143): $(cat "$SCRATCH/err.txt")"
! grep -q Traceback "$SCRATCH/err.txt" || fail "SIGTERM printed a traceback: $(cat "$SCRATCH/err.txt")"
[ -z "$(ls -A "$SCRATCH/fm-term")" ] || fail "SIGTERM left $(ls -A "$SCRATCH/fm-term")"
$CONVERT --fashion-mnist "$SCRATCH/fm-ok" --out-dir "$SCRATCH/fm-term" >/dev/null || fail "small --fashion-mnist"
[ "$(ls -A "$SCRATCH/fm-term" | tr '\n' ' ')" = "test.h5 train.h5 " ] || fail "small --fashion-mnist wrote $(ls -A "$SCRATCH/fm-term")"

# A full disk (tests/preload/no_space.cpp: writes into the folder fail with ENOSPC past N bytes),
# one split and --fashion-mnist: one line naming the output, exit 1, no traceback or crash, nothing left.
if [ -n "$BIN" ] && [ -f "$BIN/no_space.so" ]; then
  mkdir -p "$SCRATCH/full"
  for bytes in 0 1000 3000; do  # 0: a disk full before the run (the file's create fails)
    for out in o.h5 fm; do
      if [ "$out" = fm ]; then
        args=(--fashion-mnist "$SCRATCH/fm-ok" --out-dir "$SCRATCH/full/fm") want=$SCRATCH/full/fm/train.h5
      else
        args=(--images "$SCRATCH/img.gz" --labels "$SCRATCH/lab" --out "$SCRATCH/full/o.h5") want=$SCRATCH/full/o.h5
      fi
      rc=0
      LD_PRELOAD=$BIN/no_space.so DTRAIN_TEST_NO_SPACE_MATCH=$SCRATCH/full/ DTRAIN_TEST_NO_SPACE_BYTES=$bytes \
        $CONVERT "${args[@]}" >"$SCRATCH/out.txt" 2>"$SCRATCH/err.txt" || rc=$?
      [ "$rc" = 1 ] || fail "a full disk ($out, $bytes bytes): exit $rc (want 1): $(cat "$SCRATCH/err.txt")"
      [ "$(cat "$SCRATCH/err.txt")" = "convert_idx.py: error: cannot write $want: No space left on device" ] ||
        fail "a full disk ($out, $bytes bytes): not the one line expected: $(cat "$SCRATCH/err.txt")"
      [ -z "$(ls -A "$SCRATCH/full")" ] || fail "a full disk ($out, $bytes bytes) left $(ls -AR "$SCRATCH/full")"
    done
  done
  # make_model_jobs.py (data-tools/outputs.py: temporary names, renamed when all are written):
  # a disk full for one job file fails with one line, replaces no existing job file (--force)
  # and, into a new folder, leaves no file or folder at all (it left an empty vgg16_imagenet.ini).
  MMJ="$PY $SRC/data-tools/make_model_jobs.py"
  $MMJ --out-dir "$SCRATCH/mmj" --width-div 8 >/dev/null || fail "make_model_jobs.py"
  before=$(cd "$SCRATCH/mmj" && md5sum ./*.ini)
  for dir in mmj mmj-new/sub; do
    rc=0
    LD_PRELOAD=$BIN/no_space.so DTRAIN_TEST_NO_SPACE_MATCH=vgg16 \
      $MMJ --out-dir "$SCRATCH/$dir" --force >"$SCRATCH/out.txt" 2>"$SCRATCH/err.txt" || rc=$?
    [ "$rc" = 1 ] && [ "$(cat "$SCRATCH/err.txt")" = \
      "make_model_jobs.py: error: cannot write $SCRATCH/$dir/vgg16_imagenet.ini: No space left on device" ] ||
      fail "make_model_jobs.py on a full disk ($dir): exit $rc, not the one line expected: $(cat "$SCRATCH/err.txt")"
  done
  [ "$(cd "$SCRATCH/mmj" && md5sum ./*.ini)" = "$before" ] || fail "a failed make_model_jobs.py --force replaced job files"
  [ "$(ls -A "$SCRATCH/mmj" | tr '\n' ' ')" = \
    "inception3_imagenet.ini resnet20_cifar.ini resnet50_imagenet.ini vgg16_imagenet.ini " ] ||
    fail "a failed make_model_jobs.py left $(ls -A "$SCRATCH/mmj")"
  [ ! -e "$SCRATCH/mmj-new" ] || fail "a failed make_model_jobs.py left $(ls -AR "$SCRATCH/mmj-new")"
elif [ -n "$BIN" ]; then
  fail "$BIN/no_space.so is missing (ctest sets BIN to the build's tool dir)"
fi
# --fashion-mnist has its own class names and mean/std: --class-names and --mean-std-from are
# refused (exit 2, naming them), not ignored (a file that does not exist was not even noticed).
expect_rc 2 "--fashion-mnist does not take --class-names or --mean-std-from" \
  $CONVERT --fashion-mnist "$SCRATCH/fm-ok" --out-dir "$SCRATCH/fm-opts" --class-names digits --mean-std-from /nonexistent/train.h5
expect_rc 2 "--fashion-mnist does not take --mean-std-from" \
  $CONVERT --fashion-mnist "$SCRATCH/fm-ok" --out-dir "$SCRATCH/fm-opts" --mean-std-from "$SCRATCH/small/a.h5"
expect_rc 2 "--fashion-mnist does not take --class-names" \
  $CONVERT --fashion-mnist "$SCRATCH/fm-ok" --out-dir "$SCRATCH/fm-opts" --class-names digits
[ ! -e "$SCRATCH/fm-opts" ] || fail "a refused --fashion-mnist wrote $(ls -A "$SCRATCH/fm-opts")"
# Images all of one value (std 0, which dtrain cannot normalize by): refused naming the image
# file, before anything is written (it wrote the file, then blamed it: "fails the schema check").
$PY - "$SCRATCH/flat.idx" <<'EOF'
import struct, sys
open(sys.argv[1], "wb").write(bytes([0, 0, 0x08, 3]) + struct.pack(">III", 50, 4, 5) + bytes([7]) * 1000)
EOF
expect_rc 1 "$SCRATCH/flat.idx: every pixel converted has the value 7 (std 0)" \
  $CONVERT --images "$SCRATCH/flat.idx" --labels "$SCRATCH/lab" --out "$SCRATCH/flat/o.h5"
[ ! -e "$SCRATCH/flat" ] || fail "constant images left $(ls -A "$SCRATCH/flat")"
$CONVERT --images "$SCRATCH/flat.idx" --labels "$SCRATCH/lab" --out "$SCRATCH/flat/o.h5" \
  --mean-std-from "$SCRATCH/small/a.h5" >/dev/null || fail "constant images with --mean-std-from refused"

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
# `images` a dangling soft link, an external link to a missing file, a group; a zero H: one line
# naming the file and object, no traceback. Big-endian float32 images are valid (dtrain reads them).
$PY - "$SCRATCH" <<'EOF'
import sys, h5py, numpy as np
d = sys.argv[1]
for name, images in (("dangling", h5py.SoftLink("/nothere")), ("extlink", h5py.ExternalLink("gone.h5", "/images")),
                     ("group", None), ("zero_h", np.zeros((4, 1, 0, 4), np.uint8)),
                     ("f32be", np.arange(64, dtype=">f4").reshape(4, 1, 4, 4))):
    with h5py.File(f"{d}/{name}.h5", "w") as f:
        if images is None:
            f.create_group("images")
        else:
            f["images"] = images
        f["labels"] = np.arange(4) % 2
EOF
expect_rc 1 "$SCRATCH/dangling.h5: error: \`images\` is a soft link to /nothere, which does not resolve" $H5INFO "$SCRATCH/dangling.h5"
expect_rc 1 "$SCRATCH/extlink.h5: error: \`images\` is an external link to gone.h5:/images, which does not resolve" $H5INFO "$SCRATCH/extlink.h5"
expect_rc 1 "$SCRATCH/group.h5: error: \`images\` is a group, expected dataset \`images\`" $H5INFO "$SCRATCH/group.h5"
expect_rc 1 "$SCRATCH/zero_h.h5: error: dataset \`images\` has shape (4, 1, 0, 4), expected C, H, W >= 1" $H5INFO "$SCRATCH/zero_h.h5"
$H5INFO "$SCRATCH/f32be.h5" >"$SCRATCH/info.txt" || fail "h5info rejects big-endian float32 images: $(cat "$SCRATCH/info.txt")"
grep -q "pixels       min 0  max 63" "$SCRATCH/info.txt" || fail "big-endian float32 pixels misread: $(cat "$SCRATCH/info.txt")"
# Labels stored as an HDF5 enum, and a uint64 label above 2^63 - 1: h5info.py refuses them with
# the words dtrain uses (not an integer type; the label's own value, not a wrapped -1).
$PY - "$SCRATCH" <<'EOF'
import sys, h5py, numpy as np
d = sys.argv[1]
for name in ("enum_labels", "u64_labels"):
    with h5py.File(f"{d}/{name}.h5", "w") as f:
        f["images"] = np.zeros((4, 1, 4, 4), np.uint8)
        if name == "enum_labels":
            f.create_dataset("labels", data=np.arange(4, dtype="i1") % 2, dtype=h5py.enum_dtype({"a": 0, "b": 1}, basetype="i1"))
        else:
            f["labels"] = np.array([0, 1, 2**64 - 1, 0], np.uint64)
EOF
for want in "enum_labels.h5|dataset \`labels\` has dtype enum, expected an integer type" \
  "u64_labels.h5|dataset \`labels\` has value 18446744073709551615 at index 2, expected at most 9223372036854775807"; do
  file=${want%%|*} msg=${want#*|}
  expect_rc 1 "$msg" $H5INFO "$SCRATCH/$file"
  rc=0
  "$DTRAIN" --config "$SRC/tests/common/tiny_cnn.ini" --mode sync --num-ps 0 --dry-run \
    --train-data "$SCRATCH/$file" >"$SCRATCH/dry.txt" 2>&1 || rc=$?
  [[ $rc -eq 2 ]] && grep -qF "$msg" "$SCRATCH/dry.txt" || fail "dtrain and h5info.py differ on $file: $(cat "$SCRATCH/dry.txt")"
done
# class_names holding bytes that are not UTF-8 (dtrain reads them as they are), fixed and variable
# length: shown as \xNN, no traceback. A directory: named as one, not "no such file".
$PY - "$SCRATCH" <<'EOF'
import sys, h5py, numpy as np
d = sys.argv[1]
for name in ("names_fixed", "names_vlen"):
    with h5py.File(f"{d}/{name}.h5", "w") as f:
        f["images"] = np.zeros((4, 1, 4, 4), np.uint8)
        f["labels"] = np.arange(4) % 2
        f.attrs["num_classes"] = np.int64(2)
        if name == "names_fixed":
            f.attrs["class_names"] = np.array([b"caf\xe9", b"tea"], dtype="S4")
        else:
            f.attrs.create("class_names", [b"caf\xe9", b"tea"], dtype=h5py.string_dtype("utf-8"))
EOF
for file in names_fixed names_vlen; do
  $H5INFO "$SCRATCH/$file.h5" >"$SCRATCH/info.txt" 2>&1 || fail "h5info $file.h5: $(cat "$SCRATCH/info.txt")"
  grep -qF 'caf\xe9' "$SCRATCH/info.txt" || fail "h5info $file.h5 does not show the name's bytes: $(cat "$SCRATCH/info.txt")"
done
# Output to a reader that has left (`| head`): not a verdict on the (valid) files: exit 0, no error.
rc=0
$H5INFO "$SCRATCH/small/a.h5" "$SCRATCH/corrupt/gap.h5" 2>"$SCRATCH/err.txt" | true || rc=$?
[ "$rc" = 0 ] || fail "h5info into a closed pipe: exit $rc"
[ ! -s "$SCRATCH/err.txt" ] || fail "h5info into a closed pipe blamed a file: $(cat "$SCRATCH/err.txt")"
# Encoded images without the attribute `channels`: said to be missing (not "= None").
$PY - "$SCRATCH/no_channels.h5" <<'EOF2'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    rows = f.create_dataset("images", (2,), dtype=h5py.vlen_dtype(np.uint8))
    rows[0] = rows[1] = np.frombuffer(b"\x89PNG", np.uint8)
    f["image_shapes"] = np.ones((2, 3), np.int64)
    f["labels"] = np.zeros(2, np.int64)
EOF2
expect_rc 1 "$SCRATCH/no_channels.h5: error: encoded images need root attribute \`channels\` (1 or 3), which is missing" \
  $H5INFO "$SCRATCH/no_channels.h5"
mkdir -p "$SCRATCH/adir.h5"
expect_rc 1 "$SCRATCH/adir.h5: error: is a directory, expected an HDF5 file" $H5INFO "$SCRATCH/adir.h5"
expect_rc 2 "--expected-classes must be >= 1" $H5INFO --expected-classes 0 "$SCRATCH/small/a.h5"
expect_rc 2 "--expected-classes must be >= 1" $H5INFO --expected-classes -1 "$SCRATCH/small/a.h5"
if [ -n "$BIN" ] && [ -x "$BIN/make_dataset" ]; then
  "$BIN/make_dataset" "$SCRATCH/synth.h5" --n 40 --c 3 --h 4 --w 4 --classes 5 >/dev/null || fail "make_dataset"
  $H5INFO "$SCRATCH/synth.h5" >/dev/null || fail "h5info rejects a valid make_dataset file"
  for kind in label-out-of-range label-negative nan-image inf-image label-huge count-mismatch images-int16 labels-float std-zero; do
    "$BIN/make_dataset" "$SCRATCH/$kind.h5" --n 40 --c 3 --h 4 --w 4 --classes 5 --corrupt "$kind" >/dev/null \
      || fail "make_dataset --corrupt $kind"
    expect_fail "error:" $H5INFO "$SCRATCH/$kind.h5"
  done
elif [ -n "$BIN" ]; then
  fail "$BIN/make_dataset is missing (ctest sets BIN to the build's tool dir)"
else
  note "BIN unset (run outside ctest); skipping the C++ writer cross-check"
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
  $CONVERT --fashion-mnist "$FASHION" --out-dir "$SCRATCH/fm59" --classes 5-9 >/dev/null ||
    fail "convert Fashion-MNIST --classes 5-9"
  $H5INFO "$SCRATCH/fm59/train.h5" "$SCRATCH/fm59/test.h5" >"$SCRATCH/fm59.txt" || fail "h5info 5-9"
  grep -q "samples      30000$" "$SCRATCH/fm59.txt" || fail "5-9: train.h5 does not hold 30000 samples"
  grep -q "samples      5000$" "$SCRATCH/fm59.txt" || fail "5-9: test.h5 does not hold 5000 samples"
  [ "$(grep -c "num_classes  5$" "$SCRATCH/fm59.txt")" = 2 ] || fail "5-9: num_classes is not 5"
  grep -Eq "^ +0 Sandal +6000 " "$SCRATCH/fm59.txt" || fail "5-9: Sandal is not class 0 of 6000"
  grep -Eq "^ +4 Ankle boot +1000 " "$SCRATCH/fm59.txt" || fail "5-9: Ankle boot is not class 4"
else
  note "PASS, but $FASHION is not installed (dataset-fashion-mnist, .ci/install-deps.sh): the real-data conversion is skipped"
  exit 77
fi

note "PASS"
