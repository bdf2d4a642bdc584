#!/usr/bin/python3
"""data-tools/scaling_report.py — strong-scaling table and plot from a folder of dtrain runs.

Usage: /usr/bin/python3 data-tools/scaling_report.py DIR [DIR ...] [--out PREFIX] [--time train|wall]
                                                      [--title TEXT] [--force]

  DIR        folders searched recursively for results.json (one per run: data-tools/
             run_strong_scaling.sh or slurm/submit_strong_scaling.sh make them); a run found
             twice (a folder given twice, or inside another given folder) counts once
  --out      writes PREFIX.md (Markdown table), PREFIX.csv and PREFIX.png (speedup and parallel
             efficiency against workers, ideal line drawn, one line per mode / ps count; and the
             step anatomy of every run as stacked bars: data, compute, exposed communication,
             optimizer, in ms per step)
             (default: DIR/scaling, for the first DIR). The three are written to temporary files
             and renamed only when all three are complete (a failed run leaves none of them, and
             no folder it created). Series are labelled "sync (allreduce)", "sync, K ps" (sync
             through K ps) and "async, K ps".
  --title    the plot's title, drawn as it is (a `$` starts no mathtext)
  --force    replace existing outputs (without it an existing PREFIX.md/.csv/.png is an error)
  --time     which time T is: train (default) = results.json's train_seconds, the chief's time
             inside training steps (reading batches, forward/backward, gradient exchange), so
             start-up, the final evaluation and checkpoint writing are left out; wall = wall_seconds,
             the whole training including those.

Series: runs are grouped by (mode, num_ps); each series is one line of the plot. Within a series,
speedup(N) = T1 / TN and parallel efficiency(N) = T1 / (N * TN), where T1 is the 1-worker run of the
same series (same mode and ps count); a series without a 1-worker run uses its smallest worker count
M as the base (speedup = M * TM / TN) and says so. Several runs of the same configuration: the
median T is used and the count shown. Runs of a series that trained on different numbers of
samples, or different global batches, or solved different problems are reported (a note: not the
same problem); a base run whose T is 0 gives no speedup (a note says so). The problem is what the
config.ini in each run's folder (dtrain's effective configuration) says of the model's layers, the
data and its augmentation, the initial weights, the optimizer and its settings, the staleness
settings and the precision; keys that differ between the runs of one sweep on purpose (run-dir,
max-steps, mode, num-ps, seed, threads, the exchange's settings, logging, checkpoints, ...) are not
compared (nor results.json's config_crc32: the CRC of the whole effective configuration, run-dir
included). The note names the first key that differs and the run folders of its values. Where a
run of the series has no config.ini (runs kept as results.json only), results.json's config_file,
train_data and precision are compared instead. A results.json that is not valid JSON, not an object, lacks a required key or has a value of
the wrong type (say num_workers "three" or 0, train_seconds null) is skipped with a warning
naming the file and the key; a bad launcher.json is ignored with a warning. A resumed run
(results.json session_first_step > 0, docs/observing.md: its train_seconds and samples are its
last session's only) is skipped with a warning naming it.
Exit status: 0 done, 1 no usable run or an output that may not be written
(message on stderr), 2 bad usage.
Host ceiling (run_strong_scaling.sh --ceiling, issue 36): results.json files under a folder named
ceiling-wN/ (a whole path component below DIR) are not runs of a series but N independent one-worker
runs started together, each with the per-worker batch of the N-worker runs and no exchange; their
summed samples/s is the host's ceiling for N workers (for N = 1, the 1-worker sync run; a folder
with fewer than N runs, or one without samples_per_sec, is left out with a note), and every row
gains "ceiling samples/s", "efficiency vs ceiling" (its samples/s over the ceiling's) and the
ceiling runs' median compute ms/step.
Lock-step ceiling (run_strong_scaling.sh --lockstep): lockstep-wN/ is the N-worker sync run with
--allreduce none (no gradient sum; the workers still step together); every sync row of N workers
gains "lock-step samples/s", "efficiency vs lock-step" (its samples/s over that run's: what the
exchange itself costs) and "lock-step wait ms/step" (that run's exposed communication: waiting for
the slowest worker alone), after step 1 where the runs report it.
After step 1: where the runs' results.json has them (dtrain writes them from two steps on), the
columns "samples/s after step 1", "efficiency vs ceiling after step 1" (against the ceiling runs'
own figures after their first step), "compute ms/step after step 1" and "exposed comm ms/step
after step 1": the same without each process's first step, the transient a short sweep averages in;
and "worker compute max/min after step 1" with "slowest worker after step 1" (from the per-worker
compute in results.json): how far the slowest worker's forward + backward lies above the
fastest's, the wait a sync step pays for its straggler.
Without matplotlib the table (.md) and .csv are still written, and no .png (a warning says so);
an existing PREFIX.png (--force) is then removed, with a warning: it plotted an earlier report.
Run with Debian's /usr/bin/python3 (numpy, matplotlib from python3-numpy / python3-matplotlib).
"""
import argparse
import csv
import importlib.util
import json
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import outputs  # noqa: E402  (the output checks every writing tool shares)

