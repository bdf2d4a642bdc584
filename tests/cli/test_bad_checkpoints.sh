#!/usr/bin/env bash
# tests/cli/test_bad_checkpoints.sh — --resume over bad checkpoints (sync, 2 workers; checkpoints of
# another model or mode are refused in test_resume.sh). Checkpoints at steps 10, 20, 30, then:
#   1. a newer format_version in the newest (h5py edits the attribute): loud warning naming the file
#      and "newer", resume from 20.
#   2. the newest truncated to half its size: warning naming it, resume from the previous one.
#   3. an HDF5 file that is not a checkpoint (a dataset) named as the newest: warning "not a dtrain
#      checkpoint", resume from the previous one.
#   4. a higher-numbered ckpt-*.h5.tmp (a crashed write) is ignored without a warning.
#   5. every checkpoint corrupt: --resume refuses (exit 2, one message naming the run dir) instead of
#      starting over, and leaves every file byte for byte as it was.
#   6. the only checkpoint has a newer format version: refused the same way, naming "newer" in the
#      warning.
#   7. checksummed files whose parts disagree (an /optimizer/v of 5 values, a negative epoch) are
#      skipped like corrupt ones; the resumed run moves each aside to <name>.corrupt, untouched,
#      and its own checkpoints of those steps do not replace them.
#   8. a file of a later step that does not verify neither takes a --keep-checkpoints slot nor
#      makes retention delete the good ones (with --keep-checkpoints 1 the run used to keep only
#      it); set aside as <name>.corrupt, and a second --resume continues from the new newest.
#   9. what Fletcher32 does not cover: an attribute edited to a value that is possible on its own
#      (global_step 30 -> 26) fails the metadata CRC-32; one flipped bit in /params' dataspace
#      (its size past its maximum: HDF5 1.10 read it, and dtrain died of std::bad_alloc) is named;
#      a checkpoint copied under another step's name is refused by its name. Each is skipped;
#      export of the flipped file exits 2 naming it.
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"
make_fault_data
ARGS=("${FX[@]}" --mode sync --num-ps 0 --checkpoint-every 10 --keep-checkpoints 5)

fresh() {  # fresh DIR: a run with checkpoints at 10, 20, 30
  rm -rf "$1"
  timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" "${ARGS[@]}" --run-dir "$1" --max-steps 30 >"$1.log" 2>&1 ||
    { cat "$1.log"; fail "first run failed"; }
  [[ -f $1/ckpt-0000000030.h5 && -f $1/ckpt-0000000020.h5 ]] || fail "missing checkpoints in $1"
}
resume_expect() {  # resume_expect DIR STEP [WARNING-REGEX]
  local dir=$1 step=$2 warn=${3:-}
  timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" "${ARGS[@]}" --run-dir "$dir" --resume --max-steps 40 \
    >"$dir.resume.log" 2>&1 || { cat "$dir.resume.log"; fail "--resume failed in $dir"; }
  grep -q "resuming from global_step $step," "$dir.resume.log" || { cat "$dir.resume.log"; fail "did not resume from $step"; }
  if [[ -n $warn ]]; then
    grep -Eq "$warn" "$dir.resume.log" || { cat "$dir.resume.log"; fail "no warning matching '$warn'"; }
    grep -E "$warn" "$dir.resume.log" | head -1 | cut -c1-200
  else
    ! grep -q "CORRUPT" "$dir.resume.log" || { cat "$dir.resume.log"; fail "unexpected warning"; }
  fi
}
set_version() {
  "$PY" -c 'import sys,h5py; f=h5py.File(sys.argv[1],"r+"); f.attrs["format_version"]=99; f.close()' "$1"
}

echo "== newer format version"
d=$SCRATCH/newer; fresh "$d"
set_version "$d/ckpt-0000000030.h5"
resume_expect "$d" 20 "CORRUPT CHECKPOINT SKIPPED.*ckpt-0000000030.h5.*format version 99 is newer"

