#!/usr/bin/python3
"""data-tools/plot_metrics.py — loss and accuracy against time (or step) of one or more dtrain runs.

Usage: /usr/bin/python3 data-tools/plot_metrics.py RUN [RUN ...] [--out PLOT.png] [--x time|step]
                                                   [--label NAME ...] [--title TEXT]

  RUN      a run dir (holding metrics.csv) or a metrics.csv file
  --out    the PNG to write (default: metrics.png)
  --x      time (default): the run's wall_seconds column (training time, continued across a resume);
           step: global_step
  --label  one legend name per RUN (default: the run dir's name)

metrics.csv columns: kind,global_step,epoch,wall_seconds,loss,accuracy,samples_per_sec,lr,staleness,
ms_per_step,exposed_comm_ms (older runs: without the last two)
with kind = train (the chief's log interval: its own minibatches) or test (the test set, after each
epoch). Train rows are drawn as lines, test rows as markers joined by dotted lines, one colour per
run; left: loss, right: accuracy. Runs resumed from a checkpoint repeat a few steps: rows are taken
as they come, sorted by step. Run with Debian's /usr/bin/python3 (python3-matplotlib).
"""
import argparse
import csv
import os
import sys


def read_metrics(path):
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.csv")
    if not os.path.isfile(path):
        sys.exit(f"plot_metrics.py: error: no metrics.csv at '{path}'")
    rows = {"train": [], "test": []}
    with open(path, newline="") as f:
        rd = csv.DictReader(f)
        need = {"kind", "global_step", "wall_seconds", "loss", "accuracy"}
        if not rd.fieldnames or not need.issubset(rd.fieldnames):
            sys.exit(f"plot_metrics.py: error: {path}: columns {rd.fieldnames}, need {sorted(need)}")
        for r in rd:
            if r["kind"] not in rows:
                continue
            rows[r["kind"]].append((int(r["global_step"]), float(r["wall_seconds"]),
                                    float(r["loss"]), float(r["accuracy"])))
    for k in rows:
        rows[k].sort()
    if not rows["train"] and not rows["test"]:
        sys.exit(f"plot_metrics.py: error: {path} holds no train or test rows")
    return path, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--out", default="metrics.png")
    ap.add_argument("--x", choices=["time", "step"], default="time")
    ap.add_argument("--label", nargs="*")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    if a.label and len(a.label) != len(a.runs):
        sys.exit(f"plot_metrics.py: error: {len(a.label)} labels for {len(a.runs)} runs")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4.2))
    xi = 1 if a.x == "time" else 0
    for i, run in enumerate(a.runs):
        path, rows = read_metrics(run)
        label = a.label[i] if a.label else os.path.basename(os.path.dirname(os.path.abspath(path)))
        color = f"C{i % 10}"
        for ax, yi in ((ax_loss, 2), (ax_acc, 3)):
            tr, te = rows["train"], rows["test"]
            if tr:
                ax.plot([r[xi] for r in tr], [r[yi] for r in tr], color=color, lw=1.2,
                        label=f"{label} train")
            if te:
                ax.plot([r[xi] for r in te], [r[yi] for r in te], color=color, ls=":", marker="o",
                        ms=5, label=f"{label} test")
    for ax, yl in ((ax_loss, "loss"), (ax_acc, "accuracy")):
        ax.set_xlabel("training time (s)" if a.x == "time" else "global step")
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax_loss.set_yscale("log")
    if a.title:
        fig.suptitle(a.title, fontsize=10)
    fig.tight_layout()
    if os.path.dirname(a.out):
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out} ({len(a.runs)} runs)")


if __name__ == "__main__":
    main()