# results.json keys the report reads: key -> (kind, minimum): "str" a non-empty string, "int" an
# integer, "num" a number (finite where a minimum is given); optional keys may be absent or null.
REQUIRED = {"mode": ("str", None), "num_ps": ("int", 0), "num_workers": ("int", 1),
            "train_seconds": ("num", 0), "wall_seconds": ("num", 0)}
OPTIONAL = {"samples": ("int", 0), "world_size": ("int", 1), "global_batch_size": ("int", 0),
            "session_first_step": ("int", 0)}
OPTIONAL.update((k, ("num", None)) for k in (
    "samples_per_sec", "test_accuracy", "ps_busy_fraction", "ps_optimizer_fraction",
    "staleness_mean", "data_seconds", "compute_seconds", "exchange_seconds", "step_data_ms",
    "step_compute_ms", "step_exposed_comm_ms", "step_optimizer_ms",
    "samples_per_sec_after_first_step", "step_compute_ms_after_first_step",
    "step_exposed_comm_ms_after_first_step"))
LAUNCHER = {k: ("num", 0) for k in ("cpu_seconds", "elapsed_seconds", "ranks", "load1_before",
                                    "load1_after")}


def warn(msg):
    print(f"scaling_report.py: warning: {msg}", file=sys.stderr)


def error(msg):
    sys.exit(f"scaling_report.py: error: {msg}")


def json_kind(v):
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(v), "a number")


def bad_value(d, spec):
    """The first key of d whose value does not fit spec (key -> (kind, minimum)), described, or None."""
    for key, (kind, low) in spec.items():
        if key not in d:
            continue
        v = d[key]
        if kind == "str":
            ok = isinstance(v, str) and v != ""
            want = "a non-empty string"
        else:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and \
                (finite(v) or (kind == "num" and low is None and isinstance(v, float))) and \
                (kind == "num" or float(v).is_integer()) and (low is None or v >= low)
            want = ("an integer" if kind == "int" else "a number") + \
                (f" >= {low}" if low is not None else "")
        if not ok:
            shown = json.dumps(v)
            if len(shown) > 40:  # a huge integer: its first digits and length
                shown = f"{shown[:20]}... ({len(shown)} characters)"
            return f"{key} = {shown}, expected {want}"
    return None


def finite(v):
    """v (an int or float) is finite and within a float's range: an integer too large for a float
    (JSON allows any number of digits) would overflow in the report's arithmetic."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def spread_of_workers(r, path):
    """From results.json's per-worker compute after each worker's first step (dtrain >=
    2026-11-27), r["compute_spread_after1"]: the slowest worker's forward + backward over the
    fastest's, and r["slowest_after1"]: which worker that is. A sync step waits for the slowest."""
    per = r.get("step_compute_ms_per_worker_after_first_step")
    if per is None:
        return
    if not (isinstance(per, list) and per and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
            for v in per)):
        warn(f"{path}: step_compute_ms_per_worker_after_first_step = {json.dumps(per)[:80]}, "
             "expected a list of positive numbers; its spread is left out")
        return
    r["compute_spread_after1"] = max(per) / min(per)
    r["slowest_after1"] = per.index(max(per))


def run_kind(d, root):
    """("ceiling" or "lockstep", N, the folder) for a run folder `root` found under DIR `d` that
    lies in a folder named exactly ceiling-wN or lockstep-wN below d (the nearest such one), else
    (None, 0, None): a folder that merely contains the words (ceiling-w8-study), or one above DIR,
    is no ceiling."""
    parts = os.path.relpath(root, d).split(os.sep)
    for i in range(len(parts) - 1, -1, -1):
        m = re.fullmatch(r"(ceiling|lockstep)-w(\d+)", parts[i])
        if m:
            return m.group(1), int(m.group(2)), os.path.join(d, *parts[:i + 1])
    return None, 0, None