echo "== truncated"
d=$SCRATCH/trunc; fresh "$d"
f=$d/ckpt-0000000030.h5
truncate -s $(($(stat -c %s "$f") / 2)) "$f"
resume_expect "$d" 20 "CORRUPT CHECKPOINT SKIPPED.*ckpt-0000000030.h5"

echo "== not a checkpoint"
d=$SCRATCH/notckpt; fresh "$d"
cp "$SCRATCH/fx.h5" "$d/ckpt-0000000099.h5"
resume_expect "$d" 30 "CORRUPT CHECKPOINT SKIPPED.*ckpt-0000000099.h5.*not a dtrain checkpoint"

echo "== a partial .tmp is ignored"
d=$SCRATCH/tmpfile; fresh "$d"
head -c 5000 "$d/ckpt-0000000030.h5" >"$d/ckpt-0000000035.h5.tmp"
resume_expect "$d" 30

echo "== every checkpoint corrupt: refused, nothing touched"
d=$SCRATCH/allbad; fresh "$d"
for f in "$d"/ckpt-*.h5; do printf 'garbage' >"$f"; done
before=$(cd "$d" && md5sum * | sort)
set +e
timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" "${ARGS[@]}" --run-dir "$d" --resume --max-steps 40 >"$d.resume.log" 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] || { cat "$d.resume.log"; fail "all corrupt: exit $rc, want 2"; }
[[ $(grep -c "dtrain: error:" "$d.resume.log") -eq 1 ]] || { cat "$d.resume.log"; fail "want one error"; }
grep "dtrain: error:" "$d.resume.log" | grep -q "none of the 3 checkpoints in '$d' verifies" ||
  { cat "$d.resume.log"; fail "the refusal does not name the run dir"; }
[[ $(grep -c "CORRUPT CHECKPOINT SKIPPED" "$d.resume.log") -eq 3 ]] || fail "want a warning per checkpoint"
after=$(cd "$d" && md5sum * | sort)
[[ $before == "$after" ]] || fail "the refused resume changed the run dir"

echo "== the only checkpoint is of a newer format: refused"
d=$SCRATCH/onlynewer; rm -rf "$d"
timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" "${ARGS[@]}" --run-dir "$d" --max-steps 10 >"$d.log" 2>&1 || fail "run failed"
set_version "$d/ckpt-0000000010.h5"
set +e
timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" "${ARGS[@]}" --run-dir "$d" --resume --max-steps 20 >"$d.resume.log" 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] || { cat "$d.resume.log"; fail "newer only: exit $rc, want 2"; }
grep -q "format version 99 is newer" "$d.resume.log" || { cat "$d.resume.log"; fail "no 'newer' reason"; }
[[ ! -f $d/ckpt-0000000020.h5 ]] || fail "a refused resume wrote a checkpoint"
echo "== parts that disagree: skipped, set aside, not replaced"
d=$SCRATCH/disagree; fresh "$d"
"$PY" - "$d" <<'PY'
import sys, h5py, numpy as np
with h5py.File(f"{sys.argv[1]}/ckpt-0000000030.h5", "r+") as f:
    del f["optimizer/v"]
    f.create_dataset("optimizer/v", data=np.ones(5, np.float32), fletcher32=True, chunks=True)
with h5py.File(f"{sys.argv[1]}/ckpt-0000000020.h5", "r+") as f:
    f.attrs["epoch"] = np.int64(-1)
PY
cp "$d/ckpt-0000000030.h5" "$SCRATCH/bad30.h5" && cp "$d/ckpt-0000000020.h5" "$SCRATCH/bad20.h5"
resume_expect "$d" 10 "CORRUPT CHECKPOINT SKIPPED.*ckpt-0000000030.h5.*optimizer/v holds 5 values for [0-9]+ parameters"
grep -q "CORRUPT CHECKPOINT SKIPPED.*ckpt-0000000020.h5.*impossible position.*epoch -1" "$d.resume.log" ||
  { cat "$d.resume.log"; fail "the negative epoch was not named"; }
