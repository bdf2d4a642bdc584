# tests/cli/faults_common.sh — helpers of the fault-injection tests (test_faults_*.sh,
# test_bad_checkpoints.sh, test_fuzz_e2e.sh); sourced after common.sh, not run by ctest.
#   start_job LOG ARGS...      starts `mpiexec ... dtrain ARGS` in the background; sets JOB_PID
#   rank_pid R                 pid of world rank R of that job (from /proc/PID/environ)
#   wait_ckpts DIR N [SECS]    waits until DIR holds >= N complete checkpoints
#   wait_job [SECS]            waits for the job; sets JOB_RC (124 when it outlived SECS: then the
#                              job's process table goes to stderr and the job is killed)
#   newest_step DIR            global_step of the newest complete checkpoint (ckpt-*.h5, not .tmp)
#   verify_ckpts DIR           every complete checkpoint reads back fully (Fletcher32 verified by h5py)
#   now                        seconds since the epoch, with fractions
#   first_part MODE NP DIR ... a run to step 20 with checkpoints every 10 steps

now() { date +%s.%N; }

# Learnable data and the tiny CNN (tests/common/tiny_cnn.ini; batchnorm: the model has state too),
# trained for many epochs (the tests stop it) at seed 7, lr 0.01, a log line every 10 steps and the
# default --timeout (tests pass their own).
make_fault_data() {
  [[ -f $SCRATCH/fx.h5 ]] || "$BIN/make_dataset" "$SCRATCH/fx.h5" --n 1024 --c 1 --h 12 --w 12 --classes 4 --seed 5 >/dev/null
  sed -e 's/^epochs = .*/epochs = 1000/' -e 's/^seed = .*/seed = 7/' -e 's/^log-every = .*/log-every = 10/' \
    -e 's/^lr = .*/lr = 0.01/' -e '/^\[faults\]$/,$d' \
    "${SRC:?set SRC to the repository root}/tests/common/tiny_cnn.ini" >"$SCRATCH/fx.ini"
  FX=(--config "$SCRATCH/fx.ini" --train-data "$SCRATCH/fx.h5")
}

start_job() {
  local log=$1
  shift
  "$MPIEXEC" "$@" >"$log" 2>&1 &
  JOB_PID=$!
}

