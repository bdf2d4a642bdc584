#!/usr/bin/env bash
# tests/cli/test_plot_metrics.sh — data-tools/plot_metrics.py on the metrics.csv of a real short run
# (sync, 2 workers, evaluations every 8 steps; and a resumed async run, whose rows repeat steps):
# the PNG exists, is a valid PNG of the expected size, and is not blank (many distinct colours
# in both panels: the curves were drawn). A missing metrics.csv is one clear error. Bad input
# (a non-numeric value, a short row, a binary file; an unknown --out format, an output that exists
# without --force, is a directory or lies under a file) is one line naming FILE:LINE and the column,
# or the file or option, without a traceback, and no plot is written or replaced; an unfinished
# last line (a run still writing) is skipped with a warning; a Python without matplotlib gets one
# error. `$` in a run dir's name, a --label or the --title is drawn as it is (no mathtext), and a
# plot that fails to be written leaves no folder the tool created. Skipped (77) when matplotlib is missing (.ci/install-deps.sh installs python3-matplotlib).
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

# plot_fails RC NEEDLE ARGS...: plot_metrics.py must exit RC with NEEDLE on stderr, no traceback,
# and write no file $SCRATCH/bad.png (nor leave a temporary).
plot_fails() {
  local want=$1 needle=$2
  shift 2
  local rc=0
  "$PY" "$plot" "$@" >"$SCRATCH/err.log" 2>&1 || rc=$?
  [[ $rc -eq $want ]] || { cat "$SCRATCH/err.log"; fail "exit $rc (want $want): $*"; }
  grep -qF -- "$needle" "$SCRATCH/err.log" || { cat "$SCRATCH/err.log"; fail "no '$needle' in the message for: $*"; }
  ! grep -q Traceback "$SCRATCH/err.log" || { cat "$SCRATCH/err.log"; fail "traceback for: $*"; }
  [[ ! -f $SCRATCH/bad.png && -z $(ls -A "$SCRATCH" | grep '^\.bad\.png\.tmp') ]] || fail "a plot was written for: $*"
  echo "-- exit $rc: $(head -1 "$SCRATCH/err.log")"
}
csv=$SCRATCH/sync/metrics.csv
n=$(wc -l <"$csv")
sed '3s/^\(train,[^,]*,[^,]*,[^,]*,\)[^,]*/\1n\/a/' "$csv" >"$SCRATCH/badnum.csv"
plot_fails 1 "$SCRATCH/badnum.csv:3: column 'loss' is 'n/a', expected a number" "$SCRATCH/badnum.csv" --out "$SCRATCH/bad.png"
sed '3s/^\([^,]*,[^,]*,[^,]*\),.*/\1/' "$csv" >"$SCRATCH/short.csv"
plot_fails 1 "$SCRATCH/short.csv:3: 3 fields, but the header has" "$SCRATCH/short.csv" --out "$SCRATCH/bad.png"
cp "$SCRATCH/train.h5" "$SCRATCH/binary.csv"
plot_fails 1 "$SCRATCH/binary.csv: not a text CSV file" "$SCRATCH/binary.csv" --out "$SCRATCH/bad.png"
# One --label per run: a usage error (exit 2) before anything is read.
plot_fails 2 "--label: 1 names for 2 runs" "$SCRATCH/sync" "$SCRATCH/async" --label one --out "$SCRATCH/bad.png"
plot_fails 2 "--out $SCRATCH/bad.h5x: unknown plot format '.h5x'" "$SCRATCH/nowhere" --out "$SCRATCH/bad.h5x"
mkdir -p "$SCRATCH/bad.png"
plot_fails 1 "cannot write $SCRATCH/bad.png: it is a directory" "$SCRATCH/sync" --out "$SCRATCH/bad.png" --force
rmdir "$SCRATCH/bad.png" || fail "wrote into the directory $SCRATCH/bad.png"
plot_fails 1 "cannot write $SCRATCH/job.ini/bad.png: $SCRATCH/job.ini is not a directory" "$SCRATCH/sync" --out "$SCRATCH/job.ini/bad.png"
# A Python without matplotlib (one that hides it): one error naming it, not an ImportError traceback.
cat >"$SCRATCH/no_matplotlib.py" <<'PY'
import runpy, sys
sys.modules["matplotlib"] = None  # import matplotlib: ImportError
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
PY
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$PY" "$SCRATCH/no_matplotlib.py" >"$SCRATCH/no_matplotlib"
chmod +x "$SCRATCH/no_matplotlib"
PY=$SCRATCH/no_matplotlib plot_fails 1 "plot_metrics.py: error: no matplotlib in" "$SCRATCH/sync" --out "$SCRATCH/bad.png"
# A run still writing: the unfinished last line (no newline) is skipped with a warning.
{ cat "$csv"; printf 'train,99999,9,99.0,0.1'; } >"$SCRATCH/writing.csv"
"$PY" "$plot" "$SCRATCH/writing.csv" --out "$SCRATCH/writing.png" >"$SCRATCH/err.log" 2>&1 ||
  { cat "$SCRATCH/err.log"; fail "a metrics.csv with an unfinished last line was refused"; }
