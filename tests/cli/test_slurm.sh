#!/usr/bin/env bash
# tests/cli/test_slurm.sh — slurm/train.sbatch on a real (private, single-node) Slurm cluster:
#   0. train.sbatch refuses a missing job file / dataset before launching anything (exit 2, message)
#      and takes synthetic data (job file or --synthetic) without a file;
#   1. an async job (1 ps + 2 workers, launched with srun --mpi=pmix) runs to the end under sbatch and
#      leaves results.json in its deterministic run dir runs/<job name>-<job id>;
#   2. a sync job (2 workers, mpirun) gets `scancel --full --signal=USR1` while it trains: dtrain
#      checkpoints and exits 75, the script requeues the job, Slurm restarts it with
#      SLURM_RESTART_COUNT=1, it resumes from its checkpoint in the same run dir and finishes; its
#      final checkpoint's /params (and optimizer and batchnorm state) are bit-identical to those of an
#      uninterrupted run of the same job.
# Slurm is started by tests/slurm/start-local-slurm.sh in a fresh directory with free ports and
# stopped (only the daemons it started, by pid) on exit. Needs root and the packages slurmctld slurmd
# slurm-client munge (.ci/install-deps.sh installs them); without them the test prints
# "SKIPPED: <reason>" and exits 77, which ctest reports as skipped (SKIP_RETURN_CODE).
# Environment (from ctest): DTRAIN, BIN, SRC, MPIEXEC, SCRATCH. Optional: SLURM_TEST_KEEP=1 leaves
# the Slurm logs in $SCRATCH/slurm-logs even when the test passes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
: "${SRC:?set SRC to the repository root}"