for step in 20 30; do
  cmp -s "$d/ckpt-00000000$step.h5.corrupt" "$SCRATCH/bad$step.h5" ||
    { ls -l "$d"; fail "ckpt-$step was not set aside unchanged"; }
  grep -q "ckpt-00000000$step.h5 does not verify: moved to .*ckpt-00000000$step.h5.corrupt" \
    "$d.resume.log" || { cat "$d.resume.log"; fail "no word of setting ckpt-$step aside"; }
done
verify_ckpts "$d" || fail "a checkpoint the resumed run wrote does not verify"
[[ $(newest_step "$d") == 40 ]] || { ls "$d"; fail "the resumed run did not reach 40"; }

echo "== a later file that does not verify takes no --keep-checkpoints slot"
d=$SCRATCH/keepone; fresh "$d"
cp "$SCRATCH/fx.h5" "$d/ckpt-0000000099.h5"
keep1=("${FX[@]}" --mode sync --num-ps 0 --checkpoint-every 10 --keep-checkpoints 1 --run-dir "$d")
timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" "${keep1[@]}" --resume --max-steps 40 >"$d.resume.log" 2>&1 ||
  { cat "$d.resume.log"; fail "--resume failed"; }
grep -q "resuming from global_step 30," "$d.resume.log" || { cat "$d.resume.log"; fail "not from 30"; }
[[ $(cd "$d" && ls ckpt-*) == $'ckpt-0000000040.h5\nckpt-0000000099.h5.corrupt' ]] ||
  { ls -l "$d"; fail "want the newest good checkpoint and the set-aside file"; }
cmp -s "$d/ckpt-0000000099.h5.corrupt" "$SCRATCH/fx.h5" || fail "the set-aside file changed"
timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" "${keep1[@]}" --resume --max-steps 50 >"$d.again.log" 2>&1 ||
  { cat "$d.again.log"; fail "the second --resume failed"; }
grep -q "resuming from global_step 40," "$d.again.log" || { cat "$d.again.log"; fail "not from 40"; }
echo "== metadata no Fletcher32 covers: attributes, dataspaces, the name"
d=$SCRATCH/metadata; fresh "$d"
"$PY" -c 'import sys,h5py; f=h5py.File(sys.argv[1],"r+"); f.attrs["global_step"]=26; f.close()' \
  "$d/ckpt-0000000030.h5"
"$PY" - "$d/ckpt-0000000020.h5" <<'PY'
import struct, sys, h5py
p = sys.argv[1]
with h5py.File(p) as f:
    n = f["params"].shape[0]
d = bytearray(open(p, "rb").read())
i = d.find(struct.pack("<QQ", n, n))  # /params' dataspace message: size, then maximum
assert i > 0, "no dataspace message found"
d[i + 5] ^= 0x20  # bit 45 of the size
open(p, "wb").write(d)
PY
cp "$d/ckpt-0000000020.h5" "$SCRATCH/flipped.h5"
cp "$d/ckpt-0000000010.h5" "$d/ckpt-0000000015.h5"
resume_expect "$d" 10 "CORRUPT CHECKPOINT SKIPPED: checkpoint '$d/ckpt-0000000030.h5': its attributes or dataset shapes do not match their CRC-32"
grep -Eq "CORRUPT CHECKPOINT SKIPPED: $d/ckpt-0000000020.h5: dataset \`/params\`: dimension 0 has size [0-9]+, more than its maximum [0-9]+" "$d.resume.log" ||
  { cat "$d.resume.log"; fail "the dataspace past its maximum was not named"; }
grep -q "CORRUPT CHECKPOINT SKIPPED: checkpoint '$d/ckpt-0000000015.h5' holds global_step 10, not the step its name says" \
  "$d.resume.log" || { cat "$d.resume.log"; fail "the misnamed checkpoint was not named"; }
expect_error 0 "$SCRATCH/flipped.h5|more than its maximum" export --checkpoint "$SCRATCH/flipped.h5" \
  --format safetensors --out "$SCRATCH/flipped.safetensors"
[[ $last_rc -eq 2 && ! -e $SCRATCH/flipped.safetensors ]] || fail "export of the flipped file: exit $last_rc"
echo "PASS"