rank_pid() {
  local r=$1 p
  # grep reads the NUL-separated environ itself: no pipe whose writer a grep -q that has found
  # its match can cut off (SIGPIPE), which under pipefail read as "not this rank".
  for p in $(pgrep -P "$JOB_PID"); do
    if grep -qzx "OMPI_COMM_WORLD_RANK=$r" "/proc/$p/environ" 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

wait_ckpts() {
  local dir=$1 n=$2 secs=${3:-60} t0=$SECONDS
  while (($(ls "$dir"/ckpt-*.h5 2>/dev/null | wc -l) < n)); do
    kill -0 "$JOB_PID" 2>/dev/null || fail "the job ended before writing $n checkpoints in $dir"
    ((SECONDS - t0 < secs)) || fail "no $n checkpoints in $dir after $secs s"
    sleep 0.2
  done
}

wait_job() {
  local secs=${1:-60} t0=$SECONDS
  while kill -0 "$JOB_PID" 2>/dev/null; do
    if ((SECONDS - t0 >= secs)); then
      # What each process of the hung job was doing, for the log (ctest --output-on-failure).
      echo "wait_job: the job outlived $secs s; its processes:" >&2
      ps -o pid,ppid,stat,wchan:24,etime,pcpu,args --pid "$JOB_PID" --ppid "$JOB_PID" >&2 || true
      kill -KILL "$JOB_PID" 2>/dev/null
      pkill -KILL -P "$JOB_PID" 2>/dev/null
      wait "$JOB_PID" 2>/dev/null
      JOB_RC=124
      return 0
    fi
    sleep 0.1
  done
  set +e
  wait "$JOB_PID"
  JOB_RC=$?
  set -e
}

newest_step() {
  local f
  f=$(ls "$1"/ckpt-*.h5 2>/dev/null | sort | tail -1)
  [[ -n $f ]] || { echo -1; return; }
  f=${f##*/ckpt-}
  echo $((10#${f%.h5}))
}

verify_ckpts() {
  "$PY" - "$1" <<'PY'
import glob, sys, h5py
files = sorted(glob.glob(sys.argv[1] + "/ckpt-*.h5"))
assert files, "no checkpoint in " + sys.argv[1]
for path in files:
    with h5py.File(path, "r") as f:
        for k in ["params", "optimizer/m", "optimizer/v", "model_state"]:
            assert f[k].fletcher32 or f[k].size == 0, f"{path}: /{k} has no checksum"
            f[k][()]  # raises on a checksum mismatch
        for a in ["format_version", "global_step", "epoch", "step_in_epoch", "mode", "model_signature"]:
            assert a in f.attrs, f"{path}: attribute {a} missing"
print(f"{len(files)} checkpoint(s) verify: {', '.join(p.rsplit('/', 1)[1] for p in files)}")
PY
}

# first_part MODE NP DIR ARGS...: a run into DIR to --max-steps 20 with --checkpoint-every 10, so
# that complete checkpoints exist before the fault a test injects next (log: DIR.log.first).
first_part() {
  local mode=$1 np=$2 dir=$3
  shift 3
  timeout 60 "$MPIEXEC" -n "$np" "$DTRAIN" "${FX[@]}" --mode "$mode" --run-dir "$dir" \
    --checkpoint-every 10 --max-steps 20 "$@" >"$dir.log.first" 2>&1 ||
    { cat "$dir.log.first"; fail "the first part into $dir failed"; }
}

# elapsed T0 T1: seconds between two `now` stamps, as an integer (rounded up).
elapsed() { "$PY" -c "import math,sys; print(math.ceil(float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }

# kill_case MODE NP RANK ROLE ARGS...: SIGKILL world rank RANK (whose role-table row must read ROLE).
# CASE_TAG (optional) tells apart the run dirs of two cases with the same MODE and RANK.
kill_case() {
  local mode=$1 np=$2 rank=$3 role=$4
  shift 4
  local dir=$SCRATCH/$mode-r$rank${CASE_TAG:-} log=$SCRATCH/$mode-r$rank${CASE_TAG:-}.log
  echo "== $mode, $np ranks: SIGKILL rank $rank ($role)"
  start_job "$log" -n "$np" "$DTRAIN" "${FX[@]}" --mode "$mode" --run-dir "$dir" \
    --checkpoint-every 8 --keep-checkpoints 3 --timeout 60 "$@"
  wait_ckpts "$dir" 2 60
  local pid t0 t1
  pid=$(rank_pid "$rank") || fail "rank $rank not found among the children of mpiexec"
  t0=$(now)
  kill -KILL "$pid"
  wait_job 60
  t1=$(now)
  local took
  took=$(elapsed "$t0" "$t1")
  echo "   job ended ${took} s after the kill, exit $JOB_RC"
  [[ $JOB_RC -ne 124 ]] || { cat "$log"; fail "the job did not end within 60 s of the kill"; }
  ((took <= 30)) || { cat "$log"; fail "the job took $took s (> 30) to end after the kill"; }
  [[ $JOB_RC -ne 0 ]] || { cat "$log"; fail "exit 0 after a rank was killed"; }
  # mpirun's "rank R ... signal 9", or dtrain's own when it saw the death first (--allreduce
  # hierarchical watches its node's workers: "worker W (world rank R, pid P...) died").
  grep -Eq "rank $rank .*signal 9|\(world rank $rank, pid [0-9]+[^)]*\) died" "$log" ||
    { cat "$log"; fail "no message naming the killed rank $rank"; }
  grep -Eq "^# +$rank +[0-9]+ +[^ ]+ +$role " "$log" || { cat "$log"; fail "the role table does not map rank $rank to $role"; }
  verify_ckpts "$dir" || fail "a checkpoint left by the killed job does not verify"
  local step
  step=$(newest_step "$dir")
  ((step > 0)) || fail "no checkpoint in $dir"
  timeout 60 "$MPIEXEC" -n "$np" "$DTRAIN" "${FX[@]}" --mode "$mode" --run-dir "$dir" --resume \
    --max-steps $((step + 10)) "$@" >"$log.resume" 2>&1 || { cat "$log.resume"; fail "--resume after the kill failed"; }
  grep -q "resuming from global_step $step," "$log.resume" || { cat "$log.resume"; fail "did not resume from the newest checkpoint ($step)"; }
  # metrics.csv is one timeline: what the killed job logged past the checkpoint is set aside in
  # metrics-past-<step>.csv (whole), and the resumed job's rows follow the checkpoint's.
  "$PY" - "$dir" "$step" <<'PY' || { cat "$log.resume"; fail "metrics.csv after the resume"; }
import csv, glob, sys
d, step = sys.argv[1], int(sys.argv[2])
rows = list(csv.DictReader(open(f"{d}/metrics.csv")))
for kind in ("train", "test"):
    steps = [int(r["global_step"]) for r in rows if r["kind"] == kind]
    assert steps == sorted(steps) and len(steps) == len(set(steps)), f"{kind} rows {steps}"
past = glob.glob(f"{d}/metrics-past-{step}*.csv")
later = [int(r["global_step"]) for p in past for r in csv.DictReader(open(p))]
assert all(s > step for s in later), later
print(f"   metrics.csv in order; {len(later)} row(s) past step {step} set aside")
PY
  echo "   resumed from global_step $step and finished"
}
