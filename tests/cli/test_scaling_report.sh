#!/usr/bin/env bash
# tests/cli/test_scaling_report.sh — the strong-scaling tools end to end on synthetic data:
# data-tools/run_strong_scaling.sh runs a real sweep (1 and 2 workers, sync and async with 1 ps, a
# fixed global batch and sample count) of the tests' tiny CNN on --synthetic data (given after `--`;
# no training set: the sweep must not ask for one), then data-tools/scaling_report.py makes the
# table, CSV and plot:
#   - one row per (mode, workers); every run trained on the same samples; the 1-worker row of each
#     mode has speedup 1 and efficiency 1; speedup = T1/TN recomputed from the runs' results.json;
#   - the step anatomy columns (data, compute, exposed comm, optimizer ms/step) equal the runs'
#     results.json step_*_ms fields, and compute is > 0; the workers' compute spread and slowest
#     worker follow from results.json's per-worker compute;
#   - the PNG is a real image with the three panels drawn (speedup, efficiency, anatomy).
# Bad input: a global batch that does not split over the workers, an empty --workers or --modes, an
# option without its value: one clear error (exit 2), before any run. scaling_report.py: a run folder
# given twice counts once; results.json with wrongly typed values (num_workers "three" or 0,
# train_seconds null, samples "lots", an array) are skipped with a warning naming the file and key
# (no usable run: exit 1); a bad launcher.json is ignored with a warning; an existing report is kept
# without --force; an output that is a directory or under a file, or a plot that fails to write,
# leaves no .md/.csv/.png behind; never a traceback. Only a whole folder name ceiling-wN /
# lockstep-wN below DIR marks such runs (not ceiling-w8-study); a ceiling folder missing one of
# its N runs is left out with a note; a resumed run is skipped with a warning naming it. Runs of
# different problems (each run dir's config.ini: model, data, optimizer, precision; not the
# per-run keys such as run-dir, max-steps or threads, nor config_crc32, which covers them; without
# config.ini results.json's config_file) or global batches in one series, or a base run of 0 s,
# get a note, and a real sweep none; without matplotlib, --force removes the earlier report's
# plot. The plot labels sync through a ps apart from sync allreduce, draws a `$` in --title as it
# is, and a failed report leaves no folder it made. run_strong_scaling.sh reads numbers as
# decimal (010 is 10) and runs a count listed twice once; slurm/submit_strong_scaling.sh --help
# prints its usage, --host is one error, and an --out with a single quote reaches the report job.
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
    # The stragglers' columns, from each worker's compute after its first step: always there in
    # sync (every worker runs every step); an async worker may get a single push in so short a run.
    per = r.get("step_compute_ms_per_worker_after_first_step")
    assert per is not None or row["mode"] == "async", (name, sorted(r))
    if per is None:
        assert row["compute_spread_after1"] == "" and row["slowest_after1"] == "", row
        continue
    assert len(per) == int(row["workers"]) and min(per) > 0, per
    spread = max(per) / min(per)
    assert abs(float(row["compute_spread_after1"]) - spread) <= 1e-3 * spread, (row, per)
    assert int(row["slowest_after1"]) == per.index(max(per)), (row, per)
