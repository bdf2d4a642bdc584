#!/usr/bin/env bash
# tests/cli/test_ps_modes.sh — the parameter-server family end to end (1 ps + 3 workers, tiny CNN):
#   1. --max-staleness 0 (bulk synchronous through the ps) ends with exactly the parameters and
#      optimizer state of sync through the ps with R = all workers.
#   1b. --ps-threads 2 gives the same parameters, bit for bit, as 1 thread (a model above the
#      ps's parallel threshold).
#   1c. pushes sent in 1 KiB chunks while backward runs (--overlap, default) end with the same
#      bits as pushes after backward (--overlap false): async and sync through the ps, 1 ps + 1
#      worker (the aggregating modes push early only where ranks do not outnumber cores).
#   2. --max-staleness 2 with a straggler (DTRAIN_FAULT slow*4 on one worker): no push is more
#      than 2 steps stale (results.json's staleness_max and histogram), and some are stale.
#   3. sync through the ps with R = workers trains as well as sync allreduce (same steps, test
#      accuracy within 0.05 on this small set) and uses every gradient (no drops).
#   4. sync through the ps with one backup worker (R = 2 of 3) and the third worker slowed 4x:
#      the slow worker's late gradients are dropped (dropped_per_worker), every update used R
#      gradients (Σ pushes_per_worker = R × updates), samples counts them, and the run completes
#      its epochs.
#   4c. backup workers through 2 ps (R = 1 of 3), three runs: no shard makes an update past the
#      run's last global step (a push computed before its worker heard of the last step made a
#      16th update on one ps in about half the runs), and results.json's counts (ps 0's) add up,
#      samples too (those of the gradients ps 0 used).
#   4b. backup workers with a shorter shard: an empty push takes none of the R places (the step
#      waits for the sample it has), and the pushes --max-steps drops leave no train row.
#   5. async: the staleness histogram counts every used push; pushes_per_worker add up to the
#      global steps; samples counts the pushes' samples (short last batches too).
#   5b. async with --async-momentum dana (per-worker momentum, look-ahead) and --delay-compensation:
#      completes with finite losses, fits its training batches as the default recipe does (the
#      second epoch's mean training loss below half the first logged steps'; the test accuracy of
#      these random 320 samples varies by ±0.2 from run to run with the arrival order, so it is
#      only printed), and its checkpoint holds the workers' momentum sum.
#   6. Option errors: --max-staleness with sync, --replicas-to-aggregate with allreduce or more
#      than the workers — one message naming the option, nothing written.
set -euo pipefail
source "$(dirname "$0")/common.sh"
make_data train 960 --seed 11
make_data test 320 --seed 12
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5"
        --epochs 2 --lr-scaling linear --timeout 60)

run() {  # run NAME NP ARGS...: trains into $SCRATCH/NAME (log NAME.log)
  local name=$1 np=$2
  shift 2
  "$MPIEXEC" -n "$np" -x DTRAIN_FAULT "$DTRAIN" "${COMMON[@]}" --run-dir "$SCRATCH/$name" "$@" \
    >"$SCRATCH/$name.log" 2>&1 || { cat "$SCRATCH/$name.log"; fail "$name: dtrain failed"; }
}

export DTRAIN_FAULT=
echo "== 1. --max-staleness 0 equals sync through the ps (R = all)"
run ssp0 4 --mode async --num-ps 1 --max-staleness 0
run syncps 4 --mode sync --num-ps 1
"$PY" - "$SCRATCH/ssp0" "$SCRATCH/syncps" <<'PY'
import glob, json, sys
import h5py, numpy as np
a, b = sys.argv[1], sys.argv[2]
ra, rb = (json.load(open(f"{d}/results.json")) for d in (a, b))
assert ra["global_step"] == rb["global_step"] > 0, (ra["global_step"], rb["global_step"])
assert ra["exchange"] == "bounded-staleness async" and rb["exchange"] == "sync through the ps"
newest = lambda d: sorted(glob.glob(f"{d}/ckpt-*.h5"))[-1]
fa, fb = h5py.File(newest(a)), h5py.File(newest(b))
assert np.array_equal(fa["params"][:], fb["params"][:]), "parameters differ"
for k in fa["optimizer"]:
    assert np.array_equal(fa["optimizer"][k][:], fb["optimizer"][k][:]), f"optimizer {k} differs"
assert ra["test_accuracy"] == rb["test_accuracy"]
print(f"   identical parameters after {ra['global_step']} steps, test accuracy {ra['test_accuracy']:.4f}")
PY

