#!/usr/bin/env bash
# tests/cli/test_odd_filesystems.sh — file systems as HPC sites mount them, and a file another
# process holds locked:
#   1. under LD_PRELOAD=odd_filesystem.so (every flock() fails with ENOLCK, as on NFS without
#      lockd; fsync of a directory fails with EINVAL, as on some FUSE and SMB mounts; no hard
#      links, as on vfat and many SMB and FUSE mounts) h5py cannot
#      open the training file (the control: HDF5 alone fails there), while dtrain trains 2
#      workers, checkpoints (its run dir's fsync refused), resumes, predicts and exports (files
#      published by a rename that replaces nothing, not a hard link), warning once per
#      rank about the locks (src/io/hdf5_locks.hpp) and naming the file system's answer (and the
#      chief once that it cannot lock its run dir against a second run); its
#      checkpoints verify when read back normally;
#      and the data tools convert (convert_idx.py) and check (h5info.py) a file there, warning;
#   2. with locks, no such warning;
#   3. a training file another process has open for writing (h5py mode r+: an exclusive lock):
#      the job fails with one error naming the file and the lock, non-zero exit, no hang.
set -euo pipefail
source "$(dirname "$0")/common.sh"

SHIM=$BIN/odd_filesystem.so
[[ -f $SHIM ]] || fail "no $SHIM (built by tests/CMakeLists.txt)"
make_data train 256 --seed 61
make_data test 64 --seed 62
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5"
        --mode sync --num-ps 0 --epochs 5 --checkpoint-every 4)
WARNING="takes no file locks (flock: No locks available): dtrain opens its HDF5 files"
RUN_DIR_WARNING="takes no file locks (flock: No locks available): dtrain cannot check that no other run"

echo "== 1. no file locks, no directory fsync: h5py fails, dtrain trains, resumes and predicts"
if LD_PRELOAD=$SHIM "$PY" -c 'import h5py, sys; h5py.File(sys.argv[1], "r")' "$SCRATCH/train.h5" \
    >"$SCRATCH/h5py.log" 2>&1; then
  fail "h5py opened the file under $SHIM: the library does not take effect"
fi
grep -q "unable to lock file" "$SCRATCH/h5py.log" || { cat "$SCRATCH/h5py.log"; fail "h5py failed otherwise"; }
d=$SCRATCH/nolocks
LD_PRELOAD=$SHIM run 2 "$d" --max-steps 10
[[ $(grep -c -- "$WARNING" "$d.log") == 2 ]] || { cat "$d.log"; fail "expected one warning per rank"; }
[[ $(grep -c -- "$RUN_DIR_WARNING" "$d.log") == 1 ]] || { cat "$d.log"; fail "expected one run dir warning (the chief's)"; }
LD_PRELOAD=$SHIM run 2 "$d" --max-steps 20 --resume
grep -q "resuming from global_step 10" "$d.log" || { cat "$d.log"; fail "did not resume at 10"; }
LD_PRELOAD=$SHIM predict_into "$SCRATCH/pred.h5" --checkpoint "$d/ckpt-0000000020.h5" \
  --data "$SCRATCH/test.h5"
grep -q -- "$WARNING" "$SCRATCH/pred.h5.log" || { cat "$SCRATCH/pred.h5.log"; fail "predict did not warn"; }
"$PY" - "$d/ckpt-0000000020.h5" "$SCRATCH/pred.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:  # every dataset carries a Fletcher32 checksum
    assert f.attrs["global_step"] == 20
    n = sum(f[k][()].size for k in ("params", "optimizer/m", "model_state"))
with h5py.File(sys.argv[2], "r") as p:
    assert p["predictions"].shape == (64,), p["predictions"].shape
print(f"checkpoint of step 20 verifies ({n} values), 64 predictions")
PY
# dtrain export published by hard link only: "cannot link ... Operation not permitted".
LD_PRELOAD=$SHIM "$DTRAIN" export --checkpoint "$d/ckpt-0000000020.h5" --out "$SCRATCH/m.st" \
  >"$SCRATCH/export.log" 2>&1 || { cat "$SCRATCH/export.log"; fail "export without hard links"; }
[[ -s $SCRATCH/m.st && ! -e $SCRATCH/m.st.tmp ]] || { ls -l "$SCRATCH"; fail "no export, or its temporary left"; }
expect_error 0 "$SCRATCH/m.st|already exists" export --checkpoint "$d/ckpt-0000000020.h5" \
  --out "$SCRATCH/m.st"

echo "== 1b. no file locks: the data tools convert and check a file"
"$PY" - "$SCRATCH" <<'PY'
import gzip, struct, sys
import numpy as np
rng = np.random.default_rng(5)
images, labels = rng.integers(0, 256, (40, 8, 8), np.uint8), rng.integers(0, 3, 40, np.uint8)
with gzip.open(f"{sys.argv[1]}/img.gz", "wb") as f:
    f.write(struct.pack(">IIII", 0x803, 40, 8, 8) + images.tobytes())
with gzip.open(f"{sys.argv[1]}/lbl.gz", "wb") as f:
    f.write(struct.pack(">II", 0x801, 40) + labels.tobytes())
PY
LD_PRELOAD=$SHIM "$PY" "$SRC/data-tools/convert_idx.py" --images "$SCRATCH/img.gz" \
  --labels "$SCRATCH/lbl.gz" --out "$SCRATCH/idx.h5" >"$SCRATCH/convert.log" 2>&1 ||
  { cat "$SCRATCH/convert.log"; fail "convert_idx.py failed without file locks"; }
grep -q "takes no file locks" "$SCRATCH/convert.log" || { cat "$SCRATCH/convert.log"; fail "no warning"; }
LD_PRELOAD=$SHIM "$PY" "$SRC/data-tools/h5info.py" "$SCRATCH/idx.h5" >"$SCRATCH/h5info.log" 2>&1 ||
  { cat "$SCRATCH/h5info.log"; fail "h5info.py failed without file locks"; }
grep -Eq "samples +40$" "$SCRATCH/h5info.log" || { cat "$SCRATCH/h5info.log"; fail "h5info.py did not summarize"; }

echo "== 2. with file locks: no warning"
d=$SCRATCH/locks
run 2 "$d" --max-steps 4
! grep -q "file locks" "$d.log" || { cat "$d.log"; fail "a warning where locks work"; }

echo "== 3. a training file locked by a writer: one error naming it"
trap 'rm -f "$SCRATCH/holding"' EXIT  # the holder below lets go when this file goes
"$PY" - "$SCRATCH/train.h5" "$SCRATCH/holding" <<'PY' &
import os, sys, time, h5py
f = h5py.File(sys.argv[1], "r+")  # read-write: HDF5 takes an exclusive lock
open(sys.argv[2], "w").close()
while os.path.exists(sys.argv[2]):
    time.sleep(0.05)
f.close()
PY
holder=$!
for _ in $(seq 200); do [[ -f $SCRATCH/holding ]] && break; sleep 0.05; done
[[ -f $SCRATCH/holding ]] || fail "the lock holder did not start"
expect_error 2 "$SCRATCH/train.h5|another process holds a lock on this HDF5 file" "${COMMON[@]}" \
  --run-dir "$SCRATCH/locked" --max-steps 4
rm -f "$SCRATCH/holding"
wait "$holder"
echo "PASS"