md = open(f"{out}/report.md").read()
assert "exposed comm ms/step" in md and "compute ms/step" in md, md
# One job file, one global batch, one sample count: the same problem, no note saying otherwise
# (results.json's config_crc32 differs between every two runs: it covers run-dir and max-steps).
assert len({r["config_crc32"] for r in runs.values()}) > 1, "the test no longer tells CRCs apart"
assert "not the same problem" not in md, md
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
# sweep_fails NEEDLE ARGS...: run_strong_scaling.sh --plan must exit 2 with NEEDLE, no shell error.
sweep_fails() {
  local needle=$1 rc=0
  shift
  bash "$SRC/data-tools/run_strong_scaling.sh" --job "$SCRATCH/job.ini" --plan "$@" >"$SCRATCH/bad.log" 2>&1 || rc=$?
  [[ $rc -eq 2 ]] && grep -qF -- "$needle" "$SCRATCH/bad.log" && ! grep -q "unbound variable" "$SCRATCH/bad.log" ||
    { cat "$SCRATCH/bad.log"; fail "run_strong_scaling.sh $*: exit $rc, want 2 and '$needle'"; }
  echo "-- exit $rc: $(head -1 "$SCRATCH/bad.log")"
}
sweep_fails "--workers: empty list" --workers ""
sweep_fails "--modes: empty list" --modes " "
sweep_fails "--out needs a value" --workers 1 --out
sweep_fails "--ps needs a value" --ps
# --plan (what slurm/submit_strong_scaling.sh submits) cannot hold the ceiling or lock-step runs:
# refused, not dropped without a word.
sweep_fails "--ceiling and --lockstep are measured by this script" --workers "1 2" --ceiling
sweep_fails "--ceiling and --lockstep are measured by this script" --workers "1 2" --lockstep
# Numbers are decimal everywhere: 010 was 10 ranks for sync but 8 (octal) for async, and 08 a
# shell error; a count listed twice was two runs into one run folder.
bash "$SRC/data-tools/run_strong_scaling.sh" --job "$SCRATCH/job.ini" --plan --out "$SCRATCH/p0" \
  --workers "01 2 02 2" --ps "1 01" --steps 010 --global-batch 016 >"$SCRATCH/plan0.txt" 2>&1 ||
  { cat "$SCRATCH/plan0.txt"; fail "run_strong_scaling.sh --plan with leading zeros failed"; }
"$PY" - "$SCRATCH/plan0.txt" <<'PY' || fail "the plan with leading zeros is not read as decimal"
import shlex, sys
runs = {}
for line in open(sys.argv[1]):
    w = shlex.split(line)
    assert w[0] not in runs, f"{w[0]} twice"
    runs[w[0]] = (int(w[1]), w[w.index("--max-steps") + 1], w[w.index("--global-batch-size") + 1])
want = {"sync-w1": (1, "10", "16"), "sync-w2": (2, "10", "16"),
        "async-ps1-w1": (2, "10", "16"), "async-ps1-w2": (3, "20", "16")}
assert runs == want, runs
PY
bash "$SRC/data-tools/run_strong_scaling.sh" --job "$SCRATCH/job.ini" --plan --out "$SCRATCH/p0" \
  --workers 08 --modes sync --global-batch 16 2>&1 | grep -q "^sync-w8 8 " || fail "--workers 08 not read as 8"
# slurm/submit_strong_scaling.sh (an sbatch stand-in that logs its calls): --help shows its usage
# (it was run_strong_scaling.sh's text, eval'ed as plan lines: a syntax error), --host is refused,
# and a worker count given twice is one job.
mkdir -p "$SCRATCH/fakebin"
printf '#!/bin/bash\necho "$*" >>"%s/sbatch.log"\necho 1234\n' "$SCRATCH" >"$SCRATCH/fakebin/sbatch"
chmod +x "$SCRATCH/fakebin/sbatch"
submit() { PATH=$SCRATCH/fakebin:$PATH REPORT=0 bash "$SRC/slurm/submit_strong_scaling.sh" "$@"; }
submit --help >"$SCRATCH/submit.log" 2>&1 && grep -q "^# Usage: *slurm/submit_strong_scaling.sh" "$SCRATCH/submit.log" ||
  { cat "$SCRATCH/submit.log"; fail "submit_strong_scaling.sh --help did not print its usage"; }
rc=0
submit --host >"$SCRATCH/submit.log" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q "error: --host describes the machine it runs on" "$SCRATCH/submit.log" ||
  { cat "$SCRATCH/submit.log"; fail "submit_strong_scaling.sh --host: exit $rc, want 2 and one error"; }