def load_runs(dirs):
    runs, seen, skipped = [], set(), 0
    for d in dirs:
        if not os.path.isdir(d):
            error(f"'{d}' is not a folder")
        for root, _, files in os.walk(d):
            if "results.json" not in files:
                continue
            path = os.path.join(root, "results.json")
            if os.path.realpath(path) in seen:  # a folder given twice, or nested in another
                continue
            seen.add(os.path.realpath(path))
            try:
                with open(path) as f:
                    r = json.load(f)
            except (OSError, ValueError) as e:
                warn(f"skipping {path}: {e}")
                skipped += 1
                continue
            if not isinstance(r, dict):
                warn(f"skipping {path}: not a JSON object but {json_kind(r)}")
                skipped += 1
                continue
            for k in [k for k in OPTIONAL if k in r and r[k] is None]:
                del r[k]  # an optional value written as null: as if absent
            missing = [k for k in REQUIRED if k not in r]
            problem = f"no {', '.join(missing)}" if missing else bad_value(r, {**REQUIRED, **OPTIONAL})
            if problem:
                warn(f"skipping {path}: {problem}")
                skipped += 1
                continue
            if r.get("session_first_step", 0) > 0:  # docs/observing.md: a resumed run
                warn(f"skipping {path}: a resumed run (session_first_step = {r['session_first_step']}): "
                     "its train_seconds, samples and samples_per_sec are its last session's only, "
                     "not the whole run's; rerun it without --resume to compare it")
                skipped += 1
                continue
            r["_path"] = path
            r["_config"] = read_config(os.path.join(root, "config.ini"))
            r["_kind"], r["_kind_w"], r["_group"] = run_kind(d, root)
            spread_of_workers(r, path)
            lj = os.path.join(root, "launcher.json")  # written by run_strong_scaling.sh
            if os.path.isfile(lj):
                try:
                    with open(lj) as f:
                        l = json.load(f)
                    if not isinstance(l, dict):
                        raise ValueError(f"not a JSON object but {json_kind(l)}")
                    missing = [k for k in LAUNCHER if k not in l]
                    problem = f"no {', '.join(missing)}" if missing else bad_value(l, LAUNCHER)
                    if problem:
                        raise ValueError(problem)
                    r["cpu_share"] = l["cpu_seconds"] / max(l["elapsed_seconds"] * l["ranks"], 1e-9)
                    r["cpu_seconds"] = l["cpu_seconds"]
                    r["load1"] = (l["load1_before"] + l["load1_after"]) / 2
                except (OSError, ValueError) as e:
                    warn(f"ignoring {lj}: {e}")
            runs.append(r)
    return runs, skipped


# What defines the problem a strong-scaling series solves, by config.ini section (the effective
# configuration dtrain writes into every run dir): what is trained (the model's layers, the data and
# its augmentation, the initial weights) and how (the optimizer and every setting of it, the
# staleness settings of the mode, the precision). None: every key of the section. The global batch
# and the sample count have notes of their own; every other key may differ between the runs of one
# sweep: run-dir, resume, max-steps, epochs, batch-size (the global batch's split), mode and num-ps
# (the series), seed, threads, the exchange's and kernels' settings, logging, timeline, summaries,
# checkpoints, the plan. (results.json's config_crc32 is the CRC of the whole effective
# configuration, run-dir and max-steps included: it differs between the runs of every sweep.)
PROBLEM_KEYS = {
    "model": None, "optimizer": None,
    "data": ("train-data", "test-data", "num-classes", "synthetic", "synthetic-samples", "shuffle",
             "random-crop", "random-flip", "random-resized-crop", "rrc-scale", "rrc-ratio",
             "center-crop", "eval-resize"),
    "train": ("max-staleness", "replicas-to-aggregate"),
    "cluster": ("precision", "math"),
    "tensors": ("init-from", "init-exclude"),
}
# Without a config.ini in every run dir of a series (runs kept as their results.json only, as in
# docs/results/scaling/): results.json's own words for the problem.
PROBLEM_RESULTS_KEYS = ("config_file", "train_data", "precision")


def read_config(path):
    """The problem-defining keys (PROBLEM_KEYS) of the config.ini at `path` as {"[section] key":
    value}, a key given on several lines (the model's `layer`) as the tuple of its values; None
    when there is no such file or it cannot be read (a warning then)."""
    if not os.path.isfile(path):
        return None
    keys, section = {}, None
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                line = line.strip()
                if not line or line[0] in "#;":
                    continue
                if line.startswith("[") and line.endswith("]"):
                    section = line[1:-1].strip()
                    continue
                key, eq, value = line.partition("=")
                key = key.strip()
                if not eq or section not in PROBLEM_KEYS or (
                        PROBLEM_KEYS[section] is not None and key not in PROBLEM_KEYS[section]):
                    continue
                keys.setdefault(f"[{section}] {key}", []).append(value.strip())
    except OSError as e:
        warn(f"ignoring {path}: {e.strerror or e}")
        return None
    return {k: v[0] if len(v) == 1 else tuple(v) for k, v in keys.items()}


