#!/usr/bin/env bash
# tests/cli/test_scaling_ceiling.sh — the host's ceiling of a strong-scaling sweep (issue 36):
# data-tools/run_strong_scaling.sh --ceiling runs, beside the 1- and 2-worker sync runs, 2
# independent one-worker runs started together with the 2-worker runs' per-worker batch
# (ceiling-w2/r1, r2), and data-tools/scaling_report.py — here under a Python that cannot import
# matplotlib (python3 -S: no site packages) — still writes the table and the CSV, with the
# ceiling columns: ceiling samples/s (the two runs' sum; the 1-worker row's own), efficiency vs
# ceiling = samples/s / ceiling samples/s, and no .png; --lockstep adds the 2-worker sync run
# with --allreduce none (lockstep-w2: no gradient sum, the replicas apart, the workers in step)
# and the report its lock-step columns for the sync rows; the sweep's --wire-dtype and --bucket-mb
# reach every run but that one (which sends no sum, and dtrain refuses them there). With --threads 0
# each ceiling run gets the threads per rank of the N-worker run it stands beside (cores/N).
set -euo pipefail
source "$(dirname "$0")/common.sh"
make_data train 256 --seed 51
write_job "$SCRATCH/job.ini"
out=$SCRATCH/sweep
DTRAIN=$DTRAIN MPIRUN=$MPIEXEC bash "$SRC/data-tools/run_strong_scaling.sh" --job "$SCRATCH/job.ini" \
  --workers "1 2" --modes sync --global-batch 16 --steps 6 --out "$out" --ceiling --lockstep --no-report \
  -- --train-data "$SCRATCH/train.h5" --summaries false --wire-dtype bf16 --bucket-mb 1 \
  >"$SCRATCH/sweep.out" 2>&1 ||
  { cat "$SCRATCH/sweep.out"; fail "the sweep failed"; }
for f in sync-w1 sync-w2 ceiling-w2/r1 ceiling-w2/r2; do
  [[ -f $out/$f/results.json ]] || { cat "$SCRATCH/sweep.out"; fail "no $f/results.json"; }
done
[[ ! -d $out/ceiling-w1 ]] || fail "a ceiling for 1 worker was run (the 1-worker run is its own)"
[[ ! -d $out/lockstep-w1 ]] || fail "a lock-step run of 1 worker was made"
[[ $(json_get "$out/lockstep-w2/results.json" allreduce) == none ]] || fail "lockstep-w2: not --allreduce none"
[[ $(json_get "$out/lockstep-w2/results.json" num_workers) == 2 ]] || fail "lockstep-w2: not 2 workers"
[[ $(json_get "$out/sync-w2/results.json" allreduce) != none ]] || fail "sync-w2 ran without a sum"
# The sweep's --wire-dtype and --bucket-mb go to the runs that send a sum, not the lock-step one.
[[ $(json_get "$out/sync-w2/results.json" wire_dtype) == bf16 ]] || fail "sync-w2: not --wire-dtype bf16"
grep -q -- "--bucket-mb 1" "$out/sweep.log" || fail "the sweep dropped --bucket-mb from its runs"
! grep "^lockstep-w2:" "$out/sweep.log" | grep -q -- "--wire-dtype\|--bucket-mb" ||
  fail "the lock-step run was given how to send a sum it does not make"
grep -q "not summed" "$out/lockstep-w2.log" || fail "the lock-step run does not say its gradients are not summed"
# Each ceiling run: one worker, the 2-worker runs' per-worker batch, the sync runs' step count.
for k in 1 2; do
  [[ $(json_get "$out/ceiling-w2/r$k/results.json" num_workers) == 1 ]] || fail "ceiling run $k: not one worker"
  [[ $(json_get "$out/ceiling-w2/r$k/results.json" global_batch_size) == 8 ]] || fail "ceiling run $k: not batch 8"
  [[ $(json_get "$out/ceiling-w2/r$k/results.json" global_step) == 6 ]] || fail "ceiling run $k: not 6 steps"
done
/usr/bin/python3 -S "$SRC/data-tools/scaling_report.py" "$out" --out "$SCRATCH/report" \
  >"$SCRATCH/report.out" 2>&1 || { cat "$SCRATCH/report.out"; fail "the report failed without matplotlib"; }