[[ ! -e $SCRATCH/sbatch.log ]] || fail "submit_strong_scaling.sh --help/--host submitted a job"
submit --job "$SCRATCH/job.ini" --out "$SCRATCH/sub" --workers "2 2" --modes sync >"$SCRATCH/submit.log" 2>&1 ||
  { cat "$SCRATCH/submit.log"; fail "submit_strong_scaling.sh with a stand-in sbatch failed"; }
[[ $(wc -l <"$SCRATCH/sbatch.log") == 1 ]] || { cat "$SCRATCH/sbatch.log"; fail "--workers \"2 2\" submitted more than one job"; }
# Relative --job, --out, --keep-runs and DTRAIN are the caller's: resolved against the directory
# the script was started in, not the repository root it runs dtrain from.
mkdir -p "$SCRATCH/caller"
cp "$SCRATCH/job.ini" "$SCRATCH/caller/rel.ini"
ln -sf "$DTRAIN" "$SCRATCH/caller/dt"
rm -rf "$SRC/rel-sweep" "$SRC/rel-keep.tgz"
(cd "$SCRATCH/caller" && DTRAIN=./dt bash "$SRC/data-tools/run_strong_scaling.sh" --job rel.ini \
  --workers 1 --modes sync --global-batch 8 --steps 2 --out rel-sweep --keep-runs rel-keep.tgz \
  --no-report -- --synthetic 1x12x12:4) >"$SCRATCH/rel.log" 2>&1 ||
  { cat "$SCRATCH/rel.log"; fail "run_strong_scaling.sh with relative paths failed"; }
[[ -f $SCRATCH/caller/rel-sweep/sync-w1/results.json && -f $SCRATCH/caller/rel-keep.tgz ]] ||
  { cat "$SCRATCH/rel.log"; fail "relative --out/--keep-runs not written in the caller's directory"; }
[[ ! -e $SRC/rel-sweep && ! -e $SRC/rel-keep.tgz ]] || fail "relative --out/--keep-runs went to the repository"

report=$SRC/data-tools/scaling_report.py
# report_fails RC NEEDLE ARGS...: scaling_report.py must exit RC with NEEDLE on stderr, no traceback,
# and write none of $SCRATCH/bad.md, .csv, .png (no temporaries either).
report_fails() {
  local want=$1 needle=$2 rc=0
  shift 2
  "$PY" "$report" "$@" >"$SCRATCH/report.log" 2>&1 || rc=$?
  [[ $rc -eq $want ]] && grep -qF -- "$needle" "$SCRATCH/report.log" && ! grep -q Traceback "$SCRATCH/report.log" ||
    { cat "$SCRATCH/report.log"; fail "scaling_report.py $*: exit $rc, want $want and '$needle'"; }
  for f in bad.md bad.csv bad.png; do [[ ! -f $SCRATCH/$f ]] || fail "scaling_report.py $*: wrote $f"; done
  [[ -z $(ls -A "$SCRATCH" | grep '^\.bad\..*\.tmp-') ]] || fail "scaling_report.py $*: left temporaries"
  echo "-- exit $rc: $(grep -m1 error: "$SCRATCH/report.log")"
}
sums=$(cat "$out"/report.{md,csv,png} | md5sum)
report_fails 1 "$out/report.md: exists; not overwriting (use --force)" "$out" --out "$out/report"
[[ $(cat "$out"/report.{md,csv,png} | md5sum) == "$sums" ]] || fail "a refused report changed the old one"
"$PY" "$report" "$out" "$out" "$out/sync-w1" --out "$out/report" --force --title again >"$SCRATCH/report.log" 2>&1 ||
  { cat "$SCRATCH/report.log"; fail "scaling_report.py --force"; }
