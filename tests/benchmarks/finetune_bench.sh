#!/usr/bin/env bash
# Fine-tuning against training from scratch (issue 39): the Fashion-MNIST CNN
# (jobs/fashion_mnist_cnn.ini) is trained on classes 0-4 (T-shirt/top, Trouser, Pullover, Dress,
# Coat), exported with `dtrain export`, and trained again on the held-out classes 5-9 (Sandal,
# Shirt, Sneaker, Bag, Ankle boot, relabelled 0-4 by convert_idx.py --classes), with the same seed,
# options and data order each time:
#   scratch    every tensor from the seed's initialisation
#   fine-tune  --init-from the export --init-exclude HEAD, once per HEAD in HEADS: the excluded
#              layers get the seed's initialisation (the scratch run's values), the rest the
#              pretrained tensors. Default: 12.dense (the last layer) and 9.dense,12.dense (both
#              dense layers: only the convolutional body is transferred).
# Each run evaluates the 5,000 test images of classes 5-9 every EVAL_EVERY global steps; the table
# gives, per target accuracy, the first evaluation reaching it: global step, wall seconds since
# the start of training (metrics.csv's wall_seconds: evaluations included) and scratch's steps
# over the run's.
#
# Usage: tests/benchmarks/finetune_bench.sh [extra dtrain options for every run]
# Env:   OUT (work dir; default runs/finetune_bench), THREADS (default 2), PRETRAIN_EPOCHS (2),
#        EPOCHS (epochs on classes 5-9, 1), EVAL_EVERY (25), TARGETS ("0.90 0.93 0.95 0.96"),
#        HEADS ("12.dense 9.dense,12.dense"), FASHION (/usr/share/datasets/fashion-mnist).
#        One worker (sync, no ps), no mpirun needed.
# Prints the table (Markdown) on stdout and writes it to OUT/table.md, beside each run's
# metrics.csv and results.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-runs/finetune_bench}
threads=${THREADS:-2}
fashion=${FASHION:-/usr/share/datasets/fashion-mnist}
job=jobs/fashion_mnist_cnn.ini
# The job's dense layers are lines 9 and 12 (from 0) of [model]: tensors 9.dense.*, 12.dense.*
heads=(${HEADS:-12.dense 9.dense,12.dense})
[ -x build/bin/dtrain ] || { echo "finetune_bench: build dtrain first" >&2; exit 1; }
rm -rf "$out" && mkdir -p "$out"
py=/usr/bin/python3

for classes in 0-4 5-9; do
  "$py" data-tools/convert_idx.py --fashion-mnist "$fashion" --out-dir "$out/data/$classes" \
    --classes "$classes" >/dev/null
done
# train NAME CLASSES ARGS...: one sync run on one worker into OUT/NAME (log OUT/NAME.log).
train() {
  local name=$1 classes=$2
  shift 2
  echo "# $name: dtrain --config $job --train-data $out/data/$classes/train.h5 $*" >&2
  build/bin/dtrain --config "$job" --mode sync --num-ps 0 --threads "$threads" \
    --train-data "$out/data/$classes/train.h5" --test-data "$out/data/$classes/test.h5" \
    --run-dir "$out/$name" --summaries false "$@" >"$out/$name.log" 2>&1 ||
    { tail -20 "$out/$name.log" >&2; echo "finetune_bench: $name failed" >&2; exit 1; }
}
train pretrain 0-4 --epochs "${PRETRAIN_EPOCHS:-2}" "$@"
build/bin/dtrain export --checkpoint "$(ls "$out"/pretrain/ckpt-*.h5 | tail -1)" \
  --out "$out/pretrained.safetensors" >"$out/export.log"
ft=(--epochs "${EPOCHS:-1}" --eval-every "${EVAL_EVERY:-25}" "$@")
train scratch 5-9 "${ft[@]}"
names=(scratch)
for head in "${heads[@]}"; do
  train "finetune-$head" 5-9 "${ft[@]}" --init-from "$out/pretrained.safetensors" --init-exclude "$head"
  names+=("finetune-$head")
done

"$py" - "$out" "${TARGETS:-0.90 0.93 0.95 0.96}" "${names[@]}" <<'PY' | tee "$out/table.md"
import csv, json, sys
out, targets, names = sys.argv[1], [float(t) for t in sys.argv[2].split()], sys.argv[3:]
def tests(name):
    with open(f"{out}/{name}/metrics.csv") as f:
        return [(int(r["global_step"]), float(r["wall_seconds"]), float(r["accuracy"]))
                for r in csv.DictReader(f) if r["kind"] == "test"]
def first(rows, target):
    return next((r for r in rows if r[2] >= target), None)
pre = json.load(open(f"{out}/pretrain/results.json"))
runs = {n: tests(n) for n in names}
scratch = runs["scratch"]
print(f"Pretrained on classes 0-4: test accuracy {pre['test_accuracy']:.4f} after "
      f"{pre['global_step']} steps. On classes 5-9: test accuracy after the first evaluation "
      f"(step {scratch[0][0]}) and at the end (step {scratch[-1][0]}); per target, the first "
      f"evaluation reaching it (every {scratch[0][0]} steps): global step (wall seconds, "
      "scratch's steps / this run's).\n")
print("| run | --init-exclude | first | end | "
      + " | ".join(f"{t:.2f}" for t in targets) + " |")
print("|---|---|---:|---:|" + "---:|" * len(targets))
for n, rows in runs.items():
    cells = []
    for t in targets:
        r, s = first(rows, t), first(scratch, t)
        ratio = f", ×{s[0] / r[0]:.2f}" if r and s and n != "scratch" else ""
        cells.append(f"{r[0]} ({r[1]:.0f} s{ratio})" if r else "not reached")
    head = n.partition("-")[2] or "-"
    print(f"| {n.partition('-')[0]} | {head} | {rows[0][2]:.4f} | {rows[-1][2]:.4f} | "
          + " | ".join(cells) + " |")
PY