skip() {
  echo "SKIPPED: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "the private Slurm cluster needs root (SlurmUser=root); run as root to test slurm/"
for b in slurmctld slurmd munged sbatch scontrol scancel squeue; do
  command -v "$b" >/dev/null 2>&1 ||
    skip "'$b' not installed: apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge (bash .ci/install-deps.sh does)"
done

T0=$(date +%s)
export SLURM_LOCAL_DIR
SLURM_LOCAL_DIR=$(mktemp -d /tmp/dtrain-slurm.XXXXXX)
export SLURM_LOCAL_CTLD_PORT=auto SLURM_LOCAL_CPUS=8
export SLURM_CONF=$SLURM_LOCAL_DIR/etc/slurm.conf
cleanup() {
  local rc=$?
  bash "$SRC/tests/slurm/stop-local-slurm.sh" || true
  if [ "$rc" != 0 ] || [ "${SLURM_TEST_KEEP:-0}" = 1 ]; then
    mkdir -p "$SCRATCH/slurm-logs"
    cp -r "$SLURM_LOCAL_DIR/log" "$SLURM_LOCAL_DIR/etc" "$SCRATCH/slurm-logs/" 2>/dev/null || true
    echo "Slurm logs: $SCRATCH/slurm-logs"
  fi
  rm -rf "$SLURM_LOCAL_DIR"
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # a ctest timeout or ^C still runs cleanup (stops the daemons)

echo "== 0. missing job file or dataset: refused before launching"
expect_refusal() {  # expect_refusal WHAT ARGS...: train.sbatch run directly must exit 2 naming WHAT
  local what=$1 rc=0
  shift
  (cd "$SCRATCH" && DTRAIN=$DTRAIN bash "$SRC/slurm/train.sbatch" "$@") >"$SCRATCH/refused.log" 2>&1 || rc=$?
  [ "$rc" = 2 ] && grep -q "error:.*$what" "$SCRATCH/refused.log" ||
    { cat "$SCRATCH/refused.log"; fail "train.sbatch $*: expected exit 2 naming '$what', got $rc"; }
  ! grep -q "^# train.sbatch: .*ranks" "$SCRATCH/refused.log" || fail "train.sbatch $*: launched anyway"
}
make_data train 8192 --seed 5
make_data test 512 --seed 5
write_job "$SCRATCH/job.ini"
printf '\n[data]\ntrain-data = %s\ntest-data = %s\n' "$SCRATCH/train.h5" "$SCRATCH/test.h5" >>"$SCRATCH/job.ini"
sed "s|$SCRATCH/train.h5|$SCRATCH/nope.h5|" "$SCRATCH/job.ini" >"$SCRATCH/bad_data.ini"
expect_refusal "job file 'no_such.ini' does not exist" no_such.ini
expect_refusal "no job file"
expect_refusal "training set '$SCRATCH/nope.h5'" bad_data.ini
expect_refusal "training set 'missing.h5'" job.ini --train-data missing.h5
expect_refusal "test set 'gone.h5'" job.ini --test-data=gone.h5
# Synthetic data needs no file (the ImageNet jobs set synthetic =): a job file's or --synthetic.
# Both checked with --dry-run (run directly, 1 rank): it was refused as "no training set".
sed '/^train-data\|^test-data/d' "$SCRATCH/job.ini" >"$SCRATCH/synth.ini"
printf 'synthetic = 1x12x12:4\nsynthetic-samples = 64\n' >>"$SCRATCH/synth.ini"
for a in "synth.ini" "bad_data.ini --synthetic 1x12x12:4 --synthetic-samples 64"; do
  read -r -a words <<<"$a"
  (cd "$SCRATCH" &&
    NP=1 MODE=sync NUM_PS=0 DTRAIN=$DTRAIN bash "$SRC/slurm/train.sbatch" "${words[@]}" --dry-run) \
    >"$SCRATCH/synth.log" 2>&1 || { cat "$SCRATCH/synth.log"; fail "train.sbatch $a refused"; }
  grep -q "the job is valid" "$SCRATCH/synth.log" || { cat "$SCRATCH/synth.log"; fail "$a: no dry run"; }
done
expect_refusal "training set 'missing.h5'" synth.ini --train-data missing.h5

echo "== starting a private Slurm in $SLURM_LOCAL_DIR"
rc=0
bash "$SRC/tests/slurm/start-local-slurm.sh" >"$SCRATCH/start.log" 2>&1 || rc=$?
cat "$SCRATCH/start.log"
[ "$rc" != 77 ] || skip "cannot start Slurm here: $(grep 'CANNOT RUN' "$SCRATCH/start.log")"
[ "$rc" = 0 ] || fail "start-local-slurm.sh failed (exit $rc)"

# submit NAME [sbatch options --] train.sbatch ARGS...: prints the job id.
submit() {
  local name=$1
  shift
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  # Each job's Open MPI session directories apart (a short path: they hold Unix sockets): two
  # mpiruns starting at once under one base race to create its per-host directory ("mkdir ...
  # File exists", orte_init fails).
  local tmp=${OMPI_MCA_orte_tmpdir_base:-/tmp/dtrain-ompi/slurm}-$name
  mkdir -p "$tmp"
  DTRAIN=$DTRAIN OMPI_MCA_orte_tmpdir_base=$tmp sbatch --parsable -J "$name" -D "$SCRATCH" \
    -o "$SCRATCH/$name-%j.out" "${opts[@]}" "$SRC/slurm/train.sbatch" "$@"
}
state() { scontrol show job "$1" 2>/dev/null | grep -oP 'JobState=\K\S+' || echo GONE; }
# wait_job ID SECONDS: wait for a final state, print it.
wait_job() {
  local st i
  for ((i = 0; i < $2 * 5; i++)); do
    st=$(state "$1")
    case $st in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED | GONE)
        echo "$st"
        return 0
        ;;
    esac
    sleep 0.2
  done
  echo "STILL_$st"
}
show_out() { cat "$SCRATCH/$1-$2.out" 2>/dev/null || echo "(no output file)"; }

echo "== 1. async job (1 ps + 2 workers, LAUNCHER=srun) to completion"
a=$(LAUNCHER=srun submit async --ntasks=3 -- job.ini --mode async --num-ps 1 --epochs 1)
st=$(wait_job "$a" 90)
[ "$st" = COMPLETED ] || { show_out async "$a"; fail "async job $a ended $st"; }
grep -q "via srun" "$SCRATCH/async-$a.out" || { show_out async "$a"; fail "async job did not use srun"; }
r=$SCRATCH/runs/async-$a/results.json
[ -f "$r" ] || { show_out async "$a"; fail "no $r"; }
"$PY" - "$r" <<'PY' || { show_out async "$a"; fail "results.json of the async job"; }
import json, sys
r = json.load(open(sys.argv[1]))
want = {"mode": "async", "num_ps": 1, "num_workers": 2, "world_size": 3, "global_step": 512,
        "epochs_completed": 1}
bad = {k: r.get(k) for k, v in want.items() if r.get(k) != v}
assert not bad, f"unexpected values {bad}, wanted {want}"
for k in ["wall_seconds", "train_seconds", "samples_per_sec", "global_batch_size", "ps_busy_fraction",
          "staleness_mean"]:
    assert k in r, f"no {k}"
assert r["test_accuracy"] > 0.9, f"test accuracy {r['test_accuracy']}"
print(f"results.json ok: test accuracy {r['test_accuracy']:.3f}, {r['samples_per_sec']:.0f} samples/s")
PY

echo "== 2. sync job signalled mid-training: checkpoint, requeue, resume; vs. an uninterrupted run"
SYNC=(job.ini --mode sync --num-ps 0 --epochs 20 --max-steps 3000 --log-every 20)
s=$(submit straight --ntasks=2 -- "${SYNC[@]}")
q=$(submit requeued --ntasks=2 -- "${SYNC[@]}")
m=$SCRATCH/runs/requeued-$q/metrics.csv
# Signal once the run is well under way (metrics.csv rows past step 100), not at its very start.
for ((i = 0; i < 600; i++)); do
  step=$(awk -F, '$1 == "train" { s = $2 } END { print s + 0 }' "$m" 2>/dev/null || echo 0)
  [ "$step" -lt 100 ] || break
  [[ $(state "$q") =~ ^(PENDING|RUNNING|CONFIGURING)$ ]] || { show_out requeued "$q"; fail "job $q ended before the signal"; }
  sleep 0.1
done
[ "$step" -ge 100 ] || { show_out requeued "$q"; fail "job $q made no progress in 60 s"; }
scancel --full --signal=USR1 "$q"
echo "signalled job $q at step $step ($(($(date +%s) - T0)) s into the test)"
st=$(wait_job "$s" 150)
[ "$st" = COMPLETED ] || { show_out straight "$s"; fail "uninterrupted job $s ended $st"; }
st=$(wait_job "$q" 150)
out=$SCRATCH/requeued-$q.out
[ "$st" = COMPLETED ] || { show_out requeued "$q"; fail "signalled job $q ended $st"; }
restarts=$(scontrol show job "$q" | grep -oP 'Restarts=\K[0-9]+')
[ "$restarts" = 1 ] || { cat "$out"; fail "job $q: Restarts=$restarts, expected 1"; }
for pat in "SLURM_RESTART_COUNT=0" "got SIGUSR1" "requeueing job $q" "SLURM_RESTART_COUNT=1" \
  "--resume" "resuming from global_step" "dtrain: sync 0 ps + 2 workers"; do
  grep -q -- "$pat" "$out" || { cat "$out"; fail "job $q: no '$pat' in its output"; }
done
[ "$(grep -c "run dir runs/requeued-$q," "$out")" = 2 ] || { cat "$out"; fail "the restart did not use the same run dir"; }
resumed_at=$(grep -oP 'resuming from global_step \K[0-9]+' "$out")
[ "$resumed_at" -gt 0 ] && [ "$resumed_at" -lt 3000 ] || fail "resumed at step $resumed_at"
echo "job $q: signalled, checkpointed at step $resumed_at, requeued (Restarts=1), resumed, finished"
"$PY" - "$SCRATCH/runs/straight-$s" "$SCRATCH/runs/requeued-$q" 3000 <<'PY'
import json, sys, h5py, numpy as np
a_dir, b_dir, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
name = f"ckpt-{step:010d}.h5"
with h5py.File(f"{a_dir}/{name}", "r") as a, h5py.File(f"{b_dir}/{name}", "r") as b:
    for k in ["params", "optimizer/m", "model_state"]:
        x, y = a[k][()], b[k][()]
        assert x.size > 0, f"{k} is empty"
        if not np.array_equal(x, y):
            d = np.abs(x.astype(np.float64) - y.astype(np.float64))
            raise SystemExit(f"FAIL: {name}: /{k} differs: {int((d > 0).sum())} of {x.size} values, "
                             f"max |diff| {d.max():.3g}")
ra, rb = (json.load(open(f"{d}/results.json")) for d in (a_dir, b_dir))
assert ra["global_step"] == rb["global_step"] == step, (ra["global_step"], rb["global_step"])
assert ra["test_accuracy"] == rb["test_accuracy"], (ra["test_accuracy"], rb["test_accuracy"])
print(f"{name}: params, optimizer and batchnorm state bit-identical to the uninterrupted run; "
      f"test accuracy {rb['test_accuracy']:.4f} in both")
PY
echo "== 3. a small strong-scaling sweep through slurm/submit_strong_scaling.sh, then its report job"
sub=$(DTRAIN=$DTRAIN bash "$SRC/slurm/submit_strong_scaling.sh" --job "$SCRATCH/job.ini" --workers "1 2" \
  --global-batch 32 --steps 40 --out "$SCRATCH/scaling" -- --test-data "") ||
  fail "submit_strong_scaling.sh failed"
echo "$sub"
[ "$(grep -cE '^(sync|async)-[a-z0-9-]+ [0-9]+$' <<<"$sub")" = 4 ] || fail "expected 4 runs: $sub"
rep=$(awk '$1 == "report" { print $2 }' <<<"$sub")
[ -n "$rep" ] || fail "no report job"
st=$(wait_job "$rep" 120)
[ "$st" = COMPLETED ] || { cat "$SCRATCH"/scaling/*.out; fail "report job $rep ended $st"; }
"$PY" - "$SCRATCH/scaling" <<'PY'
import csv, json, os, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/report.csv")))
got = sorted((r["mode"], int(r["ps"]), int(r["workers"])) for r in rows)
want = [("async", 1, 1), ("async", 1, 2), ("sync", 0, 1), ("sync", 0, 2)]
assert got == want, f"report rows {got}, wanted {want}"
for r in rows:
    name = f"{r['mode']}{'-ps1' if r['mode'] == 'async' else ''}-w{r['workers']}"
    res = json.load(open(f"{d}/{name}/results.json"))
    assert res["samples"] == 40 * 32, (name, res["samples"])
    assert res["global_batch_size"] == 32, (name, res["global_batch_size"])
    if r["workers"] == "1":
        assert float(r["speedup"]) == 1.0 and float(r["efficiency"]) == 1.0, r
assert os.path.getsize(f"{d}/report.png") > 1000 and "| workers |" in open(f"{d}/report.md").read()
print(f"sweep report ok: {len(rows)} rows, every run trained on 40 x 32 samples")
PY

echo "PASS ($(($(date +%s) - T0)) s)"
