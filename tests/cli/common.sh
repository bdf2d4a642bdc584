# tests/cli/common.sh — shared set-up of the CLI tests (sourced, not run by ctest): checks the
# environment ctest provides, recreates $SCRATCH, and offers small helpers.
#   DTRAIN   the dtrain binary        BIN      tool dir (make_dataset)
#   MPIEXEC  mpiexec                  SCRATCH  this script's scratch directory
: "${DTRAIN:?set DTRAIN to the dtrain binary}"
: "${BIN:?set BIN to the build bin dir}"
: "${MPIEXEC:?set MPIEXEC}"
: "${SCRATCH:?set SCRATCH}"
export OMP_NUM_THREADS=1
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH"
PY=${DTRAIN_PYTHON:-/usr/bin/python3}  # DTRAIN_PYTHON: one with numpy, h5py (and matplotlib)

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# make_data NAME N [extra make_dataset args]: 1×12×12 images, 4 classes, into $SCRATCH/NAME.h5.
make_data() {
  local name=$1 n=$2
  shift 2
  "$BIN/make_dataset" "$SCRATCH/$name.h5" --n "$n" --c 1 --h 12 --w 12 --classes 4 "$@" >/dev/null
}

# write_job FILE: the tiny CNN job used by the end-to-end tests (data paths given on the command
# line): a copy of tests/common/tiny_cnn.ini, which tests may edit.
write_job() {
  cp "${SRC:?set SRC to the repository root}/tests/common/tiny_cnn.ini" "$1"
}

# json_get FILE KEY: prints results.json's value of KEY.
json_get() {
  "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# predict_into OUT ARGS...: one dtrain predict that must succeed (--threads ${THREADS:-1}).
predict_into() {
  local out=$1
  shift
  timeout 300 "$DTRAIN" predict --threads "${THREADS:-1}" --out "$out" "$@" >"$out.log" 2>&1 ||
    { cat "$out.log"; fail "predict into $out failed: $*"; }
}

# pypi_python VAR GIVEN VENV "IMPORTS" PACKAGES...: sets VAR to a Python that can `import
# IMPORTS`: GIVEN (a test's DTRAIN_*_PYTHON; may be empty), else VENV/bin/python, the venv created
# and PACKAGES installed from PyPI when it lacks them (test-only; pip bounded at 6 minutes, so
# that a slow or absent network never runs into ctest's timeout). Returns 1 with the install log's
# tail printed when none can be had: the caller skips (exit 77) with its reason.
pypi_python() {
  local var=$1 given=$2 venv=$3 imports=$4
  shift 4
  local py=${given:-$venv/bin/python} log=$SCRATCH/pip_${venv//\//_}.log
  if ! "$py" -c "import $imports" 2>/dev/null; then
    py=$venv/bin/python
    # One installer at a time: tests that ctest -j runs together share VENV (test_export.sh and
    # test_export_graphs.sh: /opt/torchexport); the second waits for the first's pip, then finds
    # the packages there instead of installing them over it.
    local lock= rc=0
    { exec {lock}>>"$venv.lock"; } 2>/dev/null && flock -w 400 "$lock" || true
    if ! "$py" -c "import $imports" 2>/dev/null; then
      echo "# installing $* from PyPI into $venv (test-only)"
      if ! { /usr/bin/python3 -m venv "$venv" &&
             timeout 360 "$venv/bin/pip" install -q --timeout 60 "$@"; } >"$log" 2>&1 ||
         ! "$py" -c "import $imports" 2>/dev/null; then
        tail -5 "$log"
        rc=1
      fi
    fi
    [[ -z $lock ]] || exec {lock}>&-
    ((rc == 0)) || return 1
  fi
  printf -v "$var" '%s' "$py"
}

# Resume checks (tests/cli/test_resume.sh, test_graph_models.sh). They use COMMON (an array of
# dtrain options every run gets).
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

# Bad-input checks (tests/cli/test_bad_input.sh, test_graph_models.sh).
cases=0
# expect_error NP "WORD1|WORD2..." ARGS...: dtrain (under mpiexec -n NP, or alone when NP is 0) must
# fail with one error message containing every word. The exit code is left in $last_rc.
expect_error() {
  local np=$1 words=$2
  shift 2
  local log=$SCRATCH/case$cases.log
  cases=$((cases + 1))
  local cmd=("$DTRAIN" "$@")
  [[ $np -gt 0 ]] && cmd=("$MPIEXEC" -n "$np" "${cmd[@]}")
  set +e
  timeout 60 "${cmd[@]}" >"$log" 2>&1
  local rc=$?
  set -e
  last_rc=$rc
  echo "-- exit $rc: ${*: -4}"
  [[ $rc -ne 0 ]] || { cat "$log"; fail "accepted: $*"; }
  [[ $rc -ne 124 ]] || { cat "$log"; fail "hung (timeout): $*"; }
  local msg
  single_error "$log" "$words" "$*"
}

# single_error LOG WORDS [WHAT]: LOG holds exactly one "dtrain: error:" line, and it holds every
# |-separated word of WORDS; sets msg to that line (else prints LOG and fails, naming WHAT).
single_error() {
  local log=$1 words=$2 what=${3:-} n w
  n=$(grep -c "dtrain: error:" "$log" || true)
  [[ $n -eq 1 ]] || { cat "$log"; fail "$n error messages (want 1) for: $what"; }
  msg=$(grep "dtrain: error:" "$log")
  local IFS='|'
  for w in $words; do
    grep -qF -- "$w" <<<"$msg" || { cat "$log"; fail "the message does not mention '$w': $msg"; }
  done
}
