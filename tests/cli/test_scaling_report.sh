#!/usr/bin/env bash
# tests/cli/test_scaling_report.sh — the strong-scaling tools end to end on synthetic data:
# data-tools/run_strong_scaling.sh runs a real sweep (1 and 2 workers, sync and async with 1 ps, a
# fixed global batch and sample count) of the tests' tiny CNN on --synthetic data (given after `--`;
# no training set: the sweep must not ask for one), then data-tools/scaling_report.py makes the
# table, CSV and plot:
#   - one row per (mode, workers); every run trained on the same samples; the 1-worker row of each
#     mode has speedup 1 and efficiency 1; speedup = T1/TN recomputed from the runs' results.json;
#   - the step anatomy columns (data, compute, exposed comm, optimizer ms/step) equal the runs'
#     results.json step_*_ms fields, and compute is > 0;
#   - the PNG is a real image with the three panels drawn (speedup, efficiency, anatomy).
# Bad input: a global batch that does not split over the workers is one clear error, before any run.
# Skipped (77) when matplotlib is missing (.ci/install-deps.sh installs python3-matplotlib).
set -euo pipefail
source "$(dirname "$0")/common.sh"
if ! "$PY" -c "import matplotlib" 2>/dev/null; then
  echo "SKIPPED: $PY has no matplotlib (apt-get install python3-matplotlib; .ci/install-deps.sh does)"
  exit 77
fi
write_job "$SCRATCH/job.ini"  # no data paths: the sweep passes --synthetic, and needs no set
out=$SCRATCH/sweep
export DTRAIN MPIRUN=$MPIEXEC PYTHON=$PY
bash "$SRC/data-tools/run_strong_scaling.sh" --job "$SCRATCH/job.ini" --workers "1 2" \
  --modes "sync async" --ps 1 --global-batch 8 --steps 6 --out "$out" -- --synthetic 1x12x12:4 \
  >"$SCRATCH/sweep.log" 2>&1 ||
  { cat "$SCRATCH/sweep.log"; fail "run_strong_scaling.sh failed"; }
for f in report.md report.csv report.png; do
  [[ -s $out/$f ]] || { cat "$SCRATCH/sweep.log"; fail "no $f"; }
done

"$PY" - "$out" <<'PY' || fail "the report does not match the runs"
import csv, json, os, sys
import matplotlib.image as mpimg
import numpy as np
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/report.csv")))
assert len(rows) == 4, rows
runs = {}
for name in ("sync-w1", "sync-w2", "async-ps1-w1", "async-ps1-w2"):
    runs[name] = json.load(open(f"{out}/{name}/results.json"))
assert len({r["samples"] for r in runs.values()}) == 1, [r["samples"] for r in runs.values()]
for row in rows:
    name = ("sync-w" if row["mode"] == "sync" else "async-ps1-w") + row["workers"]
    r = runs[name]
    base = runs[name[:-1] + "1"]
    speedup = base["train_seconds"] / r["train_seconds"]
    assert abs(float(row["speedup"]) - speedup) <= 1e-3 * speedup, (row, speedup)
    assert abs(float(row["efficiency"]) - speedup / int(row["workers"])) <= 1e-3, row
    for col, key in (("data_ms", "step_data_ms"), ("compute_ms", "step_compute_ms"),
                     ("comm_ms", "step_exposed_comm_ms"), ("optimizer_ms", "step_optimizer_ms")):
        assert abs(float(row[col]) - r[key]) <= 1e-3 * max(1.0, abs(r[key])), (col, row[col], r[key])
    assert float(row["compute_ms"]) > 0, row
    if row["mode"] == "async":  # the ps's share in the optimizer: results.json's, within ps busy
        assert abs(float(row["ps_optimizer"]) - r["ps_optimizer_fraction"]) <= 1e-4, (row, r)
        assert 0 < float(row["ps_optimizer"]) <= float(row["ps_busy"]), row
    if row["workers"] == "1":
        assert float(row["speedup"]) == 1.0, row
md = open(f"{out}/report.md").read()
assert "exposed comm ms/step" in md and "compute ms/step" in md, md
img = mpimg.imread(f"{out}/report.png")[..., :3]
h, w = img.shape[:2]
assert w >= 1200 and h >= 300, img.shape
for i in range(3):
    panel = img[:, i * w // 3:(i + 1) * w // 3]
    colours = len(np.unique((panel * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    assert colours > 20, (i, colours)
print(f"4 rows match their runs; anatomy columns equal results.json; plot {w}x{h}")
PY

# Bad input: one clear error naming the option, no run started.
if bash "$SRC/data-tools/run_strong_scaling.sh" --job "$SCRATCH/job.ini" --workers "1 3" \
  --global-batch 8 --out "$SCRATCH/bad" >"$SCRATCH/bad.log" 2>&1; then
  fail "a global batch of 8 over 3 workers was accepted"
fi
grep -q "global-batch 8 does not split evenly over 3 workers" "$SCRATCH/bad.log" ||
  { cat "$SCRATCH/bad.log"; fail "no clear error for an uneven global batch"; }
[[ ! -e $SCRATCH/bad ]] || fail "the refused sweep created its output folder"
echo "PASS"
