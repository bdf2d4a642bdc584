#!/usr/bin/python3
"""data-tools/plan_vs_measured.py — `dtrain plan`'s predictions beside a measured scaling sweep.

Usage: /usr/bin/python3 data-tools/plan_vs_measured.py SWEEP --profile P.json --job JOB.ini
           --global-batch B [--max-workers N] [--intra-node SPEC] [--bucket-mb MB]
           [--cores-per-node C] [--allreduce auto|flat|hierarchical] [--straggler-cv auto|X]
           [--dtrain BIN]   (default: the repository's build/bin/dtrain)

SWEEP is data-tools/run_strong_scaling.sh's folder — sync-wN/results.json (allreduce) and
async-psK-wN/results.json — or data-tools/scaling_report.py's CSV of such a sweep. A run's mode,
ps and worker counts are its results.json's mode, num_ps and num_workers (the folder's name only
where it lacks them; a warning where the two differ). A SWEEP that is neither, or a results.json
that is not a JSON object with samples_per_sec, is one error naming it (exit 1); so is a CSV row
whose mode, ps, workers or samples_per_s is empty or a cell that is not a number (FILE:LINE and
the column). A measured figure a run lacks (an empty CSV cell, a key an older dtrain's results.json
has not) is shown as "-". For every run
with at most --max-workers workers, runs
  dtrain plan --config JOB --profile P --nodes 1 --workers-per-node N --global-batch-size B
              --intra-node SPEC --cores-per-node C --mode sync|async [--num-ps K]
              --bucket-mb MB --out ...
and prints a Markdown table: mode, workers, predicted and measured samples/s, error % =
(predicted − measured) / measured, predicted and measured compute and exposed communication
ms/step. Sync rows use the allreduce the run used (results.json's "allreduce": hierarchical, or
flat for mpi; runs without that key, and a CSV, flat) at --bucket-mb MB, or without it the job
file's bucket-mb (dtrain's default 25 where it sets none); --allreduce flat|hierarchical prices
every sync row so. A --dtrain that is not an executable is one error naming it (exit 1).
Where the sweep holds the host's ceiling (run_strong_scaling.sh --ceiling: ceiling-wN/r*/, N
independent one-worker runs at the N-worker runs' per-worker batch; for N = 1 the sync-w1 run),
two more columns: the ceiling's samples/s × the predicted efficiency — the prediction with the
compute per worker taken from the ceiling instead of the profile — and its error %. For sync rows
that ceiling is N × the slowest ceiling run's samples/s (a synchronous step waits for its slowest
worker); for async, the runs' sum (each worker goes at its own pace).
--straggler-cv auto|X (default 0): dtrain plan's --straggler-cv for the sync rows — X, or with
auto each worker count's own from its ceiling runs' logs (--log-every 1: one "ms/step" a step;
a line that follows an unlogged step covers several and is left out):
the step-to-step coefficient of variation within a run, pooled over the N runs, every run's first
step left out (a worker slower on every step is the ceiling's slowest run, above). The predicted
exposed communication then includes the wait for the slowest worker, as the measured one does.
On one shared host this overestimates: the ceiling runs' jitter there is not independent of
what a sync run's workers see together (docs/results/scaling/2026-11-27/vm-straggler/).
In the ceiling column the two add up: the slowest run's mean plus the jitter's wait — an upper
estimate where that run is slower than the others by more than the jitter (then it is the
slowest on nearly every step, and the others' jitter costs little).
--after-first-step: every measured figure (the runs' and the ceiling runs') without each
process's first step (results.json's …_after_first_step: primitive creation, first touch and
ranks starting apart, which a sweep of a few steps averages in; the plan predicts steady steps).
"""
import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def fail(msg):
    sys.exit(f"plan_vs_measured.py: error: {msg}")


def warn(msg):
    print(f"plan_vs_measured.py: warning: {msg}", file=sys.stderr)


