#!/usr/bin/env bash
# tests/cli/test_faults_signals.sh — graceful stop on SIGUSR1, SIGTERM and SIGINT, and the second
# signal that leaves at once.
#   1. async (1 ps + 3 workers), SIGUSR1 to mpirun (Open MPI forwards it to every rank): exit 75,
#      results.json stopped_by "signal", no error, every checkpoint verifies, --resume continues from
#      the newest.
#   2. sync, SIGTERM to mpirun; 3. async, SIGINT to mpirun: Open MPI turns these into a job abort —
#      every rank gets SIGTERM (and starts the graceful stop) and SIGKILL odls_base_sigkill_timeout
#      (1 s) later, and mpirun exits 1. The job must end, non-zero, and every complete checkpoint
#      verify and resume.
#   4. SIGTERM (async) and SIGINT (sync) to every rank directly (what Slurm does on scancel or at the
#      time limit): exit 75, stopped_by "signal", no error, no rank killed, the stop checkpoint is
#      the newest (sync: at exactly results.json's global_step).
#   4b. sync through the ps (1 ps + 3 workers), SIGTERM to every rank: the same, and --resume.
#   4c. async pipelined, a ps per stage (2 ps + 2 replicas x 2 stages), SIGUSR1 to mpirun: as 1.
#   4d. a sync pipeline (2 stages), SIGUSR1 to the rank of stage 0 alone: the stages agree, exit 75,
#      the chief's stop checkpoint.
#   4e. a sync pipeline through the ps (2 ps + 2 stages), SIGUSR1 inside a step to mpirun and to
#      stage 0 alone: the stop checkpoint is at results.json's global_step, its position is that
#      step's, and its parameters and momentum are bit-identical to a run stopped there by
#      --max-steps.
#   4g. sync through 2 ps, SIGUSR1 inside a step to ps 0 alone and to mpirun, and SSP through 2 ps
#      to ps 0 alone: the same as 4e (the ps ranks agree on the step the updates end at).
#   4h. sync through 2 ps with backup workers (3 workers, --replicas-to-aggregate 1), SIGUSR1
#      inside a step to ps 0 alone and to mpirun: every ps made as many updates as the stop
#      checkpoint's global step (results.json ps_updates_per_ps), the position is that step's.
#   4f. async with one worker, SIGUSR1 inside a step: the same (the push the stop rides on is not
#      applied, nor counted in the position); with two workers, the stop checkpoint holds each
#      worker's position and the resumed epoch ends at the global step of a run never stopped.
#   5. SIGTERM then SIGINT to the chief: the second signal exits at once with 128+2 (or 128+15);
#      the job ends, every complete checkpoint still verifies and --resume continues from the newest.
#      (A repeated SIGUSR1 is ignored on purpose: Slurm delivers one request by several routes.)
# Every job must end within 30 s of the signal (bounded by 60 s: never a hang). The jobs run with
# --timeout 30, so a wait the stop leaves stuck is named by dtrain itself before the 60 s are up.
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"
make_fault_data