def shown(v, limit=60):
    """A config value as a note shows it: quoted; one longer than `limit` characters keeps its
    start and its end, "/runs/a/...b/job_a.ini": two paths that differ in their file name only
    (config_file, train-data) stay told apart (cut at the end, both read the same)."""
    v = json.dumps(v, ensure_ascii=False)
    if len(v) <= limit:
        return v
    keep = (limit - 3) // 2
    return v[:keep] + "..." + v[-keep:]


def problem_difference(series_runs):
    """What makes the runs of one series different problems, as a note's words (the first key
    whose values differ, each value with the first run folder that has it, and how many keys
    differ), or None. Compares the problem-defining keys of each run dir's config.ini
    (PROBLEM_KEYS) when every run has one, else results.json's PROBLEM_RESULTS_KEYS."""
    configs = [r.get("_config") for r in series_runs]
    if all(c is not None for c in configs):
        source = "config.ini"
    else:
        source = "results.json"
        configs = [{k: r[k] for k in PROBLEM_RESULTS_KEYS if r.get(k) is not None}
                   for r in series_runs]
    names = [os.path.basename(os.path.dirname(r["_path"])) for r in series_runs]
    differing = [k for k in sorted({k for c in configs for k in c})
                 if len({json.dumps(c.get(k)) for c in configs}) > 1]
    if not differing:
        return None
    key = differing[0]
    firsts = {}  # value -> the first run folder that has it
    for c, name in zip(configs, names):
        firsts.setdefault(json.dumps(c.get(key)), (c.get(key), name))
    values = list(firsts.values())
    if key == "[model] layer":
        a, b = (v if isinstance(v, tuple) else (v,) if v is not None else () for v, _ in values[:2])
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        what = (f"{source} [model]: {len(a)} layers in {values[0][1]}, {len(b)} in {values[1][1]}"
                if at == min(len(a), len(b)) else
                f"{source} [model] layer {at + 1}: {shown(a[at])} in {values[0][1]}, "
                f"{shown(b[at])} in {values[1][1]}")
    else:
        what = f"{source} {key} = " + ", ".join(
            f"{'(not set)' if v is None else shown(v)} in {name}" for v, name in values)
    more = len(differing) - 1
    return what + (f" (and {more} more key{'s' if more > 1 else ''}: "
                   + ", ".join(differing[1:4]) + (", ..." if more > 3 else "") + ")" if more else "")


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def build_rows(runs, time_key):
    groups = {}
    for r in runs:
        key = (r["mode"], int(r["num_ps"]), int(r["num_workers"]))
        groups.setdefault(key, []).append(r)
    series = {}
    for (mode, ps, w), rs in groups.items():
        series.setdefault((mode, ps), {})[w] = rs
    rows, notes = [], []
    for (mode, ps) in sorted(series, key=lambda k: (k[0] != "sync", k[1])):
        by_w = series[(mode, ps)]
        ws = sorted(by_w)
        base_w = ws[0]
        t_base = median([r[time_key] for r in by_w[base_w]])
        if base_w != 1:
            notes.append(f"{mode} ps={ps}: no 1-worker run; speedup relative to {base_w} workers "
                         f"(T1 taken as {base_w} x T{base_w})")
        if not t_base > 0:
            notes.append(f"{mode} ps={ps}: the {base_w}-worker run's {time_key} is 0 - no speedup "
                         "or efficiency against it")
        series_runs = [r for w in ws for r in by_w[w]]
        samples = {int(r.get("samples", 0)) for r in series_runs}
        if len(samples) > 1:
            notes.append(f"{mode} ps={ps}: runs trained on different sample counts {sorted(samples)}"
                         " - not the same problem")
        # Strong scaling is one problem on more workers: the same model, data, optimizer and
        # precision (problem_difference) and the same global batch.
        differs = problem_difference(series_runs)
        if differs:
            notes.append(f"{mode} ps={ps}: runs of different problems: {differs} - not the same problem")
        batches = {r["global_batch_size"] for r in series_runs if r.get("global_batch_size")}
        if len(batches) > 1:
            notes.append(f"{mode} ps={ps}: runs with different global batches {sorted(batches)}"
                         " - not the same problem")
        cpu_base = median([r["cpu_seconds"] for r in by_w[base_w] if "cpu_seconds" in r])
        for w in ws:
            rs = by_w[w]
            t = median([r[time_key] for r in rs])
            speedup = base_w * t_base / t if t > 0 and t_base > 0 else float("nan")
            def med(k):
                vals = [r[k] for r in rs if k in r and r[k] is not None]
                return median(vals) if vals else float("nan")
            rows.append({
                "mode": mode, "ps": ps, "workers": w, "ranks": int(rs[0].get("world_size", w + ps)),
                "runs": len(rs), "global_batch": int(rs[0].get("global_batch_size", 0)),
                "samples": int(med("samples")) if "samples" in rs[0] else 0,
                "wall_s": med("wall_seconds"), "train_s": med("train_seconds"),
                "samples_per_s": med("samples_per_sec"), "speedup": speedup,
                "efficiency": speedup / w, "test_accuracy": med("test_accuracy"),
                "ps_busy": med("ps_busy_fraction") if mode == "async" else float("nan"),
                # of the ps's wall time, in the optimizer's updates (older results: nan)
                "ps_optimizer": med("ps_optimizer_fraction") if mode == "async" else float("nan"),
                "staleness": med("staleness_mean") if mode == "async" else float("nan"),
                "data_s": med("data_seconds"), "compute_s": med("compute_seconds"),
                "exchange_s": med("exchange_seconds"), "cpu_share": med("cpu_share"),
                # Step anatomy (results.json step_*_ms, mean per step over the workers).
                "data_ms": med("step_data_ms"), "compute_ms": med("step_compute_ms"),
                "comm_ms": med("step_exposed_comm_ms"), "optimizer_ms": med("step_optimizer_ms"),
                # The same without each process's first step (dtrain ≥ 2026-11-27; else nan).
                "samples_per_s_after1": med("samples_per_sec_after_first_step"),
                "compute_ms_after1": med("step_compute_ms_after_first_step"),
                "comm_ms_after1": med("step_exposed_comm_ms_after_first_step"),
                "compute_spread_after1": med("compute_spread_after1"),
                "slowest_after1": rs[0].get("slowest_after1", float("nan")),
                "cpu_s": med("cpu_seconds"),
                "cpu_eff": cpu_base / med("cpu_seconds") if med("cpu_seconds") > 0 else float("nan"),
                "load1": med("load1"),
            })
    return rows, notes