def load_json(path):
    """The JSON object in `path`; exits naming the file when it cannot be read or is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror or e}")
    except ValueError as e:  # not JSON (or not UTF-8)
        fail(f"{path}: not valid JSON ({e})")
    if not isinstance(d, dict):
        fail(f"{path}: expected a JSON object, not {type(d).__name__}")
    return d


def count(d, key, low):
    """d[key] when it is an integer >= low (a run's own record of it), else None."""
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= low else None


def measured_runs(sweep):
    """{(mode, ps, workers): {samples_per_sec, step_compute_ms, step_exposed_comm_ms}}."""
    runs = {}
    if not os.path.exists(sweep):
        fail(f"SWEEP {sweep}: no such folder or file (expected run_strong_scaling.sh's folder or "
             "scaling_report.py's CSV)")
    if os.path.isfile(sweep):  # scaling_report.py's CSV
        try:
            with open(sweep, newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                rows = list(reader)
            lacking = [c for c in ("mode", "ps", "workers", "samples_per_s", "compute_ms", "comm_ms")
                       if c not in (reader.fieldnames or [])]
            if lacking:
                raise KeyError(", ".join(lacking))
            for line, r in enumerate(rows, start=2):  # line 1: the header
                def cell(col, conv=float, needed=False):
                    """The row's value in `col`; None for an empty cell (a figure the runs
                    lack: scaling_report.py writes it so), an error naming the row when
                    `needed` or when it is not a number."""
                    v = (r.get(col) or "").strip()
                    if v in ("", "nan"):
                        if needed:
                            fail(f"SWEEP {sweep}:{line}: column {col} is empty, expected a number")
                        return None
                    try:
                        return conv(v)
                    except ValueError:
                        fail(f"SWEEP {sweep}:{line}: column {col} is {v!r}, expected "
                             f"{'an integer' if conv is int else 'a number'}")
                key = (cell("mode", str, True), cell("ps", int, True), cell("workers", int, True))
                runs[key] = {"samples_per_sec": cell("samples_per_s", needed=True)}
                for k, col in (("step_compute_ms", "compute_ms"),
                               ("step_exposed_comm_ms", "comm_ms"),
                               ("samples_per_sec_after_first_step", "samples_per_s_after1"),
                               ("step_compute_ms_after_first_step", "compute_ms_after1"),
                               ("step_exposed_comm_ms_after_first_step", "comm_ms_after1")):
                    if cell(col) is not None:  # an empty cell: a figure the runs lack, shown "-"
                        runs[key][k] = cell(col)
        except OSError as e:
            fail(f"cannot read {sweep}: {e.strerror or e}")
        except (KeyError, TypeError, ValueError, csv.Error) as e:  # ValueError: not UTF-8 too
            what = f"no column {e.args[0]}" if isinstance(e, KeyError) else str(e)
            fail(f"SWEEP {sweep}: not scaling_report.py's CSV ({what}; expected a folder of runs "
                 "or that CSV)")
        return runs
    if not os.path.isdir(sweep):
        fail(f"SWEEP {sweep}: not a folder or a file")
    for name in sorted(os.listdir(sweep)):
        m = re.fullmatch(r"sync-w(\d+)|async-ps(\d+)-w(\d+)", name)
        path = os.path.join(sweep, name, "results.json")
        if not m or not os.path.exists(path):
            continue
        run = load_json(path)
        if not isinstance(run.get("samples_per_sec"), (int, float)) or \
                isinstance(run.get("samples_per_sec"), bool):
            fail(f"{path}: samples_per_sec = {json.dumps(run.get('samples_per_sec'))}, expected a number")
        # The run's own record of its mode and counts (dtrain writes them); the folder's name
        # only where it lacks them (a hand-made or older results.json).
        key = ("sync", 0, int(m[1])) if m[1] else ("async", int(m[2]), int(m[3]))
        mode = run.get("mode") if run.get("mode") in ("sync", "async") else key[0]
        ps = count(run, "num_ps", 0)
        ps = key[1] if ps is None else ps
        workers = count(run, "num_workers", 1)
        workers = key[2] if workers is None else workers
        if (mode, ps, workers) != key:
            warn(f"{path}: the run records mode {mode}, {ps} ps, {workers} workers, not what its "
                 f"folder's name says; priced as recorded")
        key = (mode, ps, workers)
        if key in runs:
            fail(f"{path}: a second run of mode {mode}, {ps} ps, {workers} workers "
                 f"(also {runs[key]['_path']})")
        run["_path"] = path
        runs[key] = run
    return runs


def ceilings(sweep, runs, key="samples_per_sec"):
    """{workers: (summed `key` of the ceiling runs, N × their smallest)} (1: the sync 1-worker
    run's own)."""
    out = {}
    if ("sync", 0, 1) in runs and key in runs[("sync", 0, 1)]:
        out[1] = (runs[("sync", 0, 1)][key],) * 2
    if not os.path.isdir(sweep):
        return out
    for name in os.listdir(sweep):
        m = re.fullmatch(r"ceiling-w(\d+)", name)
        if not m:
            continue
        found = [os.path.join(sweep, name, r, "results.json") for r in os.listdir(
            os.path.join(sweep, name))]
        found = [load_json(f).get(key) for f in found if os.path.exists(f)]
        if len(found) == int(m[1]) and all(v is not None for v in found):
            out[int(m[1])] = (sum(found), len(found) * min(found))
    return out


STEP_LINE = re.compile(r"^step\s+(\d+)\s*\|.*?\|\s*([0-9.]+) ms/step\s*\|", re.M)


def step_cv(sweep, workers):
    """The pooled within-run coefficient of variation of the step times (every step after the
    first) of ceiling-w<workers>'s runs' logs, and how many steps it rests on; (0, 0) without
    runs of at least 2 such steps."""
    folder = os.path.join(sweep, f"ceiling-w{workers}")  # none under a CSV
    squares, dof, steps = 0.0, 0, 0
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if not re.fullmatch(r"r\d+\.log", name):
            continue
        # A line covers one step only where the step before it was logged too (--log-every 1).
        logged = {int(k): float(t) for k, t in STEP_LINE.findall(
            open(os.path.join(folder, name)).read())}
        times = [t for k, t in sorted(logged.items()) if k > 1 and k - 1 in logged]
        if len(times) < 2:
            continue
        mean = sum(times) / len(times)
        squares += sum(((t - mean) / mean) ** 2 for t in times)
        dof += len(times) - 1
        steps += len(times)
    return ((squares / dof) ** 0.5, steps) if dof else (0.0, 0)


def job_bucket_mb(job):
    """The job file's bucket-mb (its last `bucket-mb = MB` line, as dtrain reads it), or dtrain's
    default 25; exits naming the file when it cannot be read or the value is not a number."""
    try:
        with open(job, encoding="utf-8") as f:
            found = re.findall(r"^[ \t]*bucket-mb[ \t]*=[ \t]*([^#;\n]*)", f.read(), re.M)
    except (OSError, ValueError) as e:  # ValueError: not UTF-8
        fail(f"--job {job}: cannot read it ({getattr(e, 'strerror', None) or e})")
    try:
        return float(found[-1]) if found else 25.0
    except ValueError:
        fail(f"--job {job}: bucket-mb '{found[-1].strip()}' is not a number")


def ms(v):
    """A measured ms/step figure as the table shows it: "-" where the run has none (an older
    dtrain's results.json, an empty cell of scaling_report.py's CSV), not 0."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
    return f"{v:.1f}" if ok else "-"


def sync_row(a, run):
    """The plan row that prices a sync run: its recorded algorithm unless --allreduce says."""
    algo = a.allreduce if a.allreduce != "auto" else (
        "hierarchical" if run.get("allreduce") == "hierarchical" else "flat")
    return "sync, hierarchical" if algo == "hierarchical" else "sync, flat allreduce"


def predict(a, mode, ps, workers, tmp, configuration, cv=0.0):
    out = os.path.join(tmp, f"{mode}-{ps}-{workers}.json")
    cmd = [a.dtrain, "plan", "--config", a.job, "--profile", a.profile, "--nodes", "1",
           "--workers-per-node", str(workers), "--global-batch-size", str(a.global_batch),
           "--intra-node", a.intra_node, "--cores-per-node", str(a.cores_per_node),
           "--straggler-cv", repr(cv), "--mode", mode, "--out", out]
    cmd += (["--num-ps", str(ps)] if mode == "async"
            else ["--num-ps", "0", "--bucket-mb", repr(a.bucket_mb)])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"plan_vs_measured.py: {' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    rows = json.load(open(out))["predictions"]
    if mode == "sync":
        rows = [p for p in rows if p["configuration"] == configuration
                and p["bucket_mb"] == a.bucket_mb]
    if not rows:
        fail(f"{' '.join(cmd)}: no row '{configuration}' at {a.bucket_mb:g} MiB buckets in {out}")
    return rows[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep")
    ap.add_argument("--profile", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--global-batch", type=int, required=True)
    ap.add_argument("--intra-node", default="shm")
    ap.add_argument("--bucket-mb", type=float,
                    help="sync rows' bucket size (default: the job file's bucket-mb, else 25)")
    ap.add_argument("--cores-per-node", type=int, default=0,
                    help="the host's cores (dtrain plan --cores-per-node; default 0: not priced)")
    ap.add_argument("--max-workers", type=int, default=1 << 30)
    ap.add_argument("--allreduce", choices=("auto", "flat", "hierarchical"), default="auto",
                    help="how to price sync rows (default auto: as each run recorded it)")
    ap.add_argument("--straggler-cv", default="0",
                    help="sync rows: dtrain plan --straggler-cv X, or auto (from the ceiling runs)")
    ap.add_argument("--dtrain", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "..", "build", "bin", "dtrain"))
    ap.add_argument("--after-first-step", action="store_true",
                    help="measured figures without each process's first step")
    a = ap.parse_args()
    if shutil.which(a.dtrain) is None:
        fail(f"--dtrain {a.dtrain}: not an executable (build dtrain: bash .ci/build.sh, or give "
             "--dtrain PATH)")
    if a.bucket_mb is None:
        a.bucket_mb = job_bucket_mb(a.job)
    runs = measured_runs(a.sweep)
    if not runs:
        fail(f"no sync-wN or async-psK-wN runs in {a.sweep}")
    suffix = "_after_first_step" if a.after_first_step else ""
    if suffix:
        lacking = [k for k, m in runs.items() if "samples_per_sec" + suffix not in m]
        if lacking:
            fail(f"--after-first-step: runs {lacking} have no "
                     f"samples_per_sec{suffix} (a dtrain before 2026-11-27, or one step)")
    if a.straggler_cv != "auto":
        try:
            fixed_cv = float(a.straggler_cv)
        except ValueError:
            fail(f"--straggler-cv '{a.straggler_cv}': not a number or auto")
    cvs = {}  # sync workers → σ
    for w in sorted(w for mode, _, w in runs if mode == "sync" and w > 1):
        if a.straggler_cv != "auto":
            cvs[w] = fixed_cv
            continue
        cvs[w], steps = step_cv(a.sweep, w)
        print(f"{w} workers: --straggler-cv {cvs[w]:.4f} from {steps} steps of the ceiling runs"
              + ("" if steps else " (none with 2 steps after the first: 0)"))
    if a.straggler_cv == "auto":
        print()
    ceiling = ceilings(a.sweep, runs, "samples_per_sec" + suffix)
    extra = " ceiling samples/s | ceiling × predicted efficiency | error % |" if len(ceiling) > 1 else ""
    print("| mode | workers | predicted samples/s | measured samples/s | error % | "
          "predicted compute ms | measured compute ms | predicted exposed comm ms | "
          "measured exposed comm ms |" + extra)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" * 3 if extra else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for (mode, ps, w), m in sorted(runs.items()):
            if w > a.max_workers:
                continue
            configuration = sync_row(a, m) if mode == "sync" else None
            p = predict(a, mode, ps, w, tmp, configuration,
                        cvs.get(w, 0.0) if mode == "sync" else 0.0)
            got = m["samples_per_sec" + suffix]
            err = 100 * (p["samples_per_s"] - got) / got
            label = (f"sync ({configuration.split(', ')[1]})" if mode == "sync"
                     else f"async, {ps} ps")
            row = (f"| {label} | {w} | {p['samples_per_s']:.2f} | {got:.2f} | {err:+.1f} | "
                   f"{p['compute_ms']:.1f} | {ms(m.get('step_compute_ms' + suffix))} | "
                   f"{p['exposed_comm_ms'] + p['straggler_ms']:.1f} | "
                   f"{ms(m.get('step_exposed_comm_ms' + suffix))} |")
            if extra and w in ceiling:
                bound = ceiling[w][1 if mode == "sync" else 0]
                c = bound * p["efficiency"]
                row += f" {bound:.2f} | {c:.2f} | {100 * (c - got) / got:+.1f} |"
            elif extra:
                row += " - | - | - |"
            print(row)


if __name__ == "__main__":
    main()