grep -q "(4 runs)" "$SCRATCH/report.log" || { tail -1 "$SCRATCH/report.log"; fail "folders given twice were counted twice"; }
[[ $(cat "$out"/report.{md,csv,png} | md5sum) != "$sums" ]] || fail "--force did not replace the report"
mkdir -p "$SCRATCH/bad.png"
report_fails 1 "cannot write $SCRATCH/bad.png: it is a directory" "$out" --out "$SCRATCH/bad" --force
rmdir "$SCRATCH/bad.png" || fail "scaling_report.py wrote into the directory bad.png"
report_fails 1 "cannot write $SCRATCH/job.ini/bad.md: $SCRATCH/job.ini is not a directory" "$out" --out "$SCRATCH/job.ini/bad"
# A plot that fails to write (disk full): no .md or .csv either.
rc=0
"$PY" -B - "$SRC/data-tools" "$out" "$SCRATCH/bad" >"$SCRATCH/report.log" 2>&1 <<'PY' || rc=$?
import sys
sys.path.insert(0, sys.argv[1])
import scaling_report
def disk_full(path, *args):
    open(path, "w").write("partial")
    raise OSError(28, "No space left on device")
scaling_report.write_plot = disk_full
sys.argv = ["scaling_report.py", sys.argv[2], "--out", sys.argv[3]]
scaling_report.main()
PY
[[ $rc -eq 1 ]] && grep -qF "cannot write $SCRATCH/bad.png: No space left on device" "$SCRATCH/report.log" ||
  { cat "$SCRATCH/report.log"; fail "a failed plot: exit $rc, want 1 and a message naming bad.png"; }
for f in bad.md bad.csv bad.png; do [[ ! -f $SCRATCH/$f ]] || fail "a failed plot left $f"; done
[[ -z $(ls -A "$SCRATCH" | grep '^\.bad\..*\.tmp-') ]] || fail "a failed plot left temporaries"
# Wrongly typed results.json values: those runs are skipped with a warning naming file and key.
"$PY" - "$out/sync-w1" "$SCRATCH/runs" <<'PY'
import json, os, shutil, sys
src, dst = sys.argv[1:]
good = json.load(open(f"{src}/results.json"))
bad = {"strworkers": {"num_workers": "three"}, "zeroworkers": {"num_workers": 0},
       "nulltime": {"train_seconds": None}, "strsamples": {"samples": "lots"}}
for name, change in bad.items():
    os.makedirs(f"{dst}/bad/{name}")
    json.dump({**good, **change}, open(f"{dst}/bad/{name}/results.json", "w"))
os.makedirs(f"{dst}/bad/array")
json.dump([good], open(f"{dst}/bad/array/results.json", "w"))
shutil.copytree(src, f"{dst}/good")
json.dump({"elapsed_seconds": 2.0, "cpu_seconds": 1.5, "ranks": 1, "cores": 2, "load1_before": "x",
           "load1_after": 0.5}, open(f"{dst}/good/launcher.json", "w"))
PY
"$PY" "$report" "$SCRATCH/runs" --out "$SCRATCH/mixed" >"$SCRATCH/report.log" 2>&1 ||
  { cat "$SCRATCH/report.log"; fail "scaling_report.py refused a folder with one good run"; }
for w in "bad/strworkers/results.json: num_workers = \"three\", expected an integer >= 1" \
         "bad/zeroworkers/results.json: num_workers = 0, expected an integer >= 1" \
         "bad/nulltime/results.json: train_seconds = null, expected a number >= 0" \
         "bad/strsamples/results.json: samples = \"lots\", expected an integer >= 0" \
         "bad/array/results.json: not a JSON object" \
         "ignoring $SCRATCH/runs/good/launcher.json: load1_before = \"x\""; do
  grep -qF -- "$w" "$SCRATCH/report.log" || { cat "$SCRATCH/report.log"; fail "no warning '$w'"; }
done
! grep -q Traceback "$SCRATCH/report.log" && grep -q "(1 runs)" "$SCRATCH/report.log" ||
  { cat "$SCRATCH/report.log"; fail "the bad runs were not skipped"; }