# run_and_signal MODE NP HOW SIG DIR ARGS...: HOW = mpirun | ranks | chief-twice | rank1
run_and_signal() {
  local mode=$1 np=$2 how=$3 sig=$4 dir=$5
  shift 5
  local log=$dir.log
  echo "== $mode, $np ranks: $sig to $how"
  start_job "$log" -n "$np" "$DTRAIN" "${FX[@]}" --mode "$mode" --run-dir "$dir" \
    --checkpoint-every 10 --timeout 30 "$@"
  wait_ckpts "$dir" 1 60
  sleep "${SIGNAL_DELAY:-0}"  # into a step rather than at a checkpoint's end
  local t0 r p
  t0=$(now)
  case $how in
    mpirun) kill -"$sig" "$JOB_PID" ;;
    ranks) # Every pid first, then the signals: a rank signalled first can end the job, and
           # its peers with it, before the next one is looked up.
           local pids=()
           for ((r = 0; r < np; ++r)); do
             p=$(rank_pid $r) || fail "rank $r not found among the children of mpiexec"
             pids+=("$p")
           done
           kill -"$sig" "${pids[@]}" 2>/dev/null || true ;;
    chief-twice) p=$(rank_pid 0); kill -TERM "$p"; kill -INT "$p" ;;
    rank1) p=$(rank_pid 1); kill -"$sig" "$p" ;;
    ps0) # ps 0 alone, from the role table
         r=$(sed -n 's|^# *\([0-9]*\) .* ps  *0  .*|\1|p' "$log" | head -1)
         [[ -n $r ]] || { cat "$log"; fail "no ps 0 in the role table"; }
         p=$(rank_pid "$r"); kill -"$sig" "$p" ;;
    stage0) # the worker of pipeline stage 0, from the role table
            r=$(sed -n 's|^# *\([0-9]*\) .* worker .* stage 0/.*|\1|p' "$log" | head -1)
            [[ -n $r ]] || { cat "$log"; fail "no stage 0 worker in the role table"; }
            p=$(rank_pid "$r"); kill -"$sig" "$p" ;;
  esac
  wait_job 60
  local took
  took=$(elapsed "$t0" "$(now)")
  echo "   exit $JOB_RC, ${took} s after the signal"
  [[ $JOB_RC -ne 124 ]] || { cat "$log"; fail "hang: the job did not end within 60 s of $sig"; }
  ((took <= 30)) || { cat "$log"; fail "the job took $took s (> 30) to end after $sig"; }
  verify_ckpts "$dir" || { cat "$log"; fail "a checkpoint does not verify after $sig"; }
}

# stopped_cleanly DIR: results.json says "signal", no rank printed an error or was killed.
stopped_cleanly() {
  local dir=$1
  [[ -f $dir/results.json ]] || { cat "$dir.log"; fail "$dir: no results.json after a graceful stop"; }
  [[ $(json_get "$dir/results.json" stopped_by) == signal ]] || fail "$dir: stopped_by is not 'signal'"
  ! grep -q "dtrain: error:" "$dir.log" || { cat "$dir.log"; fail "$dir: a rank reported an error"; }
  ! grep -q "exited on signal" "$dir.log" || { cat "$dir.log"; fail "$dir: a rank was killed"; }
  grep -q "^# checkpoint .*ckpt-$(printf %010d "$(newest_step "$dir")").h5" "$dir.log" ||
    fail "$dir: the newest checkpoint was not written by this run"
}

resume_from_newest() {
  local mode=$1 np=$2 dir=$3
  shift 3
  local step
  step=$(newest_step "$dir")
  timeout 60 "$MPIEXEC" -n "$np" "$DTRAIN" "${FX[@]}" --mode "$mode" --run-dir "$dir" --resume \
    --max-steps $((step + 10)) "$@" >"$dir.resume.log" 2>&1 || { cat "$dir.resume.log"; fail "--resume failed"; }
  grep -q "resuming from global_step $step," "$dir.resume.log" || { cat "$dir.resume.log"; fail "did not resume from $step"; }
  echo "   --resume continued from global_step $step"
}

d=$SCRATCH/usr1
run_and_signal async 4 mpirun USR1 "$d" --num-ps 1
[[ $JOB_RC -eq 75 ]] || { cat "$d.log"; fail "SIGUSR1: exit $JOB_RC, want 75"; }
stopped_cleanly "$d"
resume_from_newest async 4 "$d" --num-ps 1

# Open MPI aborts the job on SIGTERM/SIGINT: the ranks get SIGTERM and start the graceful stop, but
# are SIGKILLed odls_base_sigkill_timeout (1 s) later, and mpirun exits 1 (and, given more time, the
# ranks would wait in MPI_Finalize for an mpirun that no longer answers). So: the job ends, non-zero,
# and whatever checkpoint was complete verifies and resumes.
d=$SCRATCH/term
run_and_signal sync 3 mpirun TERM "$d" --num-ps 0
[[ $JOB_RC -ne 0 ]] || fail "SIGTERM to mpirun: exit 0"
resume_from_newest sync 3 "$d" --num-ps 0

d=$SCRATCH/int
run_and_signal async 4 mpirun INT "$d" --num-ps 1
[[ $JOB_RC -ne 0 ]] || fail "SIGINT to mpirun: exit 0"

