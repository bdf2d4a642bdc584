#!/usr/bin/env bash
# tests/cli/test_resume.sh — bit-exact resume in sync mode: run A trains straight to --max-steps 40
# (mid-epoch); run B stops at --max-steps 17 (mid-epoch, after an epoch boundary) and continues with
# `--resume --max-steps 40` in the same run dir. The final checkpoints' /params, /optimizer/m (and
# /optimizer/v) and /model_state (every worker's batchnorm statistics) must be bit-identical; the
# model has batchnorm and dropout, so data order, dropout masks and running statistics must all be
# restored. Done with 2 workers (momentum) and with 1 worker (Adam, warm-up + cosine of fixed
# length). Then a checkpoint of another model, and one of another mode, are refused by --resume.
set -euo pipefail
source "$(dirname "$0")/common.sh"

make_data train 512 --seed 21 --template-seed 9
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --epochs 3 --mode sync --num-ps 0)

# run NP DIR ARGS...: one dtrain run that must succeed.
run() {
  local np=$1 dir=$2
  shift 2
  timeout 120 "$MPIEXEC" -n "$np" "$DTRAIN" "${COMMON[@]}" --run-dir "$dir" "$@" >>"$dir.log" 2>&1 ||
    { cat "$dir.log"; fail "run into $dir failed: $*"; }
}

# compare DIR_A DIR_B STEP: the checkpoints of STEP in both dirs hold identical arrays.
compare() {
  "$PY" - "$1" "$2" "$3" <<'PY'
import sys, h5py, numpy as np
a_dir, b_dir, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
name = f"ckpt-{step:010d}.h5"
with h5py.File(f"{a_dir}/{name}", "r") as a, h5py.File(f"{b_dir}/{name}", "r") as b:
    assert a.attrs["global_step"] == b.attrs["global_step"] == step
    for k in ["params", "optimizer/m", "optimizer/v", "model_state"]:
        x, y = a[k][()], b[k][()]
        if k in ("params", "optimizer/m", "model_state"):
            assert x.size > 0, f"{k} is empty"
        if not np.array_equal(x, y):
            diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
            raise SystemExit(f"{name}: /{k} differs between {a_dir} and {b_dir}: "
                             f"{int((diff > 0).sum())} of {x.size} values, max |diff| {diff.max():.3g}")
    for k in ["epoch", "step_in_epoch", "num_workers"]:
        assert a.attrs[k] == b.attrs[k], (k, a.attrs[k], b.attrs[k])
    print(f"{name}: params, optimizer state and model state bit-identical "
          f"(epoch {a.attrs['epoch']}, step_in_epoch {a.attrs['step_in_epoch']})")
PY
}

# check_resume NP TAG ARGS...: straight run vs. stop at 17 + resume to 40.
check_resume() {
  local np=$1 tag=$2
  shift 2
  local a=$SCRATCH/$tag-straight b=$SCRATCH/$tag-resumed
  run "$np" "$a" --max-steps 40 "$@"
  run "$np" "$b" --max-steps 17 "$@"
  [[ -f $b/ckpt-0000000017.h5 ]] || fail "$b: no checkpoint at step 17"
  [[ ! -f $b/ckpt-0000000040.h5 ]] || fail "$b: the first part ran past --max-steps"
  run "$np" "$b" --max-steps 40 --resume "$@"
  grep -q "resuming from global_step 17" "$b.log" || fail "$b.log: the second part did not resume at 17"
  compare "$a" "$b" 40
}

echo "== 2 workers, momentum"
check_resume 2 w2
echo "== 1 worker, Adam with warm-up and a cosine of fixed length"
check_resume 1 w1 --optimizer adam --lr 0.003 --warmup-steps 5 --lr-schedule cosine --lr-decay-steps 40