report_fails 1 "no usable results.json under $SCRATCH/runs/bad (5 skipped" "$SCRATCH/runs/bad" --out "$SCRATCH/bad"
# An integer too large for a float (JSON allows any number of digits): skipped with a warning, no
# OverflowError. A ceiling run whose samples_per_sec is null or absent: that ceiling is left out
# with a note naming its file, no KeyError. A run folder whose name is not UTF-8 (a note names
# it): the report is written, the name as its bytes, no UnicodeEncodeError.
odd=$SCRATCH/$'odd\xff'
"$PY" - "$out" "$odd" <<'PY'
import json, os, shutil, sys
src, dst = sys.argv[1], os.fsdecode(os.fsencode(sys.argv[2]))
good = json.load(open(f"{src}/sync-w1/results.json"))
def put(d, **kw):
    os.makedirs(f"{dst}/{d}")
    r = {**good, **kw}
    for k in [k for k, v in kw.items() if v is KeyError]:
        del r[k]
    open(f"{dst}/{d}/results.json", "w").write(json.dumps(r))
put("sync-w1")
put("hugeworkers", num_workers=10**400)
put("ceiling-w2/r1", samples_per_sec=None)
put("ceiling-w2/r2", samples_per_sec=KeyError)
put("lockstep-w2", num_workers=2)  # not --allreduce none: left out with a note naming it
PY
"$PY" "$report" "$odd" --out "$odd/report" >"$SCRATCH/report.log" 2>&1 ||
  { cat -v "$SCRATCH/report.log"; fail "scaling_report.py failed on a huge integer, a null ceiling or a non-UTF-8 folder"; }
for w in "hugeworkers/results.json: num_workers = 10000000000000000000... (401 characters), expected an integer >= 1" \
         "ceiling-w2/r1/results.json has no samples_per_sec; that ceiling is left out" \
         "ceiling-w2/r2/results.json has no samples_per_sec; that ceiling is left out" \
         "$odd/lockstep-w2/results.json: not an --allreduce none run"; do
  grep -aqF -- "$w" "$SCRATCH/report.log" || { cat -v "$SCRATCH/report.log"; fail "no warning or note '$w'"; }
done
grep -aqF -- "$odd/lockstep-w2/results.json: not an --allreduce none run" "$odd/report.md" ||
  fail "report.md does not name the non-UTF-8 folder as its bytes"
! grep -aq Traceback "$SCRATCH/report.log" || { cat -v "$SCRATCH/report.log"; fail "a traceback"; }
# A sweep kept in a folder whose name merely contains ceiling-wN / lockstep-wN: its runs are a
# series (only a whole folder name below DIR marks ceiling and lock-step runs). A ceiling folder
# with 1 of its 2 runs (one failed): left out with a note, not half the ceiling. A resumed run
# (session_first_step > 0: train_seconds of its last session only): skipped with a warning
# naming it, not a speedup.
study=$SCRATCH/ceiling-w8-study/lockstep-w2-tests
"$PY" - "$out" "$study" <<'PY'
import json, os, sys
src, dst = sys.argv[1:]
good = json.load(open(f"{src}/sync-w1/results.json"))
def put(d, **kw):
    os.makedirs(f"{dst}/{d}")
    json.dump({**good, **kw}, open(f"{dst}/{d}/results.json", "w"))
put("sync-w1", train_seconds=8.0, samples_per_sec=100.0)
put("sync-w2", num_workers=2, world_size=2, train_seconds=5.0, samples_per_sec=160.0)
put("ceiling-w2/r2", samples_per_sec=150.0)
put("resumed/sync-w4", num_workers=4, world_size=4, train_seconds=0.5, samples_per_sec=900.0,
    session_first_step=8)
PY
"$PY" "$report" "$study" --out "$SCRATCH/study" >"$SCRATCH/report.log" 2>&1 ||
  { cat "$SCRATCH/report.log"; fail "scaling_report.py refused a sweep in a folder named ceiling-w8-study"; }
grep -qF "skipping $study/resumed/sync-w4/results.json: a resumed run (session_first_step = 8)" "$SCRATCH/report.log" ||
  { cat "$SCRATCH/report.log"; fail "the resumed run is not named in a warning"; }