d=$SCRATCH/term-ranks
run_and_signal async 4 ranks TERM "$d" --num-ps 1
[[ $JOB_RC -eq 75 ]] || { cat "$d.log"; fail "SIGTERM to every rank: exit $JOB_RC, want 75"; }
stopped_cleanly "$d"

d=$SCRATCH/int-ranks
run_and_signal sync 3 ranks INT "$d" --num-ps 0
[[ $JOB_RC -eq 75 ]] || { cat "$d.log"; fail "SIGINT to every rank: exit $JOB_RC, want 75"; }
stopped_cleanly "$d"
[[ $(newest_step "$d") -eq $(json_get "$d/results.json" global_step) ]] ||
  fail "sync: the stop checkpoint is not at results.json's global_step"

# A sync pipeline (2 stages): SIGUSR1 to world rank 1 alone (stage 0; the chief is stage 1). The
# stages agree on stopping after every step: both leave at the same step and the chief
# checkpoints (before, stage 0 stopped alone and the job timed out with no checkpoint).
d=$SCRATCH/usr1-pipe
run_and_signal sync 2 rank1 USR1 "$d" --num-ps 0 --pipeline-stages 2 --micro-batches 2
[[ $JOB_RC -eq 75 ]] || { cat "$d.log"; fail "pipeline, SIGUSR1 to one stage: exit $JOB_RC, want 75"; }
stopped_cleanly "$d"

# Sync through the ps: the stop rides on a push; every worker leaves at the same global step.
# The push that carries the stop is not applied, nor are an SSP chief's pushes ahead of the ps:
# the stop checkpoint's position is the ps's step (its step in the epoch was one ahead of its
# global_step, so a resumed run skipped a step's batches).
position_is_the_ps_step() {
  "$PY" - "$1" <<'PY' || fail "$1: a checkpoint's position is not its global_step's"
import glob, sys, h5py
for f in sorted(glob.glob(f"{sys.argv[1]}/ckpt-*.h5")):
    a = h5py.File(f, "r").attrs
    g, e, k, spe = (int(a[x]) for x in ("global_step", "epoch", "step_in_epoch", "steps_per_epoch"))
    assert k == g - e * spe, f"{f}: global_step {g}, epoch {e}, step {k} of {spe}"
print("   every checkpoint's position is its global step")
PY
}
# reports_the_stop_step DIR: results.json's global_step is the stop checkpoint's, and the step the
# stop rode on (its push not applied) left no train row: metrics.csv's train rows (--log-every 1)
# have rising steps, the last at that global_step, and results.json's train_loss is the last's
# (the dropped step used to log a second row at the same step, 0.0 samples/s, whose loss
# results.json then reported; SSP counted it in its global_step).
reports_the_stop_step() {
  "$PY" - "$1" <<'PY' || fail "$1: the stop's results.json or metrics.csv count a step not applied"
import csv, glob, json, sys
d = sys.argv[1]
r = json.load(open(f"{d}/results.json"))
newest = int(sorted(glob.glob(f"{d}/ckpt-*.h5"))[-1][-13:-3])
assert r["global_step"] == newest, f"results.json global_step {r['global_step']}, stop checkpoint {newest}"
steps = [(int(row["global_step"]), float(row["loss"])) for row in csv.DictReader(open(f"{d}/metrics.csv"))
         if row["kind"] == "train"]
assert all(a[0] < b[0] for a, b in zip(steps, steps[1:])), f"train rows at steps {[g for g, _ in steps[-5:]]}"
assert steps[-1][0] == newest, f"the last train row is at step {steps[-1][0]}, the stop at {newest}"
assert abs(r["train_loss"] - steps[-1][1]) <= 1e-6, (r["train_loss"], steps[-1])
print(f"   results.json and metrics.csv end at the stop step {newest}, one train row each step")
PY
}
# Steps of 300 ms (fault.hpp), the signal 450 ms after the first checkpoint: inside a step.
export DTRAIN_FAULT=slow+300 SIGNAL_DELAY=0.45
d=$SCRATCH/term-sync-ps
run_and_signal sync 4 ranks TERM "$d" --num-ps 1 --log-every 1
[[ $JOB_RC -eq 75 ]] || { cat "$d.log"; fail "sync through the ps, SIGTERM to every rank: exit $JOB_RC, want 75"; }
stopped_cleanly "$d"
position_is_the_ps_step "$d"
reports_the_stop_step "$d"
resume_from_newest sync 4 "$d" --num-ps 1
d=$SCRATCH/term-ssp
run_and_signal async 4 ranks TERM "$d" --num-ps 1 --max-staleness 2 --log-every 1
unset DTRAIN_FAULT SIGNAL_DELAY
[[ $JOB_RC -eq 75 ]] || { cat "$d.log"; fail "SSP, SIGTERM to every rank: exit $JOB_RC, want 75"; }
stopped_cleanly "$d"
position_is_the_ps_step "$d"
reports_the_stop_step "$d"
resume_from_newest async 4 "$d" --num-ps 1 --max-staleness 2