echo "== 1b. --ps-threads 2 (aggregation and update on 2 OpenMP threads): the same bits as 1 thread"
# A model above the ps's parallel threshold (65,536 parameters), so the threads really run.
sed 's/dense units=24/dense units=400/' "$SCRATCH/job.ini" >"$SCRATCH/wide.ini"
for t in 1 2; do
  "$MPIEXEC" -n 4 "$DTRAIN" --config "$SCRATCH/wide.ini" --train-data "$SCRATCH/train.h5" \
    --test-data "$SCRATCH/test.h5" --epochs 1 --max-steps 8 --mode sync --num-ps 1 --ps-threads $t \
    --run-dir "$SCRATCH/wide$t" >"$SCRATCH/wide$t.log" 2>&1 || { cat "$SCRATCH/wide$t.log"; fail "wide$t"; }
done
"$PY" - "$SCRATCH/wide1" "$SCRATCH/wide2" <<'PY'
import glob, sys
import h5py, numpy as np
newest = lambda d: sorted(glob.glob(f"{d}/ckpt-*.h5"))[-1]
fa, fb = (h5py.File(newest(d)) for d in sys.argv[1:3])
assert fa.attrs["global_step"] == fb.attrs["global_step"] == 8
assert fa["params"].shape[0] > 65536, fa["params"].shape
assert np.array_equal(fa["params"][:], fb["params"][:]), "--ps-threads 2 changed the parameters"
print(f"   identical {fa['params'].shape[0]} parameters after 8 steps with 1 and 2 ps threads")
PY

echo "== 1c. pushes during backward: the same bits as pushes after it"
for mode in async sync; do
  for ov in true false; do
    run "ov-$mode-$ov" 2 --mode "$mode" --num-ps 1 --max-steps 30 --ps-chunk-kb 1 --overlap "$ov"
  done
  if [ "$mode" = sync ] && grep -q "pushes leave after backward" "$SCRATCH/ov-sync-true.log"; then
    echo "   (sync: this machine has fewer cores than 2 ranks: both pushed after backward)"
  fi
  compare "$SCRATCH/ov-$mode-true" "$SCRATCH/ov-$mode-false" 30
done

echo "== 2. --max-staleness 2 with a straggler"
export DTRAIN_FAULT='slow*4:1'
run ssp2 4 --mode async --num-ps 1 --max-staleness 2
export DTRAIN_FAULT=
"$PY" - "$SCRATCH/ssp2/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
h = r["staleness_histogram"]
assert r["staleness_max"] <= 2 and not any(h[3:]), (r["staleness_max"], h)
assert sum(h) == 3 * r["global_step"], (sum(h), r["global_step"])  # every worker, every step
assert h[1] + h[2] > 0, f"no stale push at all with a straggler: {h[:4]}"
print(f"   staleness histogram {h[:3]}, max {r['staleness_max']}")
PY

echo "== 3. sync through the ps (R = all) vs sync allreduce"
run allreduce 3 --mode sync --num-ps 0
"$PY" - "$SCRATCH/syncps/results.json" "$SCRATCH/allreduce/results.json" <<'PY'
import json, sys
p, a = (json.load(open(f)) for f in sys.argv[1:])
assert p["global_step"] == a["global_step"], (p["global_step"], a["global_step"])
assert abs(p["test_accuracy"] - a["test_accuracy"]) <= 0.05, (p["test_accuracy"], a["test_accuracy"])
assert p["dropped_gradients"] == 0 and sum(p["pushes_per_worker"]) == 3 * p["global_step"], p
# The ps's time in the optimizer is part of its busy time, and no ps at all reports none.
assert 0 < p["ps_optimizer_fraction"] <= p["ps_busy_fraction"] < 1, p
assert a["ps_optimizer_fraction"] == 0, a
assert p["ps_shared_ring_pushes"] == 0, p  # the aggregating modes keep MPI messages
print(f"   test accuracy: through the ps {p['test_accuracy']:.4f}, allreduce {a['test_accuracy']:.4f}")
PY

echo "== 4. one backup worker (R = 2 of 3), worker 2 slowed 4x"
export DTRAIN_FAULT='slow*4:2'
run backup 4 --mode sync --num-ps 1 --replicas-to-aggregate 2
export DTRAIN_FAULT=
"$PY" - "$SCRATCH/backup/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["replicas_to_aggregate"] == 2 and r["epochs_completed"] == 2, r
assert sum(r["pushes_per_worker"]) == 2 * r["ps_updates"], (r["pushes_per_worker"], r["ps_updates"])
assert r["dropped_per_worker"][2] > 0, f"the slow worker lost no gradient: {r['dropped_per_worker']}"
assert r["dropped_gradients"] == sum(r["dropped_per_worker"])
# samples: the gradients the ps used (R full batches an update), not the global steps × W batches
assert r["samples"] == 2 * r["batch_size"] * r["ps_updates"], (r["samples"], r["batch_size"], r["ps_updates"])
print(f"   pushes used {r['pushes_per_worker']}, dropped {r['dropped_per_worker']}, "
      f"{r['global_step']} steps, {r['samples']} samples, test accuracy {r['test_accuracy']:.4f}")
