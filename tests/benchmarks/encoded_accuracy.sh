#!/usr/bin/env bash
# tests/benchmarks/encoded_accuracy.sh — end-to-end accuracy of training on encoded JPEGs with
# random-resized crop against training on the decoded pixels: ResNet-20 (jobs/resnet20_cifar.ini)
# on Fashion-MNIST, sync, WORKERS workers, --num-ps 0, the same epochs, seed and schedule on every
# side, one side after the other.
#   decoded: the IDX pixels converted by convert_idx.py (uint8 28×28), no augmentation;
#   rrc:     the same images saved by Pillow as JPEG quality 95, stored with images_to_h5.py
#            --store encoded and decoded by dtrain: --random-resized-crop 28 --rrc-scale SCALE
#            --random-flip for training, evaluation on the whole 28×28 image (--eval-resize 28
#            --center-crop 28: the decoded JPEG as it is).
#   center:  (only when named) the encoded files without augmentation (centre crop 28 of 28), which
#            isolates the JPEG loss from the augmentation;
#   padcrop: (only when named) the decoded pixels with the CIFAR augmentation (--random-crop 4
#            --random-flip), which isolates the cost of augmenting at all in this schedule.
# Prints one row per side (final test accuracy, top-5, wall seconds) and each side's difference to
# `decoded` in points.
#
# Usage: tests/benchmarks/encoded_accuracy.sh [SIDE...]     (default: decoded rrc)
#        tests/benchmarks/encoded_accuracy.sh data          (only make the files in DATA)
#   env: EPOCHS (default 8), SCALE (--rrc-scale of `rrc`, default 0.35,1), WORKERS (default 2),
#        SEED (default the job's), DTRAIN (binary, default build/bin/dtrain), DATA (converted files,
#        made once and reused; default /tmp/dtrain-encoded-accuracy), OUT (runs and logs; default
#        runs/encoded_accuracy; an existing side's results.json is reported, not rerun).
set -euo pipefail
cd "$(dirname "$0")/../.."
sides=("$@")
[[ ${#sides[@]} -gt 0 ]] || sides=(decoded rrc)
epochs=${EPOCHS:-8}
scale=${SCALE:-0.35,1}
workers=${WORKERS:-2}
dtrain=${DTRAIN:-build/bin/dtrain}
data=${DATA:-/tmp/dtrain-encoded-accuracy}
out=${OUT:-runs/encoded_accuracy}
fm=/usr/share/datasets/fashion-mnist
[[ -x $dtrain ]] || { echo "encoded_accuracy.sh: build $dtrain first" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$data"

if [[ ! -f $data/dec/test.h5 ]]; then
  /usr/bin/python3 data-tools/convert_idx.py --fashion-mnist "$fm" --out-dir "$data/dec.tmp"
  mv "$data/dec.tmp" "$data/dec"
fi
if [[ ! -f $data/enc_test.h5 ]]; then
  # ROOT/c<label>/<index>.jpg from the IDX files (Pillow, quality 95), then the encoded files.
  rm -rf "$data/tree_train" "$data/tree_test"
  PYTHONPATH=data-tools /usr/bin/python3 - "$fm" "$data" <<'PY'
import os, sys
from PIL import Image
from convert_idx import load_fashion_split
src, out = sys.argv[1], sys.argv[2]
for split in ("train", "test"):
    x, y = load_fashion_split(src, split)
    x = x[:, 0]  # N×28×28
    for k in range(10):
        os.makedirs(f"{out}/tree_{split}/c{k}", exist_ok=True)
    for i in range(len(y)):
        Image.fromarray(x[i]).save(f"{out}/tree_{split}/c{y[i]}/{i:05d}.jpg", quality=95)
PY
  /usr/bin/python3 data-tools/images_to_h5.py "$data/tree_train" --store encoded --channels 1 \
    --out "$data/enc_train.h5" --workers 2
  /usr/bin/python3 data-tools/images_to_h5.py "$data/tree_test" --store encoded --channels 1 \
    --out "$data/enc_test.h5" --like "$data/enc_train.h5"
  rm -rf "$data/tree_train" "$data/tree_test"
fi

[[ ${sides[*]} == data ]] && exit 0
mkdir -p "$out"

common=(--config jobs/resnet20_cifar.ini --mode sync --num-ps 0 --epochs "$epochs" --threads 1)
[[ -z ${SEED:-} ]] || common+=(--seed "$SEED")
enc=(--train-data "$data/enc_train.h5" --test-data "$data/enc_test.h5" --eval-resize 28)
for side in "${sides[@]}"; do
  case $side in
    decoded) args=(--train-data "$data/dec/train.h5" --test-data "$data/dec/test.h5") ;;
    rrc) args=("${enc[@]}" --random-resized-crop 28 --rrc-scale "$scale" --random-flip) ;;
    center) args=("${enc[@]}" --center-crop 28) ;;
    padcrop) args=(--train-data "$data/dec/train.h5" --test-data "$data/dec/test.h5" --random-crop 4
                   --random-flip) ;;
    *) echo "encoded_accuracy.sh: unknown side '$side', expected decoded, rrc, center or padcrop" >&2
       exit 1 ;;
  esac
  [[ -f $out/$side/results.json ]] && continue
  echo "# $side: mpirun -np $workers $dtrain ${common[*]} ${args[*]}" | tee "$out/$side.cmd" >&2
  t0=$(date +%s)
  mpirun --bind-to none --oversubscribe -np "$workers" "$dtrain" "${common[@]}" "${args[@]}" \
    --run-dir "$out/$side" >"$out/$side.log" 2>&1 \
    || { tail -20 "$out/$side.log" >&2; echo "encoded_accuracy.sh: $side failed" >&2; exit 1; }
  echo $(( $(date +%s) - t0 )) >"$out/$side.seconds"
done

/usr/bin/python3 - "$out" "$epochs" "$scale" "${sides[@]}" <<'PY'
import json, os, sys
out, epochs, scale, sides = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows = {s: json.load(open(f"{out}/{s}/results.json")) for s in sides}
print(f"# ResNet-20 on Fashion-MNIST, {epochs} epochs, sync; rrc: --rrc-scale {scale}")
print(f"{'side':<9}{'test acc':>10}{'top-5':>8}{'train acc':>11}{'steps':>7}{'wall s':>8}"
      f"{'vs decoded':>12}")
base = rows.get("decoded", {}).get("test_accuracy")
for s, r in rows.items():
    wall = open(f"{out}/{s}.seconds").read().strip() if os.path.exists(f"{out}/{s}.seconds") else "?"
    diff = f"{100 * (r['test_accuracy'] - base):+.2f} pt" if base is not None else ""
    print(f"{s:<9}{r['test_accuracy']:>10.4f}{r.get('test_top5', float('nan')):>8.4f}"
          f"{r['train_accuracy']:>11.4f}{r['global_step']:>7}{wall:>8}{diff:>12}")
PY