def ratio(a, b):
    """a / b, nan where either is nan or b is not positive."""
    return a / b if a == a and b == b and b > 0 else float("nan")


def add_ceiling(rows, ceiling_runs):
    """Adds the host-ceiling columns to every row (see the module comment). Returns notes. A
    ceiling-wN folder counts only with all N runs (a run that failed or was not run leaves its
    results.json out: the sum of the others is no ceiling) each with samples_per_sec; the ceiling
    of N is the median over such folders (sweeps given together)."""
    groups, notes = {}, []
    for r in ceiling_runs:
        groups.setdefault((r["_kind_w"], r["_group"]), []).append(r)
    by_w = {}
    for (w, group), rs in sorted(groups.items()):
        if len(rs) != w:
            notes.append(f"ceiling for {w} workers: {len(rs)} runs found in {group}, {w} expected; "
                         "that ceiling is left out")
            continue
        lacking = [x["_path"] for x in rs if "samples_per_sec" not in x]  # absent or null
        for path in lacking:
            notes.append(f"ceiling for {w} workers: {path} has no samples_per_sec; "
                         "that ceiling is left out")
        if not lacking:
            by_w.setdefault(w, []).append(rs)
    one = [r for r in rows if r["mode"] == "sync" and r["workers"] == 1]
    for r in rows:
        w = r["workers"]
        if w == 1:
            ceil = one[0]["samples_per_s"] if one else float("nan")
            ceil1 = one[0]["samples_per_s_after1"] if one else float("nan")
            comp = one[0]["compute_ms"] if one else float("nan")
        elif w in by_w:
            ceil = median([sum(x["samples_per_sec"] for x in rs) for rs in by_w[w]])
            afters = [[x.get("samples_per_sec_after_first_step") for x in rs] for rs in by_w[w]]
            ceil1 = median([sum(a) for a in afters]) if all(
                v is not None for a in afters for v in a) else float("nan")
            comp = median([x["step_compute_ms"] for rs in by_w[w] for x in rs if "step_compute_ms" in x])
        else:
            ceil = ceil1 = comp = float("nan")
        r["ceiling_samples_per_s"] = ceil
        r["ceiling_eff"] = ratio(r["samples_per_s"], ceil)
        r["ceiling_compute_ms"] = comp
        r["ceiling_eff_after1"] = ratio(r["samples_per_s_after1"], ceil1)
    return notes


def add_lockstep(rows, lockstep_runs):
    """Adds the lock-step columns to the sync rows (see the module comment). Returns notes."""
    by_w, notes = {}, []
    for r in lockstep_runs:
        w = r["_kind_w"]
        if r.get("allreduce") != "none":
            notes.append(f"{r['_path']}: not an --allreduce none run, left out")
            continue
        by_w.setdefault(w, []).append(r)
    nan = float("nan")

    def pick(rs, key):
        vals = [x[key] for x in rs if isinstance(x.get(key), (int, float))]
        return median(vals) if vals else nan

    for r in rows:
        rs = by_w.get(r["workers"], []) if r["mode"] == "sync" and r["ps"] == 0 else []
        after = pick(rs, "samples_per_sec_after_first_step")
        r["lockstep_samples_per_s"] = pick(rs, "samples_per_sec")
        r["lockstep_eff"] = ratio(r["samples_per_s"], r["lockstep_samples_per_s"])
        r["lockstep_eff_after1"] = ratio(r["samples_per_s_after1"], after)
        wait = pick(rs, "step_exposed_comm_ms_after_first_step")
        r["lockstep_wait_ms"] = wait if wait == wait else pick(rs, "step_exposed_comm_ms")
    return notes


