#!/usr/bin/env bash
# tests/cli/test_scaling_ceiling.sh — the host's ceiling of a strong-scaling sweep (issue 36):
# data-tools/run_strong_scaling.sh --ceiling runs, beside the 1- and 2-worker sync runs, 2
# independent one-worker runs started together with the 2-worker runs' per-worker batch
# (ceiling-w2/r1, r2), and data-tools/scaling_report.py — here under a Python that cannot import
# matplotlib (python3 -S: no site packages) — still writes the table and the CSV, with the
# ceiling columns: ceiling samples/s (the two runs' sum; the 1-worker row's own), efficiency vs
# ceiling = samples/s / ceiling samples/s, and no .png.
set -euo pipefail
source "$(dirname "$0")/common.sh"
make_data train 256 --seed 51
write_job "$SCRATCH/job.ini"
out=$SCRATCH/sweep
DTRAIN=$DTRAIN MPIRUN=$MPIEXEC bash "$SRC/data-tools/run_strong_scaling.sh" --job "$SCRATCH/job.ini" \
  --workers "1 2" --modes sync --global-batch 16 --steps 6 --out "$out" --ceiling --no-report \
  -- --train-data "$SCRATCH/train.h5" --summaries false >"$SCRATCH/sweep.out" 2>&1 ||
  { cat "$SCRATCH/sweep.out"; fail "the sweep failed"; }
for f in sync-w1 sync-w2 ceiling-w2/r1 ceiling-w2/r2; do
  [[ -f $out/$f/results.json ]] || { cat "$SCRATCH/sweep.out"; fail "no $f/results.json"; }
done
[[ ! -d $out/ceiling-w1 ]] || fail "a ceiling for 1 worker was run (the 1-worker run is its own)"
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
print(f"   ceiling samples/s: 1 worker {w1:.0f}, 2 workers {ceil2:.0f}; efficiency vs ceiling at 2: "
      f"{float(rows[2]['ceiling_eff']):.2f}, T1/(2 T2): {float(rows[2]['efficiency']):.2f}")
PY
grep -q "efficiency vs ceiling" "$SCRATCH/report.md" || fail "the table lacks the ceiling columns"
echo "test_scaling_ceiling: OK"