grep -qF "ceiling for 2 workers: 1 runs found in $study/ceiling-w2, 2 expected; that ceiling is left out" "$SCRATCH/study.md" ||
  { cat "$SCRATCH/study.md"; fail "no note on the incomplete ceiling"; }
"$PY" - "$SCRATCH/study.csv" <<'PY' || fail "the study's report is wrong"
import csv, sys
rows = {int(r["workers"]): r for r in csv.DictReader(open(sys.argv[1]))}
assert sorted(rows) == [1, 2], sorted(rows)  # no row of the resumed 4-worker run
assert abs(float(rows[2]["speedup"]) - 1.6) < 1e-6, rows[2]["speedup"]
assert rows[2]["ceiling_samples_per_s"] == "" and rows[2]["ceiling_eff"] == "", rows[2]
assert rows[1]["ceiling_samples_per_s"] == "100", rows[1]
PY
# Not the same problem: a series whose runs ran different job files (config_crc32) or global
# batches gets a note, as different sample counts do (they went into one series without a word);
# a base run with train_seconds 0 gives no speedup and a note (it gave 0.00 for every other count).
mix=$SCRATCH/mix
"$PY" - "$out" "$mix" <<'PY'
import json, os, sys
src, dst = sys.argv[1:]
good = json.load(open(f"{src}/sync-w1/results.json"))
assert good["config_crc32"] and good["global_batch_size"] == 8, good
def put(d, **kw):
    os.makedirs(f"{dst}/{d}")
    json.dump({**good, **kw}, open(f"{dst}/{d}/results.json", "w"))
two = {"num_workers": 2, "world_size": 2}
# config_file names of a fixed length: the note shortens a value past 60 characters, and
# $SCRATCH (hence the sweep's own config_file) is as long as the checkout's path.
put("jobs/sync-w1", config_file="job.ini")
put("jobs/sync-w2", **two, config_crc32="0badc0de", config_file="other.ini")
# Two long paths that differ in their file name only: shortened, each keeps its end.
far = "/" + "d" * 80
put("long/sync-w1", config_file=f"{far}/job_a.ini")
put("long/sync-w2", **two, config_crc32="0badc0de", config_file=f"{far}/job_b.ini")
# With each run dir's config.ini (the effective configuration): its problem-defining keys decide.
conf = open(f"{src}/sync-w1/config.ini").read()
assert "\nlr = " in conf and "\nrun-dir = " in conf, conf
def put_conf(d, conf, **kw):
    put(d, **kw)
    open(f"{dst}/{d}/config.ini", "w").write(conf)
# Only per-run keys differ (run-dir, max-steps, threads, seed, log-every) and the CRC: one problem.
put_conf("same/sync-w1", conf)
put_conf("same/sync-w2", conf.replace("\nrun-dir = ", "\nrun-dir = /elsewhere")
         .replace("\nmax-steps = ", "\nmax-steps = 9").replace("\nthreads = ", "\nthreads = 7")
         .replace("\nseed = ", "\nseed = 5").replace("\nlog-every = ", "\nlog-every = 3"),
         **two, config_crc32="0badc0de")