def rate_fmt(v):
    """samples/s as the tables show it: whole above 100, two decimals below."""
    return f"{v:.0f}" if v >= 100 else f"{v:.2f}"


LOCKSTEP_COLUMNS = [
    ("lockstep_samples_per_s", "lock-step samples/s", rate_fmt),
    ("lockstep_eff", "efficiency vs lock-step", "{:.2f}"),
    ("lockstep_eff_after1", "efficiency vs lock-step after step 1", "{:.2f}"),
    ("lockstep_wait_ms", "lock-step wait ms/step", "{:.1f}"),
]


CEILING_COLUMNS = [
    ("ceiling_samples_per_s", "ceiling samples/s", rate_fmt),
    ("ceiling_eff", "efficiency vs ceiling", "{:.2f}"),
    ("ceiling_compute_ms", "ceiling compute ms/step", "{:.1f}"),
]


AFTER_FIRST_COLUMNS = [
    ("samples_per_s_after1", "samples/s after step 1", rate_fmt),
    ("ceiling_eff_after1", "efficiency vs ceiling after step 1", "{:.2f}"),
    ("compute_ms_after1", "compute ms/step after step 1", "{:.1f}"),
    ("comm_ms_after1", "exposed comm ms/step after step 1", "{:.1f}"),
    ("compute_spread_after1", "worker compute max/min after step 1", "{:.2f}"),
    ("slowest_after1", "slowest worker after step 1", lambda v: f"w{v}"),
]


def columns_for(rows):
    """COLUMNS, with the ceiling's after "efficiency" when the rows have them, then the figures
    without the first step where some run reports them."""
    if not rows:
        return COLUMNS
    at = [k for k, _, _ in COLUMNS].index("efficiency") + 1
    extra = list(CEILING_COLUMNS) if "ceiling_eff" in rows[0] else []
    extra += LOCKSTEP_COLUMNS if "lockstep_eff" in rows[0] else []
    if any(r["samples_per_s_after1"] == r["samples_per_s_after1"] for r in rows):
        extra += [c for c in AFTER_FIRST_COLUMNS
                  if c[0] != "ceiling_eff_after1" or "ceiling_eff" in rows[0]]
    return COLUMNS[:at] + extra + COLUMNS[at:]


COLUMNS = [  # key, header, format
    ("workers", "workers", "{:d}"), ("ps", "ps", "{:d}"), ("mode", "mode", "{}"),
    ("ranks", "ranks", "{:d}"), ("wall_s", "wall s", "{:.1f}"), ("train_s", "train s", "{:.1f}"),
    ("samples_per_s", "samples/s", rate_fmt), ("speedup", "speedup", "{:.2f}"),
    ("efficiency", "efficiency", "{:.2f}"), ("test_accuracy", "test acc", "{:.4f}"),
    ("ps_busy", "ps busy", "{:.4f}"), ("ps_optimizer", "ps optimizer", "{:.4f}"), ("staleness", "staleness", "{:.2f}"),
    ("compute_s", "compute s", "{:.1f}"), ("exchange_s", "exchange s", "{:.1f}"),
    ("data_s", "data s", "{:.2f}"),
    ("data_ms", "data ms/step", "{:.1f}"), ("compute_ms", "compute ms/step", "{:.1f}"),
    ("comm_ms", "exposed comm ms/step", "{:.1f}"), ("optimizer_ms", "optimizer ms/step", "{:.1f}"),
    ("cpu_s", "cpu s", "{:.1f}"), ("cpu_eff", "cpu eff", "{:.2f}"),
    ("cpu_share", "cpu share", "{:.2f}"),
    ("load1", "load", "{:.1f}"), ("runs", "runs", "{:d}"),
]


def fmt(v, f):
    if isinstance(v, float) and v != v:
        return "-"
    return f(v) if callable(f) else f.format(v)


