#!/usr/bin/python3
"""data-tools/plot_metrics.py — loss and accuracy against time (or step) of one or more dtrain runs.

Usage: /usr/bin/python3 data-tools/plot_metrics.py RUN [RUN ...] [--out PLOT.png] [--x time|step]
                                                   [--label NAME ...] [--title TEXT] [--force]

  RUN      a run dir (holding metrics.csv) or a metrics.csv file
  --out    the plot to write (default: metrics.png); its extension picks the format (png, pdf, svg,
           jpg, ... as matplotlib supports); without one, a PNG is written to OUT.png
  --force  replace an existing plot (without it an existing output is an error)
  --x      time (default): the run's wall_seconds column (training time, continued across a resume);
           step: global_step
  --label  one legend name per RUN (default: the run dir's name)

metrics.csv columns: kind,global_step,epoch,wall_seconds,loss,accuracy,samples_per_sec,lr,staleness,
ms_per_step,exposed_comm_ms,top5 (older runs: without the last one to three)
with kind = train (the chief's log interval: its own minibatches) or test (the test set, after each
epoch). Train rows are drawn as lines, test rows as markers joined by dotted lines, one colour per
run; left: loss, right: accuracy. Runs resumed from a checkpoint repeat a few steps: rows are taken
as they come, sorted by step. A run that is still writing may end in an unfinished line (no newline
at the end, too few fields or a cut value): that line is skipped with a warning; a bad row anywhere
else is an error naming FILE:LINE and the column. The plot is written to a temporary file and
renamed (a folder it created is removed again when the run fails). Titles, labels and run dir
names are drawn as they are (a `$` starts no mathtext). Exit status: 0 done, 1 bad input or
refusal (message on stderr), 2 bad usage.
Run with Debian's /usr/bin/python3 (python3-matplotlib); without matplotlib: one error, exit 1.
"""
import argparse
import csv
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import outputs  # noqa: E402  (the output checks every writing tool shares)

NEED = ("kind", "global_step", "wall_seconds", "loss", "accuracy")


def error(msg):
    sys.exit(f"plot_metrics.py: error: {msg}")


def literal(text):
    """`text` as matplotlib draws it literally: every `$` escaped, so that a title, a label or a
    run dir's name holding dollar signs (`bs_$x_$`, `lr $\\alpha$`) is not parsed as mathtext
    (which fails on what it cannot parse, and changes what it can)."""
    return text.replace("$", r"\$")


def parse_row(row, col):
    """(step, wall_seconds, loss, accuracy) of one train/test row; raises ValueError naming the
    column that is not a number."""
    values = []
    for name, conv in (("global_step", int), ("wall_seconds", float), ("loss", float),
                       ("accuracy", float)):
        try:
            values.append(conv(row[col[name]]))
        except ValueError:
            raise ValueError(f"column '{name}' is {row[col[name]]!r}, expected "
                             f"{'an integer' if conv is int else 'a number'}") from None
    return tuple(values)


def read_metrics(path):
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.csv")
    if not os.path.isfile(path):
        error(f"no metrics.csv at '{path}'")
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8-sig")
    except OSError as e:
        error(f"{path}: cannot read: {e.strerror or e}")
    except UnicodeDecodeError:
        error(f"{path}: not a text CSV file (not UTF-8); expected dtrain's metrics.csv")
    rows = {"train": [], "test": []}
    rd = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(rd, [])
        col = {name: header.index(name) for name in NEED if name in header}
        if len(col) < len(NEED):
            error(f"{path}: columns {header}, need {sorted(NEED)}")
        unfinished = not text.endswith(("\n", "\r"))  # the run may still be writing its last line
        for row in rd:
            if not row:
                continue
            try:
                if len(row) <= max(col.values()):
                    raise ValueError(f"{len(row)} fields, but the header has {len(header)} (a short row)")
                if row[col["kind"]] in rows:
                    rows[row[col["kind"]]].append(parse_row(row, col))
            except ValueError as e:
                if unfinished and rd.line_num == text.count("\n") + 1:
                    print(f"plot_metrics.py: warning: {path}:{rd.line_num}: skipping the unfinished "
                          f"last line ({e}; the run is still writing?)", file=sys.stderr)
                    continue
                error(f"{path}:{rd.line_num}: {e}")
    except csv.Error as e:
        error(f"{path}:{rd.line_num}: not CSV: {e}")
    for k in rows:
        rows[k].sort()
    if not rows["train"] and not rows["test"]:
        sys.exit(f"plot_metrics.py: error: {path} holds no train or test rows")
    return path, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--out", default="metrics.png",
                    help="the plot to write (default: metrics.png); its extension picks the format "
                    "(png, pdf, svg, ...); without an extension a PNG is written to OUT.png")
    ap.add_argument("--x", choices=["time", "step"], default="time")
    ap.add_argument("--label", nargs="*")
    ap.add_argument("--title", default="")
    ap.add_argument("--force", action="store_true", help="replace an existing output")
    a = ap.parse_args()
    if a.label is not None and len(a.label) != len(a.runs):  # a usage error: exit 2
        ap.error(f"--label: {len(a.label)} names for {len(a.runs)} runs (give one per RUN)")

    try:
        import matplotlib
    except ImportError:
        error(f"no matplotlib in {sys.executable} (run with /usr/bin/python3, Debian's "
              "python3-matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.backend_bases import FigureCanvasBase

    out, fmt = a.out, os.path.splitext(a.out)[1][1:].lower()
    formats = FigureCanvasBase.get_supported_filetypes()
    if not fmt:
        if os.path.isdir(out):
            error(f"cannot write {out}: it is a directory (give a file, e.g. {os.path.join(out, 'metrics.png')})")
        out, fmt = out + ".png", "png"
    elif fmt not in formats:
        ap.error(f"--out {a.out}: unknown plot format '.{fmt}' (supported: {', '.join(sorted(formats))})")
    outputs.check_output(out, a.force, error)

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4.2))
    xi = 1 if a.x == "time" else 0
    for i, run in enumerate(a.runs):
        path, rows = read_metrics(run)
        label = literal(a.label[i] if a.label else os.path.basename(os.path.dirname(os.path.abspath(path))))
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
        fig.suptitle(literal(a.title), fontsize=10)
    fig.tight_layout()
    outputs.exit_cleanly_on_signals()
    tmp = outputs.temp_name(out)
    created, complete = outputs.missing_folders(os.path.dirname(tmp)), False
    try:
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        fig.savefig(tmp, dpi=120, format=fmt)
        outputs.check_output(out, a.force, error)  # appeared while we were drawing
        os.replace(tmp, out)
        complete = True
    except OSError as e:
        error(f"cannot write {out}: {e.strerror or e}")
    finally:
        outputs.remove_if_exists(tmp)
        if not complete:
            outputs.remove_new_folders(created)
    print(f"wrote {out} ({len(a.runs)} runs)")


if __name__ == "__main__":
    main()
