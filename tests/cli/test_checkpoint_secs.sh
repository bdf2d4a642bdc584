#!/usr/bin/env bash
# tests/cli/test_checkpoint_secs.sh — --checkpoint-secs S (TensorFlow's save_checkpoint_secs): a
# checkpoint at the first step ending S seconds or more after the last one, on whichever steps the
# clock gives, with every rank that saves agreeing on the step.
#   1. sync allreduce, 2 workers, every step 15 ms longer (DTRAIN_FAULT=slow+15: a fixed delay, so
#      that the 100 steps last 1.5 s or more on any machine — slow*F scaled with the host's speed,
#      and a host twice as fast as the 2-core VM got one mid-run checkpoint, not 2): mid-run
#      checkpoints appear (none without the option), their recorded training times lie ≥ S apart,
#      and resuming from one of them ends bit-identical to a run that never stopped — so both
#      workers saved the same step (their batchnorm rows are in it).
#   2. the other savers: async (the chief alone; every step 20 ms longer, so that the chief's 40 or
#      so steps outlast S), a pipelined allreduce run (2 stages) and a pipelined ps run (the stage
#      leaders) finish and write mid-run checkpoints. The pipelines get 2 ms a step (250 steps:
#      0.5 s or more) and a shorter interval.
#      SSP writes no checkpoint of step 0 (its chief can step before the ps's first update).
set -euo pipefail
source "$(dirname "$0")/common.sh"

make_data train 4096 --seed 21 --template-seed 9
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --epochs 1 --keep-checkpoints 100)
SECS=0.4

# mid_checkpoints DIR LAST MIN SECS: the checkpoints of DIR before step LAST (the run's end): at
# least MIN of them, their wall_seconds at least 0.9 × SECS apart (the first: after 0.9 × SECS).
# Prints their steps.
mid_checkpoints() {
  "$PY" - "$@" <<'PY'
import glob, sys, h5py
d, last, least, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
times = []
for f in sorted(glob.glob(f"{d}/ckpt-*.h5")):
    with h5py.File(f, "r") as h:
        step, wall = int(h.attrs["global_step"]), float(h.attrs["wall_seconds"])
    if step < last:
        times.append((step, wall))
assert len(times) >= least, f"{d}: {len(times)} checkpoints before step {last}, expected >= {least}"
prev = 0.0
for step, wall in times:
    assert wall - prev >= 0.9 * secs, f"{d}: ckpt of step {step} at {wall:.3f} s, {wall - prev:.3f} s after the last"
    prev = wall
print(" ".join(str(s) for s, _ in times))
PY
}

echo "== sync allreduce, 2 workers: without the option, only the last step's checkpoint"
a=$SCRATCH/straight
run 2 "$a" --mode sync --num-ps 0 --max-steps 100
[[ $(ls "$a"/ckpt-*.h5) == "$a/ckpt-0000000100.h5" ]] || fail "$a: $(ls "$a")"

echo "== with --checkpoint-secs $SECS (steps 15 ms longer: DTRAIN_FAULT=slow+15)"
b=$SCRATCH/timed
DTRAIN_FAULT='slow+15' run 2 "$b" --mode sync --num-ps 0 --max-steps 100 --checkpoint-secs "$SECS"
steps=$(mid_checkpoints "$b" 100 2 "$SECS") || fail "$b: $steps"
echo "mid-run checkpoints at steps: $steps"
echo "== saving changed nothing: the timed run ends bit-identical to the straight one"
compare "$a" "$b" 100
read -r -a mid <<<"$steps"
k=${mid[1]}
echo "== resume from the time-based checkpoint of step $k: bit-identical at step 100"
c=$SCRATCH/resumed
mkdir "$c"
cp "$b/config.ini" "$(printf '%s/ckpt-%010d.h5' "$b" "$k")" "$c/"
run 2 "$c" --mode sync --num-ps 0 --max-steps 100 --resume
grep -q "resuming from global_step $k," "$c.log" || { cat "$c.log"; fail "did not resume at $k"; }
compare "$a" "$c" 100

echo "== the other savers"
d=$SCRATCH/async
DTRAIN_FAULT='slow+20' run 3 "$d" --mode async --num-ps 1 --max-steps 80 --checkpoint-secs "$SECS"
steps=$(mid_checkpoints "$d" 80 1 "$SECS") || fail "$d: $steps"
echo "async, 1 ps + 2 workers: mid-run checkpoints at steps $steps"
for shape in "2 --mode sync --num-ps 0" "4 --mode async --num-ps 2"; do
  read -r -a args <<<"$shape"
  d=$SCRATCH/pipelined-${args[2]}
  # 250 steps: the epoch's 256 (4096 samples in batches of 16) would add a checkpoint of its own.
  DTRAIN_FAULT='slow+2' run "${args[0]}" "$d" "${args[@]:1}" --pipeline-stages 2 --micro-batches 2 \
    --max-steps 250 --checkpoint-secs 0.05
  steps=$(mid_checkpoints "$d" 250 1 0.05) || fail "$d ($shape): $steps"
  echo "-np $shape, 2 stages: mid-run checkpoints at steps $steps"
done
# SSP: the chief's first step returns before the ps applies step 1 (worker 1, world rank 1, is
# slowed); a checkpoint then would be of step 0, the initial parameters: none is written.
d=$SCRATCH/ssp
DTRAIN_FAULT='slow+50:1' run 3 "$d" --mode async --num-ps 1 --max-staleness 1 --max-steps 3 \
  --checkpoint-every 1
[[ ! -e $d/ckpt-0000000000.h5 ]] || { cat "$d.log"; fail "SSP wrote a checkpoint of step 0"; }
[[ -e $d/ckpt-0000000003.h5 ]] || { cat "$d.log"; fail "SSP: no checkpoint of the last step"; }
echo "SSP: no checkpoint before the ps's first update ($(cd "$d" && ls ckpt-*.h5 | tr '\n' ' '))"
echo "PASS"