def write_markdown(path, rows, notes, time_key):
    cols = columns_for(rows)
    # Notes name run folders, whose names may be any bytes (os.fsdecode's surrogate escapes):
    # written back as those bytes.
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write("| " + " | ".join(h for _, h, _ in cols) + " |\n")
        f.write("|" + "|".join("---:" if k not in ("mode",) else "---" for k, _, _ in cols) + "|\n")
        for r in rows:
            f.write("| " + " | ".join(fmt(r[k], fm) for k, _, fm in cols) + " |\n")
        f.write(f"\nT = {time_key}_seconds (chief). speedup = T1/TN, efficiency = T1/(N·TN), T1 = the "
                "1-worker run of the same mode and ps count. compute/exchange/data s: the chief's "
                "split of train s (forward+backward / gradient exchange / waiting for the batch). ms/step: "
                "the step anatomy of results.json (mean over the workers): waiting for the batch, "
                "forward+backward, exposed communication (waiting on the exchange after backward), "
                "the optimizer on the worker (allreduce modes; the ps applies it in async mode). cpu share: "
                "CPU seconds of all ranks / (elapsed × ranks), from launcher.json (run_strong_scaling.sh); "
                "cpu s: CPU seconds of all ranks (user + system); cpu eff = cpu s of the 1-worker run / cpu s "
                "(the extra work the parallel run did for the same samples, whatever share of the cores "
                "it got); load: the 1-minute load average around the run (other work on the machine).\n")
        if any(c[0] == "samples_per_s_after1" for c in cols):
            f.write("\nafter step 1: the same figures without each process's first step (primitive "
                    "creation, first touch, ranks starting apart: the transient a short run "
                    "averages in); the ceiling's from its runs' own figures after their first "
                    "step.\n")
        if any(c[0] == "ceiling_eff" for c in cols):
            f.write("\nceiling samples/s: the host's ceiling for N workers — N independent one-worker "
                    "runs started together with the same per-worker batch and no exchange, their "
                    "samples/s summed (N = 1: the 1-worker sync run); efficiency vs ceiling = "
                    "samples/s / ceiling samples/s; ceiling compute ms/step: the median of those "
                    "runs' forward+backward per step.\n")
        if any(c[0] == "lockstep_eff" for c in cols):
            f.write("\nlock-step samples/s: the N-worker sync run with --allreduce none (no "
                    "gradient sum, the workers still in lock step); efficiency vs lock-step = "
                    "samples/s / lock-step samples/s (the exchange's own cost); lock-step wait: "
                    "that run's exposed communication, the wait for the slowest worker alone.\n")
        for n in notes:
            f.write(f"\nNote: {n}\n")


def write_csv(path, rows):
    cols = columns_for(rows)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([k for k, _, _ in cols] + ["global_batch", "samples"])
        for r in rows:
            w.writerow([("" if isinstance(r[k], float) and r[k] != r[k] else
                         (f"{r[k]:.6g}" if isinstance(r[k], float) else r[k])) for k, _, _ in cols]
                       + [r["global_batch"], r["samples"]])


ANATOMY = [("data_ms", "data"), ("compute_ms", "compute"), ("comm_ms", "exposed comm"),
           ("optimizer_ms", "optimizer")]