echo "== a corrupt newest checkpoint: --resume falls back to the previous one, still bit-exact"
c=$SCRATCH/w2-corrupt
run 2 "$c" --max-steps 25 --checkpoint-every 10
[[ -f $c/ckpt-0000000020.h5 && -f $c/ckpt-0000000025.h5 ]] || fail "$c: missing checkpoints: $(ls "$c")"
# Flip bytes in the middle of /params' data (found with h5py), which Fletcher32 must catch.
"$PY" - "$c/ckpt-0000000025.h5" <<'PY'
import sys, h5py
path = sys.argv[1]
with h5py.File(path, "r") as f:
    d = f["params"]
    assert d.fletcher32, "params has no checksum"
    info = d.id.get_chunk_info(0)
    at, size = info.byte_offset, info.size
with open(path, "r+b") as f:
    f.seek(at + size // 2)
    b = bytearray(f.read(4))
    f.seek(at + size // 2)
    f.write(bytes(x ^ 0x5A for x in b))
PY
run 2 "$c" --max-steps 40 --resume
grep -q "CORRUPT CHECKPOINT SKIPPED.*ckpt-0000000025.h5" "$c.log" || { cat "$c.log"; fail "no warning naming the corrupt checkpoint"; }
grep -q "resuming from global_step 20" "$c.log" || { cat "$c.log"; fail "did not fall back to step 20"; }
compare "$SCRATCH/w2-straight" "$c" 40

# refused NAME NP ARGS...: a --resume run into w2-resumed that must fail naming `expect`.
refused() {
  local expect=$1 np=$2
  shift 2
  set +e
  timeout 60 "$MPIEXEC" -n "$np" "$DTRAIN" --train-data "$SCRATCH/train.h5" --epochs 3 \
    --run-dir "$SCRATCH/w2-resumed" --resume --max-steps 50 "$@" >"$SCRATCH/refused.log" 2>&1
  local rc=$?
  set -e
  [[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$SCRATCH/refused.log"; fail "resume with $* : exit $rc"; }
  grep -q -- "$expect" "$SCRATCH/refused.log" || { cat "$SCRATCH/refused.log"; fail "no '$expect' in the refusal"; }
  grep -q "ckpt-0000000040.h5" "$SCRATCH/refused.log" || { cat "$SCRATCH/refused.log"; fail "the refusal does not name the checkpoint"; }
}

echo "== a checkpoint of another model is refused"
sed 's/^layer = dense units=24$/layer = dense units=20/' "$SCRATCH/job.ini" >"$SCRATCH/other_model.ini"
! cmp -s "$SCRATCH/job.ini" "$SCRATCH/other_model.ini" || fail "the other model's job file is unchanged"
refused "another model" 2 --config "$SCRATCH/other_model.ini" --mode sync --num-ps 0
echo "== a checkpoint of another mode is refused"
refused "mode" 3 --config "$SCRATCH/job.ini" --mode async --num-ps 1
[[ ! -f $SCRATCH/w2-resumed/ckpt-0000000050.h5 ]] || fail "a refused run wrote a checkpoint"
echo "== after falling back past a corrupt checkpoint, a refusal names the checkpoint it read"
mkdir -p "$SCRATCH/fallback"
cp "$SCRATCH/w2-resumed/ckpt-0000000017.h5" "$SCRATCH/w2-resumed/ckpt-0000000040.h5" "$SCRATCH/fallback/"
printf 'garbage' >"$SCRATCH/fallback/ckpt-0000000045.h5"
set +e
timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" --config "$SCRATCH/other_model.ini" --train-data "$SCRATCH/train.h5" \
  --mode sync --num-ps 0 --run-dir "$SCRATCH/fallback" --resume >"$SCRATCH/fallback.log" 2>&1
rc=$?
set -e
[[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$SCRATCH/fallback.log"; fail "fallback + other model: exit $rc"; }
msg=$(grep "dtrain: error:" "$SCRATCH/fallback.log") || { cat "$SCRATCH/fallback.log"; fail "no error message"; }
grep -q "another model" <<<"$msg" || fail "not refused as another model: $msg"
grep -q "ckpt-0000000040.h5" <<<"$msg" || fail "the refusal does not name the checkpoint that was read: $msg"
echo "PASS"