PY

echo "== 4c. backup workers through 2 ps: no update past the last step, counts that add up"
for i in 1 2 3; do
  run backup2ps$i 5 --mode sync --num-ps 2 --replicas-to-aggregate 1
  "$PY" - "$SCRATCH/backup2ps$i/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
last = 2 * -(-320 // r["batch_size"])  # 2 epochs of 960 samples over 3 workers
assert r["ps_updates"] == r["global_step"] == last, (r["ps_updates"], r["global_step"], last)
assert sum(r["pushes_per_worker"]) == r["ps_updates"], (r["pushes_per_worker"], r["ps_updates"])
assert sum(r["dropped_per_worker"]) == r["dropped_gradients"], (r["dropped_per_worker"], r["dropped_gradients"])
# samples: those of the gradients ps 0 used (whole batches here). Each ps takes its own first
# gradient of a step: one ps 0 used was often late on ps 1, and its samples went uncounted.
assert r["samples"] == sum(r["pushes_per_worker"]) * r["batch_size"], (r["samples"], r["pushes_per_worker"])
print(f"   {r['ps_updates']} updates of {r['global_step']} steps; pushes used {r['pushes_per_worker']}, "
      f"dropped {r['dropped_per_worker']}, {r['samples']} samples")
PY
done

echo "== 4b. a shorter shard's empty push takes none of the R places"
# 33 samples over 2 workers at batch 16: shards of 17 and 16, so each epoch's second step holds 1
# sample on worker 0 and none on worker 1. With R = 1 and worker 0 slowed, worker 1's empty push
# arrives first: it used to complete the step alone (an update of nothing, worker 0's sample
# dropped as late); the step now waits for the gradient. --max-steps 5 then stops inside an
# epoch: a push of the chief's that the ps ignored there leaves no train row.
make_data odd33 33 --seed 13
SAVED=("${COMMON[@]}")
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/odd33.h5" --epochs 3 --timeout 60)
export DTRAIN_FAULT='slow+150:0'
run empty 3 --mode sync --num-ps 1 --replicas-to-aggregate 1 --max-steps 5 --log-every 1
export DTRAIN_FAULT=
COMMON=("${SAVED[@]}")
"$PY" - "$SCRATCH/empty" <<'PY'
import csv, json, sys
d = sys.argv[1]
r = json.load(open(f"{d}/results.json"))
# Each epoch's first step uses one full batch (R = 1; the other worker's is late), each last
# step worker 0's one sample: 3 × 16 + 2 × 1. Before, worker 1's empty push completed the last
# steps alone and worker 0's sample was dropped as late: 48. (On a loaded host a push may come
# for a step still ahead, and join its aggregate beside the first — SyncReplicasOptimizer's
# accumulator averages all it holds: more, never fewer.)
assert r["samples"] >= 3 * 16 + 2 * 1, (r["samples"], r["pushes_per_worker"], r["dropped_per_worker"])
rows = [(int(x["global_step"]), float(x["loss"])) for x in csv.DictReader(open(f"{d}/metrics.csv"))
        if x["kind"] == "train"]
steps = [g for g, _ in rows]
assert steps == sorted(set(steps)) and steps[-1] in (4, 5), steps
# The chief's 5th push was used or late (a row at 5), or came after step 5 ended the run (the ps
# ignored it, and it has no row: its loss was results.json's train_loss).
answered = r["pushes_per_worker"][0] + r["dropped_per_worker"][0]
assert (steps[-1] == 5) == (answered == 5), (steps, r["pushes_per_worker"], r["dropped_per_worker"])
assert r["train_loss"] == rows[-1][1] or abs(r["train_loss"] - rows[-1][1]) < 1e-6, (r["train_loss"], rows[-1])
print(f"   {r['samples']} samples (the epochs' last steps apply worker 0's sample); train rows at {steps}")
PY

echo "== 5. async bookkeeping"
run async 4 --mode async --num-ps 1
"$PY" - "$SCRATCH/async/results.json" "$SCRATCH/async.log" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
m = re.search(r"# ps \(max over ps ranks\): busy ([0-9.]+)% of its wall time, ([0-9.]+)% in the "
              r"optimizer; ([0-9]+) pushes through shared rings", open(sys.argv[2]).read())
assert m, "no ps line in the log"
assert abs(float(m[1]) - 100 * r["ps_busy_fraction"]) <= 0.06, (m[0], r["ps_busy_fraction"])
assert abs(float(m[2]) - 100 * r["ps_optimizer_fraction"]) <= 0.06, (m[0], r["ps_optimizer_fraction"])
assert sum(r["staleness_histogram"]) == sum(r["pushes_per_worker"]) == r["global_step"], r
h = r["staleness_histogram"]  # staleness_mean is the histogram's (it was the chief's own pushes')
# The last bin counts staleness >= 32 (a loaded machine makes some): each between 32 and the max.
lo = sum(k * c for k, c in enumerate(h)) / sum(h)
hi = lo + h[-1] * (r["staleness_max"] - 32) / sum(h)
assert lo - 1e-9 <= r["staleness_mean"] <= hi + 1e-9 and (h[-1] > 0 or hi == lo), (lo, hi, r)
assert r["dropped_gradients"] == 0
assert 0 < r["ps_optimizer_fraction"] <= r["ps_busy_fraction"] < 1, r
# One node, --ps-shm by default: every worker maps the ps's ring from its first reply (the LOAD's
# or its first pull's), so every push takes it (at most the first per worker might not).
shared = int(m[3])
assert shared == r["ps_shared_ring_pushes"], (m[0], r)
assert shared >= r["global_step"] - 3, f"only {shared} of {r['global_step']} pushes took the ring"
print(f"   {r['global_step']} pushes, staleness mean {r['staleness_mean']:.2f} max {r['staleness_max']}")
PY
# 250 samples over 3 workers: shards of 83-84, each ending in a short batch. samples counts what
# the pushes trained (it counted every push as a whole batch of 16: 288 an epoch).
make_data odd 250 --seed 13
"$MPIEXEC" -n 4 "$DTRAIN" --config "$SCRATCH/job.ini" --train-data "$SCRATCH/odd.h5" --epochs 2 \
  --mode async --num-ps 1 --run-dir "$SCRATCH/odd" >"$SCRATCH/odd.log" 2>&1 ||
  { cat "$SCRATCH/odd.log"; fail "async on 250 samples"; }
[[ $(json_get "$SCRATCH/odd/results.json" samples) == 500 ]] ||
  fail "async: samples $(json_get "$SCRATCH/odd/results.json" samples) for 2 epochs of 250"

echo "== 5b. async with --async-momentum dana and --delay-compensation: trains, checkpoints the momentum sum"
run dana 4 --mode async --num-ps 1 --async-momentum dana --delay-compensation 1
run plain 4 --mode async --num-ps 1
"$PY" - "$SCRATCH/dana" "$SCRATCH/plain" <<'PY'
import glob, json, math, sys
import h5py, numpy as np
r = json.load(open(sys.argv[1] + "/results.json"))
p = json.load(open(sys.argv[2] + "/results.json"))
assert r["stopped_by"] == "completed" and r["epochs_completed"] == 2, r["stopped_by"]
assert math.isfinite(r["test_loss"]) and math.isfinite(r["train_loss"]), r
def fits(run):  # the second epoch's mean training loss < half that of the first two logged steps
    import csv
    rows = [x for x in csv.DictReader(open(run + "/metrics.csv")) if x["kind"] == "train"]
    first = [float(x["loss"]) for x in rows[:2]]
    late = [float(x["loss"]) for x in rows if int(x["epoch"]) == 2]
    return late and sum(late) / len(late) < 0.5 * sum(first) / len(first), (first, late)
for run in sys.argv[1:3]:
    ok, losses = fits(run)
    assert ok, (run, losses)
ckpt = sorted(glob.glob(sys.argv[1] + "/ckpt-*.h5"))[-1]
with h5py.File(ckpt) as f:
    m = f["optimizer/m"][()]
    assert m.size == f["params"].size and np.isfinite(m).all() and np.abs(m).sum() > 0, "momentum sum"
print(f"   dana: test accuracy {r['test_accuracy']:.4f} (default recipe {p['test_accuracy']:.4f}), "
      f"checkpoint momentum sum |m|_1 = {np.abs(m).sum():.3g}")
PY

echo "== 6. option errors"
bad() {  # bad NP WORDS ARGS...
  local np=$1 words=$2
  shift 2
  local d=$SCRATCH/bad log=$SCRATCH/bad.log
  if "$MPIEXEC" -n "$np" "$DTRAIN" "${COMMON[@]}" --run-dir "$d" "$@" >"$log" 2>&1; then
    fail "accepted: $*"
  fi
  grep "dtrain: error:" "$log" | grep -qF -- "$words" || { cat "$log"; fail "no error naming '$words' for: $*"; }
  [[ ! -e $d ]] || fail "$d was created by a refused job"
}
bad 4 "--max-staleness" --mode sync --num-ps 1 --max-staleness 1
bad 3 "--replicas-to-aggregate" --mode sync --num-ps 0 --replicas-to-aggregate 2
bad 4 "--replicas-to-aggregate: 4 is more than the 3 workers" --mode sync --num-ps 1 --replicas-to-aggregate 4
bad 4 "option '--mode': invalid value 'bsp'" --mode bsp
echo "PASS"