def write_anatomy(ax, rows):
    """Stacked bars: the step anatomy (ms/step) of every run, grouped by series."""
    import math
    order = sorted(rows, key=lambda r: (r["mode"] != "sync", r["ps"], r["workers"]))
    labels = [("sync" if (r["mode"], r["ps"]) == ("sync", 0) else f"{r['mode']} {r['ps']}ps")
              + f"\n{r['workers']}w" for r in order]
    bottom = [0.0] * len(order)
    for key, name in ANATOMY:
        vals = [0.0 if math.isnan(r[key]) else r[key] for r in order]
        ax.bar(range(len(order)), vals, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("ms per step (mean over workers)")
    ax.set_title("step anatomy", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)


def series_label(mode, ps):
    """The plot's name of the series (mode, ps): sync with no ps is the allreduce; sync through
    ps (--mode sync --num-ps K, SyncReplicasOptimizer) and async name their ps count."""
    return "sync (allreduce)" if (mode, ps) == ("sync", 0) else f"{mode}, {ps} ps"


def literal(text):
    """`text` as matplotlib draws it literally: every `$` escaped, so that a --title holding
    dollar signs is not parsed as mathtext (which fails on what it cannot parse)."""
    return text.replace("$", r"\$")


def write_plot(path, rows, time_key, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.2))
    series = {}
    for r in rows:
        series.setdefault((r["mode"], r["ps"]), []).append(r)
    max_w = max(r["workers"] for r in rows)
    ideal = [1, max_w] if max_w > 1 else [1, 2]
    ax1.plot(ideal, ideal, "k--", lw=1, label="ideal")
    ax2.plot(ideal, [1, 1], "k--", lw=1, label="ideal")
    markers = "osD^v<>p*h"
    for i, ((mode, ps), rs) in enumerate(sorted(series.items(), key=lambda kv: (kv[0][0] != "sync", kv[0][1]))):
        rs = sorted(rs, key=lambda r: r["workers"])
        label = series_label(mode, ps)
        x = [r["workers"] for r in rs]
        ax1.plot(x, [r["speedup"] for r in rs], marker=markers[i % len(markers)], label=label)
        ax2.plot(x, [r["efficiency"] for r in rs], marker=markers[i % len(markers)], label=label)
    ws = sorted({r["workers"] for r in rows})
    for ax, yl in ((ax1, "speedup  T1 / TN"), (ax2, "parallel efficiency  T1 / (N·TN)")):
        ax.set_xlabel("workers N")
        ax.set_ylabel(yl)
        ax.set_xticks(ws)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax2.set_ylim(0, max(1.1, max(r["efficiency"] for r in rows) * 1.1))
    write_anatomy(ax3, rows)
    fig.suptitle(f"{literal(title)} (T = {time_key}_seconds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")  # path may be a temporary name without .png
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--out", metavar="PREFIX",
                    help="writes PREFIX.md, PREFIX.csv, PREFIX.png (default: DIR/scaling, first DIR)")
    ap.add_argument("--time", choices=["train", "wall"], default="train")
    ap.add_argument("--title", default="dtrain strong scaling")
    ap.add_argument("--force", action="store_true", help="replace existing PREFIX.md/.csv/.png")
    a = ap.parse_args()
    for d in a.dirs:
        if not os.path.isdir(d):
            error(f"'{d}' is not a folder")
    out = a.out or os.path.join(a.dirs[0], "scaling")
    for path in (out + ".md", out + ".csv", out + ".png"):
        outputs.check_output(path, a.force, error)  # refuse before reading anything
    runs, skipped = load_runs(a.dirs)
    if not runs:
        error(f"no {'usable ' if skipped else ''}results.json under {' '.join(a.dirs)}"
              + (f" ({skipped} skipped, see the warnings above)" if skipped else ""))
    ceiling_runs = [r for r in runs if r["_kind"] == "ceiling"]
    lockstep_runs = [r for r in runs if r["_kind"] == "lockstep"]
    runs = [r for r in runs if r not in ceiling_runs and r not in lockstep_runs]
    if not runs:
        error(f"no results.json of a scaling run under {' '.join(a.dirs)} (only ceiling runs)")
    time_key = f"{a.time}_seconds"
    rows, notes = build_rows(runs, time_key)
    if ceiling_runs:
        notes += add_ceiling(rows, ceiling_runs)
    if lockstep_runs:
        notes += add_lockstep(rows, lockstep_runs)
    plot = importlib.util.find_spec("matplotlib") is not None
    if not plot:
        warn(f"no matplotlib in {sys.executable}: writing {out}.md and {out}.csv, no {out}.png")

    # All three to temporary files first, renamed only when all three are complete.
    outputs.exit_cleanly_on_signals()
    writers = [(out + ".md", lambda p: write_markdown(p, rows, notes, a.time)),
               (out + ".csv", lambda p: write_csv(p, rows)),
               (out + ".png", lambda p: write_plot(p, rows, a.time, a.title))][:3 if plot else 2]
    tmps = [outputs.temp_name(path) for path, _ in writers]
    created, complete = outputs.missing_folders(os.path.dirname(tmps[0])), False
    try:
        for tmp, (path, write) in zip(tmps, writers):
            try:
                os.makedirs(os.path.dirname(tmp), exist_ok=True)
                write(tmp)
            except OSError as e:
                error(f"cannot write {path}: {e.strerror or e}")
        for tmp, (path, _) in zip(tmps, writers):
            outputs.check_output(path, a.force, error)  # appeared while we were writing
        for tmp, (path, _) in zip(tmps, writers):
            try:
                os.replace(tmp, path)
            except OSError as e:
                error(f"cannot write {path}: {e.strerror or e}")
        if not plot and os.path.lexists(out + ".png"):  # --force: an earlier report's plot
            try:
                os.remove(out + ".png")
            except OSError as e:
                error(f"cannot remove the earlier {out}.png: {e.strerror or e}")
            warn(f"removed {out}.png: it plotted an earlier report, and there is no matplotlib "
                 "to draw this one")
        complete = True
    finally:
        for tmp in tmps:
            outputs.remove_if_exists(tmp)
        if not complete:  # a failed run leaves no folder it created
            outputs.remove_new_folders(created)
    sys.stdout.reconfigure(errors="surrogateescape")  # folder names that are not UTF-8, as they are
    with open(out + ".md", encoding="utf-8", errors="surrogateescape") as f:
        sys.stdout.write(f.read())
    print(f"\nwrote {out}.md, {out}.csv{', ' + out + '.png' if plot else ''} ({len(runs)} runs"
          + (f", {len(ceiling_runs)} ceiling runs)" if ceiling_runs else ")"))


if __name__ == "__main__":
    main()
