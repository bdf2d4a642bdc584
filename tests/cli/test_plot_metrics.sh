#!/usr/bin/env bash
# tests/cli/test_plot_metrics.sh — data-tools/plot_metrics.py on the metrics.csv of a real short run
# (sync, 2 workers, evaluations every 8 steps; and a resumed async run, whose rows repeat steps):
# the PNG exists, is a valid PNG of the expected size, and is not blank (many distinct colours
# in both panels: the curves were drawn). A missing metrics.csv is one clear error. Skipped (77)
# when matplotlib is missing (.ci/install-deps.sh installs python3-matplotlib).
set -euo pipefail
source "$(dirname "$0")/common.sh"
if ! "$PY" -c "import matplotlib" 2>/dev/null; then
  echo "SKIPPED: $PY has no matplotlib (apt-get install python3-matplotlib; .ci/install-deps.sh does)"
  exit 77
fi
plot=${SRC:?}/data-tools/plot_metrics.py

make_data train 512 --seed 21 --template-seed 9
make_data test 128 --seed 22 --template-seed 9
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5"
        --epochs 2 --log-every 2)
run 2 "$SCRATCH/sync" --mode sync --num-ps 0 --eval-every 8
run 3 "$SCRATCH/async" --mode async --num-ps 1 --max-steps 12
run 3 "$SCRATCH/async" --mode async --num-ps 1 --resume

for x in time step; do
  "$PY" "$plot" "$SCRATCH/sync" "$SCRATCH/async/metrics.csv" --x $x --label sync async \
    --out "$SCRATCH/plot_$x.png" >"$SCRATCH/plot_$x.log" 2>&1 || { cat "$SCRATCH/plot_$x.log"; fail "plot_metrics.py --x $x"; }
done
"$PY" - "$SCRATCH" <<'PY' || fail "the plots are missing or blank"
import sys
import matplotlib.image as mpimg
import numpy as np
for x in ("time", "step"):
    path = f"{sys.argv[1]}/plot_{x}.png"
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    img = mpimg.imread(path)[..., :3]
    h, w = img.shape[:2]
    assert h >= 200 and w >= 400, (path, img.shape)
    for name, panel in (("left", img[:, : w // 2]), ("right", img[:, w // 2 :])):
        colours = len(np.unique((panel * 255).astype(np.uint8).reshape(-1, 3), axis=0))
        inked = float((panel.mean(axis=2) < 0.9).mean())
        assert colours > 20 and 0.005 < inked < 0.6, f"{path} {name} panel: {colours} colours, {inked:.3f} inked"
    print(f"{path}: {w}x{h}, both panels drawn")
PY
set +e
"$PY" "$plot" "$SCRATCH/nowhere" --out "$SCRATCH/none.png" >"$SCRATCH/err.log" 2>&1
rc=$?
set -e
[[ $rc -ne 0 ]] && grep -q "no metrics.csv at '$SCRATCH/nowhere" "$SCRATCH/err.log" || { cat "$SCRATCH/err.log"; fail "missing input: exit $rc"; }
[[ ! -e $SCRATCH/none.png ]] || fail "a PNG was written for a missing input"
echo "PASS"