# Another learning rate, or another model: not the same problem, the key named.
put_conf("lr/sync-w1", conf)
put_conf("lr/sync-w2", conf.replace("\nlr = ", "\nlr = 9"), **two)
layers = [l for l in conf.splitlines() if l.startswith("layer = ")]
put_conf("model/sync-w1", conf)
put_conf("model/sync-w2", conf.replace(layers[1], layers[1] + " name=x"), **two)
put("batches/sync-w1")
put("batches/sync-w2", **two, global_batch_size=16)
put("zero/sync-w1", train_seconds=0.0)
put("zero/sync-w2", **two)
PY
lr1=$(sed -n 's/^lr = //p' "$out/sync-w1/config.ini")
layer2=$(grep '^layer = ' "$out/sync-w1/config.ini" | sed -n '2s/^layer = //p')
d26=$(printf 'd%.0s' {1..26}) d17=$(printf 'd%.0s' {1..17})  # the long case's shortened ends
for case in "jobs|runs of different problems: results.json config_file = \"job.ini\" in sync-w1, \"other.ini\" in sync-w2 - not the same problem" \
  "long|runs of different problems: results.json config_file = \"/$d26...$d17/job_a.ini\" in sync-w1, \"/$d26...$d17/job_b.ini\" in sync-w2" \
  "lr|runs of different problems: config.ini [optimizer] lr = \"$lr1\" in sync-w1, \"9$lr1\" in sync-w2 - not the same problem" \
  "model|runs of different problems: config.ini [model] layer 2: \"$layer2\" in sync-w1, \"$layer2 name=x\" in sync-w2" \
  "batches|runs with different global batches [8, 16] - not the same problem" \
  "zero|the 1-worker run's train_seconds is 0 - no speedup or efficiency against it"; do
  "$PY" "$report" "$mix/${case%%|*}" --out "$mix/${case%%|*}" >"$SCRATCH/report.log" 2>&1 ||
    { cat "$SCRATCH/report.log"; fail "scaling_report.py $mix/${case%%|*} failed"; }
  grep -qF "Note: sync ps=0: ${case#*|}" "$mix/${case%%|*}.md" ||
    { cat "$mix/${case%%|*}.md"; fail "no note '${case#*|}'"; }
done
"$PY" "$report" "$mix/same" --out "$mix/same" >"$SCRATCH/report.log" 2>&1 ||
  { cat "$SCRATCH/report.log"; fail "scaling_report.py $mix/same failed"; }
! grep -q "not the same problem" "$mix/same.md" ||
  { cat "$mix/same.md"; fail "runs differing in per-run keys only were called different problems"; }
"$PY" - "$mix/zero.csv" <<'PY' || fail "a base run of 0 s gave a speedup"
import csv, sys
assert [r["speedup"] for r in csv.DictReader(open(sys.argv[1]))] == ["", ""]
PY
# Without matplotlib, --force over a report that has a plot: the plot of the earlier runs went
# unchanged beside the new table; now removed, with a warning.
[[ -s $mix/jobs.png ]] || fail "no plot to replace"
"$PY" -c 'import runpy, sys; sys.modules["matplotlib"] = None; sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")' "$report" "$mix/zero" --out "$mix/jobs" --force \
  >"$SCRATCH/report.log" 2>&1 || { cat "$SCRATCH/report.log"; fail "scaling_report.py without matplotlib failed"; }
grep -qF "warning: removed $mix/jobs.png: it plotted an earlier report" "$SCRATCH/report.log" &&
  [[ ! -e $mix/jobs.png ]] && grep -qF "train_seconds is 0" "$mix/jobs.md" ||
  { cat "$SCRATCH/report.log"; fail "the earlier report's plot was left beside the new table"; }
# The plot names each series: sync through 1 ps (--mode sync --num-ps 1) is not "sync (allreduce)"
# (both were), in the legend and under the anatomy bars. A --title with `$` signs is drawn as it
# is (it was parsed as mathtext: a traceback).
"$PY" - "$out" "$SCRATCH/syncps" <<'PY'
import json, os, sys
src, dst = sys.argv[1:]
for ps in (0, 1):
    for w in (1, 2):
        r = json.load(open(f"{src}/sync-w{w}/results.json"))
        os.makedirs(f"{dst}/ps{ps}-w{w}")
        json.dump({**r, "num_ps": ps, "world_size": w + ps}, open(f"{dst}/ps{ps}-w{w}/results.json", "w"))