grep -qF "warning: $SCRATCH/writing.csv:$((n + 1)): skipping the unfinished last line" "$SCRATCH/err.log" ||
  { cat "$SCRATCH/err.log"; fail "no warning about the unfinished last line"; }
[[ -s $SCRATCH/writing.png ]] || fail "no plot for a metrics.csv with an unfinished last line"
# An existing plot is kept without --force, replaced with it; no extension: OUT.png, and said so.
before=$(md5sum <"$SCRATCH/plot_time.png")
plot_fails 1 "$SCRATCH/plot_time.png: exists; not overwriting (use --force)" "$SCRATCH/async" --out "$SCRATCH/plot_time.png"
[[ $(md5sum <"$SCRATCH/plot_time.png") == "$before" ]] || fail "a refused plot changed plot_time.png"
"$PY" "$plot" "$SCRATCH/async" --out "$SCRATCH/plot_time.png" --force >/dev/null || fail "--force"
[[ $(md5sum <"$SCRATCH/plot_time.png") != "$before" ]] || fail "--force did not replace plot_time.png"
"$PY" "$plot" "$SCRATCH/async" --out "$SCRATCH/noext" >"$SCRATCH/err.log" 2>&1 || fail "--out without an extension"
grep -qF "wrote $SCRATCH/noext.png" "$SCRATCH/err.log" && [[ -s $SCRATCH/noext.png && ! -e $SCRATCH/noext ]] ||
  { cat "$SCRATCH/err.log"; fail "--out without an extension: not written to (or not named as) noext.png"; }
# Dollar signs in a run dir's name (the default legend label), a --label or the --title are drawn
# as they are: matplotlib parsed them as mathtext (`\alph` unknown, a lone `^`: a traceback).
dollar=$SCRATCH/'bs_$x_$'
mkdir -p "$dollar"
cp "$csv" "$dollar/metrics.csv"
"$PY" - "$plot" "$dollar" "$SCRATCH/async" "$SCRATCH/dollars/plot.png" >"$SCRATCH/err.log" 2>&1 <<'PY' ||
import runpy, sys
import matplotlib
matplotlib.use("Agg")
from matplotlib.figure import Figure
seen = []
save = Figure.savefig
def savefig(fig, *args, **kwargs):
    seen.append(([t.get_text() for t in fig.axes[0].get_legend().get_texts()], fig._suptitle.get_text()))
    return save(fig, *args, **kwargs)
Figure.savefig = savefig
plot, run1, run2, out = sys.argv[1:]
sys.argv = [plot, run1, run2, "--label", "bs_$x_$", "lr $x^$", "--title", r"lr $\alph$", "--out", out]
runpy.run_path(plot, run_name="__main__")
legend, title = seen[0]
print(legend, title)
assert legend[0] == r"bs_\$x_\$ train" and r"lr \$x^\$ train" in legend, legend  # escaped: drawn as $
assert title == r"lr \$\alph\$", title
PY
  { cat "$SCRATCH/err.log"; fail "labels or a title with \$ signs were not drawn as they are"; }
[[ -s $SCRATCH/dollars/plot.png ]] || fail "no plot with \$ signs in the labels"
"$PY" "$plot" "$dollar" --title 'speed $x^$' --out "$SCRATCH/dollars/default.png" >"$SCRATCH/err.log" 2>&1 &&
  [[ -s $SCRATCH/dollars/default.png ]] ||
  { cat "$SCRATCH/err.log"; fail "a run dir named bs_\$x_\$ (the default label) was not plotted"; }
# A plot that fails to be written leaves no folder that plot_metrics.py created for --out.
rc=0
"$PY" - "$plot" "$SCRATCH/sync" "$SCRATCH/newdir/sub/plot.png" >"$SCRATCH/err.log" 2>&1 <<'PY' || rc=$?
import runpy, sys
import matplotlib
matplotlib.use("Agg")
from matplotlib.figure import Figure
def disk_full(fig, path, *args, **kwargs):
    open(path, "w").write("partial")
    raise OSError(28, "No space left on device")
Figure.savefig = disk_full
plot, run, out = sys.argv[1:]
sys.argv = [plot, run, "--out", out]
runpy.run_path(plot, run_name="__main__")
PY
[[ $rc == 1 ]] && grep -qF "cannot write $SCRATCH/newdir/sub/plot.png: No space left on device" "$SCRATCH/err.log" &&
  [[ ! -e $SCRATCH/newdir ]] || { cat "$SCRATCH/err.log"; fail "a failed plot: exit $rc, want 1, one error and no folder newdir left"; }
echo "PASS"