# A pipeline with a ps per stage (2 ps + 2 replicas x 2 stages): the stages agree on the stop, the
# stage leaders' parts make the stop checkpoint.
d=$SCRATCH/usr1-pipe-ps
PIPE=(--num-ps 2 --pipeline-stages 2 --micro-batches 4)
run_and_signal async 6 mpirun USR1 "$d" "${PIPE[@]}"
[[ $JOB_RC -eq 75 ]] || { cat "$d.log"; fail "SIGUSR1, pipelined ps: exit $JOB_RC, want 75"; }
stopped_cleanly "$d"
resume_from_newest async 6 "$d" "${PIPE[@]}"

# A sync pipeline through the ps (2 ps + 1 replica x 2 stages), the signal inside a step: to mpirun
# (every rank), and to the rank of stage 0 alone. The stages agree on the stop before they push,
# so neither stage's ps applies the step the stop rides on, and the stop checkpoint holds the
# parameters and momentum of a run stopped at its global_step by --max-steps, bit for bit, at the
# same position (before, with the signal to stage 0 the chief's stage applied one step more than
# stage 0; with it to mpirun the position was one step ahead of the parameters).
same_params_as() {
  "$PY" - "$1" "$2" <<'PY' || fail "$1: the stop checkpoint differs from a run stopped by --max-steps"
import glob, sys, h5py, numpy as np
f = sorted(glob.glob(f"{sys.argv[1]}/ckpt-*.h5"))[-1]
g = f.replace(sys.argv[1], sys.argv[2])
with h5py.File(f, "r") as a, h5py.File(g, "r") as b:
    for k in ("epoch", "step_in_epoch", "global_step"):
        assert a.attrs[k] == b.attrs[k], (k, a.attrs[k], b.attrs[k])
    for k in ("params", "optimizer/m"):
        x, y = a[k][()], b[k][()]
        n = int((x != y).sum())
        assert n == 0, f"/{k}: {n} of {x.size} values differ from {g}"
print(f"   {f.split('/')[-1]}: parameters and momentum bit-identical to a run stopped there by --max-steps")
PY
}
# stop_as_max_steps MODE NP HOW DIR ARGS...: SIGUSR1 to HOW inside a step ends the run with exit
# 75 at a step whose checkpoint holds that step's position, results and parameters, as a run of
# the same job stopped there by --max-steps.
stop_as_max_steps() {
  local mode=$1 np=$2 how=$3 d=$4
  shift 4
  run_and_signal "$mode" "$np" "$how" USR1 "$d" "$@" --log-every 1
  [[ $JOB_RC -eq 75 ]] || { cat "$d.log"; fail "SIGUSR1 to $how, $mode $*: exit $JOB_RC, want 75"; }
  stopped_cleanly "$d"
  position_is_the_ps_step "$d"
  reports_the_stop_step "$d"
  timeout 60 "$MPIEXEC" -n "$np" "$DTRAIN" "${FX[@]}" --mode "$mode" --run-dir "$d-straight" \
    --max-steps "$(newest_step "$d")" "$@" >"$d-straight.log" 2>&1 ||
    { cat "$d-straight.log"; fail "the run to the stop checkpoint's step failed"; }
  same_params_as "$d" "$d-straight"
}
export DTRAIN_FAULT=slow+300 SIGNAL_DELAY=0.45
for how in mpirun stage0; do
  stop_as_max_steps sync 4 "$how" "$SCRATCH/usr1-pipe-sync-$how" --num-ps 2 --pipeline-stages 2 \
    --micro-batches 4
