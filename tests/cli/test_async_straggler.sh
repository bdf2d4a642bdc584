#!/usr/bin/env bash
# tests/cli/test_async_straggler.sh — async training with a straggler for longer than --timeout.
# Async workers train their own shards at their own speeds, so the fast ones end an epoch first
# and wait for the others at the epoch's end (batchnorm averaging, evaluation, checkpoint). On a
# long epoch (ImageNet: hours) a worker a few percent slower arrives minutes later. That wait is
# no stuck peer as long as the global step moves: 1 ps + 2 workers, every step of worker 1 (rank 1)
# 60 ms longer (DTRAIN_FAULT=slow+60:1: each step well within --timeout 4, its 128 steps about 8 s
# behind the chief's, whatever the machine's load), so the chief ends its shard first and must
# wait for worker 1 longer than --timeout — the run completes (exit 0, every sample of the epoch
# counted, the global step 4096/16 = 256), and the chief's log says how long it waited.
# The same under SSP (--max-staleness), where the chief's clock runs ahead of the ps's step.
# A worker that stops moving is still reported after --timeout (test_faults_stuck.sh async-hang).
set -euo pipefail
source "$(dirname "$0")/common.sh"

make_data train 4096 --seed 41
write_job "$SCRATCH/job.ini"
d=$SCRATCH/run
export DTRAIN_FAULT='slow+60:1'
timeout 120 "$MPIEXEC" -n 3 -x DTRAIN_FAULT "$DTRAIN" --config "$SCRATCH/job.ini" \
  --train-data "$SCRATCH/train.h5" --mode async --num-ps 1 --epochs 1 --timeout 4 \
  --log-every 50 --run-dir "$d" >"$d.log" 2>&1 || { cat "$d.log"; fail "the run with a straggler failed"; }
unset DTRAIN_FAULT
grep -Eq "^# +1 +[0-9]+ +[^ ]+ +worker +1 " "$d.log" || { cat "$d.log"; fail "rank 1 is not worker 1"; }
waited=$(sed -n 's/^# epoch 1: the chief waited \([0-9.]*\) s for slower workers.*/\1/p' "$d.log")
[[ -n $waited ]] || { cat "$d.log"; fail "no note of the chief's wait"; }
echo "the chief waited $waited s for worker 1 (--timeout 4)"
"$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) > 4 else 1)" "$waited" ||
  fail "the chief waited only $waited s: the straggler was not slow enough to test the deadline"
[[ $(json_get "$d/results.json" global_step) == 256 && $(json_get "$d/results.json" samples) == 4096 ]] ||
  { cat "$d/results.json"; fail "not every step and sample of the epoch counted"; }
[[ $(json_get "$d/results.json" stopped_by) == completed ]] || fail "the run did not complete"

# SSP (--max-staleness 3): the chief ends its epoch 3 steps ahead and waits at the meeting while
# worker 1 (800 ms a step) catches up, 2.4 s in all, longer than --timeout 2: the global step
# moves every 800 ms, so no timeout (the chief's clock, ahead of the ps's step, hid the moves).
make_data small 256 --seed 42
s=$SCRATCH/ssp
DTRAIN_FAULT='slow+800:1' timeout 120 "$MPIEXEC" -n 3 -x DTRAIN_FAULT "$DTRAIN" \
  --config "$SCRATCH/job.ini" --train-data "$SCRATCH/small.h5" --mode async --num-ps 1 \
  --max-staleness 3 --epochs 1 --timeout 2 --run-dir "$s" >"$s.log" 2>&1 ||
  { cat "$s.log"; fail "SSP with a straggler within --timeout a step failed"; }
grep -q "^# epoch 1: the chief waited" "$s.log" || { cat "$s.log"; fail "SSP: no wait noted"; }
echo "PASS"
