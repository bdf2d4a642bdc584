#!/usr/bin/env bash
# tests/cli/test_log_rates.sh — the throughput figures stay training rates of the whole run
# (docs/observing.md) when evaluations and backup workers are in play. Evaluations are made slow
# with DTRAIN_FAULT=slow-eval (0.2 s more per test batch), so that their effect dwarfs timing
# noise; every check compares rates measured in the same run, with wide margins.
# - sync, 2 workers, 3 epochs: the epoch-end evaluation and checkpoint are in no log interval (as
#   an --eval-every evaluation inside an epoch is not): the first metrics.csv row of epochs 2 and 3
#   has about the other rows' ms/step and samples/s (it counted the evaluation: ×30 slower);
# - async, 1 ps + 2 workers, --eval-every, --max-steps: the chief evaluates alone while the other
#   worker trains on; the row whose interval holds that evaluation does not report more samples/s
#   than the run's usual rows (it divided the other's samples by the chief's time without the
#   evaluation: ×50), and results.json's samples_per_sec is no more than
#   samples_per_sec_after_first_step (it divided every worker's samples by the chief's time: ×2);
# - sync through the ps with a backup worker (3 workers, --replicas-to-aggregate 2): results.json's
#   samples_per_sec_after_first_step counts the samples of the gradients the ps used: it matches
#   the rate computed from each worker's used pushes and step time after its first step (it counted
#   the dropped ones too: ×1.4), and samples_per_sec is about samples / train_seconds.
set -euo pipefail
source "$(dirname "$0")/common.sh"

# 3×32×32 images: steps of a few ms, so that an interval outlasts the host's hiccups.
for set in "train 2048 61" "test 128 62" "test256 256 62"; do
  read -r name n seed <<<"$set"
  "$BIN/make_dataset" "$SCRATCH/$name.h5" --n "$n" --c 3 --h 32 --w 32 --classes 4 --seed "$seed" \
    --template-seed 9 >/dev/null
done
# Async: 1×12×12 images (steps well under a millisecond) and a shard longer than the run, so that
# the other worker trains many steps during each of the chief's evaluations.
make_data atrain 32768 --seed 63 --template-seed 8
make_data atest 32 --seed 64 --template-seed 8  # 2 test batches: 0.4 s an evaluation
write_job "$SCRATCH/job.ini"

echo "== sync, 2 workers, 3 epochs, slow epoch-end evaluations: the next epoch's first row"
d=$SCRATCH/sync
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test256.h5")
DTRAIN_FAULT=slow-eval run 2 "$d" --mode sync --num-ps 0 --epochs 3 --log-every 16
"$PY" - "$d" <<'PY' || { cat "$d.log"; fail "an epoch's first row counts the epoch-end evaluation"; }
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(f"{sys.argv[1]}/metrics.csv")) if r["kind"] == "train"]
firsts = [b for a, b in zip(rows, rows[1:]) if b["epoch"] != a["epoch"]]
assert len(firsts) == 2, [r["global_step"] for r in firsts]
ms = statistics.median(float(r["ms_per_step"]) for r in rows)
sps = statistics.median(float(r["samples_per_sec"]) for r in rows)
for r in firsts:  # 16 steps of a few ms each, against an evaluation of 8 × 0.2 s (×30 or more)
    print(f"epoch {r['epoch']} first row (step {r['global_step']}): {float(r['ms_per_step']):.1f} ms/step, "
          f"{float(r['samples_per_sec']):.0f} samples/s; median {ms:.1f} ms/step, {sps:.0f} samples/s")
    assert float(r["ms_per_step"]) < 10 * ms, r
    assert float(r["samples_per_sec"]) > sps / 10, r
PY

echo "== async, 1 ps + 2 workers, --eval-every 200, slow evaluations by the chief alone"
d=$SCRATCH/async
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/atrain.h5" --test-data "$SCRATCH/atest.h5")
DTRAIN_FAULT=slow-eval run 3 "$d" --mode async --num-ps 1 --max-steps 1500 --log-every 4 \
  --eval-every 200
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5")
"$PY" - "$d" <<'PY' || { cat "$d.log"; fail "async: the chief's lone evaluations inflate samples/s"; }
import csv, json, statistics, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/metrics.csv")))
train = [r for r in rows if r["kind"] == "train"]
sps = statistics.median(float(r["samples_per_sec"]) for r in train)
# The interval holding a lone evaluation: the train row after a test row in the same epoch (an
# epoch-end test row, all workers', is followed by the next epoch's).
held = {}
for i, t in enumerate(rows):
    after = [r for r in rows[i + 1:] if r["kind"] == "train"][:1]
    if t["kind"] == "test" and after and after[0]["epoch"] == t["epoch"]:
        held[after[0]["global_step"]] = after[0]
held = list(held.values())
assert held, "no train row after a lone evaluation"
for r in held:
    print(f"row at step {r['global_step']} (holds an evaluation): {float(r['samples_per_sec']):.0f} "
          f"samples/s; median of the run's rows {sps:.0f}")
    assert float(r["samples_per_sec"]) < 3 * sps, r
res = json.load(open(f"{d}/results.json"))
print(f"results.json samples_per_sec {res['samples_per_sec']:.0f}, "
      f"samples_per_sec_after_first_step {res['samples_per_sec_after_first_step']:.0f}")
assert res["samples_per_sec"] < 1.3 * res["samples_per_sec_after_first_step"], res
PY

echo "== sync through the ps, 3 workers with a backup (--replicas-to-aggregate 2)"
d=$SCRATCH/backup
run 4 "$d" --mode sync --num-ps 1 --replicas-to-aggregate 2 --epochs 2
"$PY" - "$d" <<'PY' || { cat "$d.log"; fail "samples_per_sec_after_first_step counts dropped gradients"; }
import json, sys
r = json.load(open(f"{sys.argv[1]}/results.json"))
used, dropped = r["pushes_per_worker"], r["dropped_per_worker"]
assert sum(dropped) >= sum(used) / 4, (used, dropped)  # about a third of the pushes come late
# The used samples' rate after the first steps from each worker's share of used pushes and its
# own step time after its first step (compute + exposed communication, plus the mean data wait
# and optimizer time): what the figure should be, without its timing.
rest = r["step_data_ms_after_first_step"] + r["step_optimizer_ms_after_first_step"]
steps_ms = [c + e + rest for c, e in zip(r["step_compute_ms_per_worker_after_first_step"],
                                         r["step_exposed_comm_ms_per_worker_after_first_step"])]
want = sum(1e3 * r["batch_size"] * u / ((u + d) * t) for u, d, t in zip(used, dropped, steps_ms))
after = r["samples_per_sec_after_first_step"]
chief = r["samples"] / r["train_seconds"]
print(f"pushes used {sum(used)}, dropped {sum(dropped)}; after the first step {after:.0f} samples/s, "
      f"used samples' rate from the step times {want:.0f} (×{after / want:.2f}); samples_per_sec "
      f"{r['samples_per_sec']:.0f}, samples / train_seconds {chief:.0f}")
assert 0.8 * want < after < 1.2 * want, r  # with the dropped ones: × (used + dropped) / used ≈ 1.5
assert r["samples_per_sec"] < 1.3 * chief and chief < 1.3 * r["samples_per_sec"], r
PY
echo "PASS"