done
# Sync through the ps with the parameters split over 2 ps (2 workers): the signal to ps 0 alone,
# and to mpirun. The ps ranks agree on the step the updates end at, so every shard of the stop
# checkpoint holds the same step (before, ps 0 stopped at once while ps 1 applied the step the
# workers were pushing: a checkpoint of two steps).
for how in ps0 mpirun; do
  stop_as_max_steps sync 4 "$how" "$SCRATCH/usr1-sync-2ps-$how" --num-ps 2
done
# The same in SSP (--max-staleness 0, which equals sync bit for bit), the signal to ps 0 alone.
stop_as_max_steps async 4 ps0 "$SCRATCH/usr1-ssp-2ps-ps0" --num-ps 2 --max-staleness 0
# With backup workers (R = 1 of 3) the runs differ in which gradients each update takes, so no
# --max-steps run repeats them; but every shard ends at the stop checkpoint's step (before, ps 0
# stopped at once while ps 1 could make the step the workers pushed).
for how in ps0 mpirun; do
  d=$SCRATCH/usr1-backup-2ps-$how
  run_and_signal sync 5 "$how" USR1 "$d" --num-ps 2 --replicas-to-aggregate 1 --log-every 1
  [[ $JOB_RC -eq 75 ]] || { cat "$d.log"; fail "SIGUSR1 to $how, backup workers: exit $JOB_RC, want 75"; }
  stopped_cleanly "$d"
  position_is_the_ps_step "$d"
  "$PY" - "$d" "$(newest_step "$d")" <<'PY' || { cat "$d.log"; fail "$d: the shards stopped apart"; }
import json, sys
r = json.load(open(f"{sys.argv[1]}/results.json"))
step = int(sys.argv[2])
assert r["ps_updates_per_ps"] == [step, step] and r["global_step"] == step, (r["ps_updates_per_ps"], step)
print(f"   both ps stopped after {step} updates")
PY
done
# Async with one worker (its pushes are the global steps): the push that carries the stop is not
# applied, and its batch is not counted in the checkpoint's position either (a resumed run skipped
# it).
stop_as_max_steps async 2 mpirun "$SCRATCH/usr1-async1" --num-ps 1
# Two async workers: the stop checkpoint holds each worker's position (summing to its global
# step), and the resumed run ends the epoch at the same global step as a run never stopped.
d=$SCRATCH/usr1-async2
run_and_signal async 3 mpirun USR1 "$d" --num-ps 1
[[ $JOB_RC -eq 75 ]] || { cat "$d.log"; fail "SIGUSR1 to mpirun, async with two workers: exit $JOB_RC, want 75"; }
stopped_cleanly "$d"
unset DTRAIN_FAULT
timeout 60 "$MPIEXEC" -n 3 "$DTRAIN" "${FX[@]}" --mode async --num-ps 1 --run-dir "$d" --resume \
  --epochs 1 >"$d.resume.log" 2>&1 || { cat "$d.resume.log"; fail "--resume failed"; }
"$PY" - "$d" <<'PY' || { cat "$d.resume.log"; fail "$d: the workers' positions were not kept"; }
import glob, json, sys, h5py
d = sys.argv[1]
stop = sorted(glob.glob(f"{d}/ckpt-*.h5"))[-2]  # the last is the resumed run's epoch end
with h5py.File(stop, "r") as f:
    steps, g = f["worker_steps_in_epoch"][()].tolist(), int(f.attrs["global_step"])
    assert f.attrs["epoch"] == 0 and sum(steps) == g, (steps, g)
r = json.load(open(f"{d}/results.json"))
assert (r["global_step"], r["epochs"], r["epochs_completed"]) == (64, 1.0, 1), r
print(f"   stopped at {g} with the workers at {steps}; resumed, the epoch ended at step 64")
PY
unset SIGNAL_DELAY

d=$SCRATCH/twice
run_and_signal sync 3 chief-twice "TERM+INT" "$d" --num-ps 0
[[ $JOB_RC -eq 130 || $JOB_RC -eq 143 ]] || { cat "$d.log"; fail "second signal: exit $JOB_RC, want 128+2 or 128+15"; }
resume_from_newest sync 3 "$d" --num-ps 0
echo "PASS"