PY
"$PY" - "$report" "$SCRATCH/syncps" "$SCRATCH/syncps/report" >"$SCRATCH/report.log" 2>&1 <<'PY' ||
import runpy, sys
import matplotlib
matplotlib.use("Agg")
from matplotlib.figure import Figure
seen = []
save = Figure.savefig
def savefig(fig, *args, **kwargs):
    speedup, _, anatomy = fig.axes
    seen.append(([t.get_text() for t in speedup.get_legend().get_texts()],
                 [t.get_text() for t in anatomy.get_xticklabels()], fig._suptitle.get_text()))
    return save(fig, *args, **kwargs)
Figure.savefig = savefig
report, folder, out = sys.argv[1:]
sys.argv = [report, folder, "--out", out, "--title", "speed $x^$ at $5/h$"]
runpy.run_path(report, run_name="__main__")
legend, ticks, title = seen[0]
print("legend", legend, "bars", ticks, "title", title)
assert legend == ["ideal", "sync (allreduce)", "sync, 1 ps"], legend
assert ticks == ["sync\n1w", "sync\n2w", "sync 1ps\n1w", "sync 1ps\n2w"], ticks
assert title.startswith(r"speed \$x^\$ at \$5/h\$"), title  # each $ escaped: drawn as a $
PY
  { cat "$SCRATCH/report.log"; fail "the plot does not tell sync through a ps from allreduce, or a \$ title failed"; }
# A report that fails (a plot that cannot be written) leaves no folder it created for --out.
rc=0
"$PY" -B - "$SRC/data-tools" "$out" "$SCRATCH/newdir/sub/bad" >"$SCRATCH/report.log" 2>&1 <<'PY' || rc=$?
import sys
sys.path.insert(0, sys.argv[1])
import scaling_report
def disk_full(path, *args):
    raise OSError(28, "No space left on device")
scaling_report.write_plot = disk_full
sys.argv = ["scaling_report.py", sys.argv[2], "--out", sys.argv[3]]
scaling_report.main()
PY
[[ $rc -eq 1 && ! -e $SCRATCH/newdir ]] ||
  { cat "$SCRATCH/report.log"; ls -R "$SCRATCH/newdir"; fail "a failed report: exit $rc, want 1 and no folder newdir left"; }
# slurm/submit_strong_scaling.sh: the report job's command (sbatch --wrap, run by sh) keeps an
# --out holding a single quote, a space and a `$` as one word (it was cut at the quote).
mkdir -p "$SCRATCH/fakebin2"
cat >"$SCRATCH/fakebin2/sbatch" <<EOF
#!/bin/bash
# sbatch stand-in: keeps the --wrap command in wrap.sh, prints a job id
while [ \$# -gt 0 ]; do [ "\$1" != --wrap ] || printf '%s' "\$2" >"$SCRATCH/wrap.sh"; shift; done
echo 1234
EOF
cat >"$SCRATCH/fakepy" <<EOF
#!/bin/sh
printf '%s\n' "\$@" >"$SCRATCH/wrap.args"
EOF
chmod +x "$SCRATCH/fakebin2/sbatch" "$SCRATCH/fakepy"
odd_out="$SCRATCH/o'neil \$HOME sweep"
PATH=$SCRATCH/fakebin2:$PATH PYTHON=$SCRATCH/fakepy bash "$SRC/slurm/submit_strong_scaling.sh" \
  --job "$SCRATCH/job.ini" --out "$odd_out" --workers 1 --modes sync >"$SCRATCH/submit.log" 2>&1 ||
  { cat "$SCRATCH/submit.log"; fail "submit_strong_scaling.sh with a quote in --out failed"; }
(cd "$SRC" && sh "$SCRATCH/wrap.sh") || { cat "$SCRATCH/wrap.sh"; fail "the report job's command fails in sh"; }
printf '%s\n' data-tools/scaling_report.py "$odd_out" --out "$odd_out/report" --force >"$SCRATCH/want.args"
cmp -s "$SCRATCH/want.args" "$SCRATCH/wrap.args" ||
  { cat "$SCRATCH/wrap.sh"; echo; cat "$SCRATCH/wrap.args"; fail "the report job does not get --out as given"; }
echo "PASS"