grep -q "no matplotlib" "$SCRATCH/report.out" || { cat "$SCRATCH/report.out"; fail "no warning about matplotlib"; }
[[ -f $SCRATCH/report.md && -f $SCRATCH/report.csv && ! -f $SCRATCH/report.png ]] ||
  fail "expected report.md and report.csv and no report.png"
"$PY" - "$SCRATCH/report.csv" "$out" <<'PY'
import csv, json, sys
rows = {int(r["workers"]): r for r in csv.DictReader(open(sys.argv[1]))}
out = sys.argv[2]
ceil2 = sum(json.load(open(f"{out}/ceiling-w2/r{k}/results.json"))["samples_per_sec"] for k in (1, 2))
w1 = json.load(open(f"{out}/sync-w1/results.json"))["samples_per_sec"]
for w, want in ((1, w1), (2, ceil2)):
    got = float(rows[w]["ceiling_samples_per_s"])
    assert abs(got - want) <= 1e-4 * want, (w, got, want)
    eff = float(rows[w]["samples_per_s"]) / want
    assert abs(float(rows[w]["ceiling_eff"]) - eff) <= 1e-4, (w, rows[w]["ceiling_eff"], eff)
    assert float(rows[w]["ceiling_compute_ms"]) > 0, rows[w]
assert abs(float(rows[1]["ceiling_eff"]) - 1) < 1e-9
lock = json.load(open(f"{out}/lockstep-w2/results.json"))
sync2 = json.load(open(f"{out}/sync-w2/results.json"))
assert abs(float(rows[2]["lockstep_samples_per_s"]) - lock["samples_per_sec"]) <= 1e-4 * lock["samples_per_sec"], rows[2]
want = float(rows[2]["samples_per_s"]) / lock["samples_per_sec"]
assert abs(float(rows[2]["lockstep_eff"]) - want) <= 1e-4, (rows[2]["lockstep_eff"], want)
assert abs(float(rows[2]["lockstep_wait_ms"]) - lock["step_exposed_comm_ms_after_first_step"]) <= 0.01, rows[2]
assert rows[1]["lockstep_eff"] in ("", "nan"), rows[1]  # no lock-step run of 1 worker
print(f"   lock-step 2 workers {lock['samples_per_sec']:.0f} samples/s, the sync run's "
      f"{want:.2f} of it; waiting {lock['step_exposed_comm_ms_after_first_step']:.1f} ms/step")
print(f"   ceiling samples/s: 1 worker {w1:.0f}, 2 workers {ceil2:.0f}; efficiency vs ceiling at 2: "
      f"{float(rows[2]['ceiling_eff']):.2f}, T1/(2 T2): {float(rows[2]['efficiency']):.2f}")
PY
grep -q "efficiency vs ceiling" "$SCRATCH/report.md" || fail "the table lacks the ceiling columns"
grep -q "efficiency vs lock-step" "$SCRATCH/report.md" || fail "the table lacks the lock-step columns"
# --threads 0 (dtrain's cores/ranks): the 2-worker run's ranks get cores/2 threads each, and so
# must each of the 2 ceiling runs beside it (each its own one-rank job: they took all the cores).
DTRAIN=$DTRAIN MPIRUN=$MPIEXEC bash "$SRC/data-tools/run_strong_scaling.sh" --job "$SCRATCH/job.ini" \
  --workers 2 --modes sync --global-batch 16 --steps 2 --threads 0 --out "$SCRATCH/t0" --ceiling \
  --no-report -- --train-data "$SCRATCH/train.h5" --summaries false >"$SCRATCH/t0.out" 2>&1 ||
  { cat "$SCRATCH/t0.out"; fail "the --threads 0 sweep failed"; }
"$PY" - "$SCRATCH/t0" <<'PY' || fail "--threads 0: the ceiling runs' threads differ from the 2-worker run's"
import json, sys
out = sys.argv[1]
sync = json.load(open(f"{out}/sync-w2/results.json"))["threads_per_rank"]
ceil = [json.load(open(f"{out}/ceiling-w2/r{k}/results.json"))["threads_per_rank"] for k in (1, 2)]
print(f"   --threads 0: sync-w2 threads per rank {sync}, ceiling runs {ceil}")
assert len(set(sync)) == 1 and all(c == [sync[0]] for c in ceil), (sync, ceil)
PY
echo "test_scaling_ceiling: OK"
