#!/usr/bin/env bash
# tests/cli/test_imagenet_recipe.sh — docs/imagenet.md's commands, in order, on a small tree of
# ImageNet's Kaggle layout made here (ILSVRC/Data/CLS-LOC/train/<wnid>/*.JPEG, the validation images
# in one folder val/*.JPEG, their classes in LOC_val_solution.csv with its header and
# PredictionString column): JPEGs of about ImageNet's size (tests/benchmarks/make_jpegs.py,
# Fashion-MNIST upscaled; as in ImageNet, one is CMYK and one a PNG named .JPEG), converted with --store encoded --max-side 256 (validation: --labels and
# --like), checked with h5info.py, `--dry-run`, and trained with jobs/resnet50_imagenet.ini and the
# page's options (2 workers, 2 steps of 2 images): the validation file's labels are the CSV's
# classes in the training file's numbering, the run evaluates every validation image (top-1,
# top-5) with no bad image and its data wait reported, and `dtrain predict` with its checkpoint
# decodes every training image (it stops at any it cannot).
set -euo pipefail
source "$(dirname "$0")/common.sh"
FMNIST=/usr/share/datasets/fashion-mnist
[[ -r $FMNIST/train-images-idx3-ubyte.gz ]] || { echo "SKIP: no Fashion-MNIST package (dataset-fashion-mnist)"; exit 77; }

echo "== a tree in ImageNet's Kaggle layout"
"$PY" "$SRC/tests/benchmarks/make_jpegs.py" "$SCRATCH/made" 90 "$FMNIST"
"$PY" - "$SCRATCH" <<'PY'
import csv, os, shutil, sys
d = sys.argv[1]
root = f"{d}/ILSVRC/Data/CLS-LOC"
os.makedirs(f"{root}/val")
rows, n = [], 0
for k, cls in enumerate(sorted(os.listdir(f"{d}/made"))):  # c0..c9 → wnid-like n0000000k
    wnid = f"n{9 - k:08d}"  # sorted wnids run opposite to the made folders' order
    files = sorted(os.listdir(f"{d}/made/{cls}"))
    os.makedirs(f"{root}/train/{wnid}")
    for i, f in enumerate(files):
        if i % 4 == 3:  # every 4th image of a class goes to the flat validation folder
            n += 1
            name = f"ILSVRC2012_val_{n:08d}"
            shutil.copy(f"{d}/made/{cls}/{f}", f"{root}/val/{name}.JPEG")
            rows.append((name, f"{wnid} 1 2 30 40 {wnid} 5 6 70 80", wnid))
        else:
            shutil.copy(f"{d}/made/{cls}/{f}", f"{root}/train/{wnid}/{f[:-4]}.JPEG")
# ImageNet's own oddities: CMYK JPEGs (22 in its training set) and a PNG named .JPEG (1).
from PIL import Image
train0 = f"{root}/train/{sorted(os.listdir(root + '/train'))[0]}"
first = sorted(os.listdir(train0))[:2]
Image.open(f"{train0}/{first[0]}").convert("CMYK").save(f"{train0}/{first[0]}", format="JPEG", quality=90)
Image.open(f"{train0}/{first[1]}").save(f"{train0}/{first[1]}", format="PNG")
rows.reverse()  # the CSV's order is not the folder's
with open(f"{d}/LOC_val_solution.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["ImageId", "PredictionString"])
    w.writerows(r[:2] for r in rows)
with open(f"{d}/expected.txt", "w") as f:
    f.writelines(f"{r[0]} {r[2]}\n" for r in rows)
print(f"# {sum(len(x[2]) for x in os.walk(root + '/train'))} training images, {len(rows)} validation images")
PY
nval=$(wc -l <"$SCRATCH/expected.txt")

echo "== 1. convert (docs/imagenet.md)"
IMAGENET=$SCRATCH/ILSVRC/Data/CLS-LOC
cd "$SCRATCH"
"$PY" "$SRC/data-tools/images_to_h5.py" $IMAGENET/train --store encoded --max-side 256 \
    --workers 2 --out data/imagenet/train.h5 >conv.log 2>&1 || { cat conv.log; fail "train conversion"; }
"$PY" "$SRC/data-tools/images_to_h5.py" $IMAGENET/val --labels "$SCRATCH/LOC_val_solution.csv" \
    --store encoded --max-side 256 --workers 2 --out data/imagenet/val.h5 --like data/imagenet/train.h5 \
    >>conv.log 2>&1 || { cat conv.log; fail "validation conversion with --labels"; }
"$PY" "$SRC/data-tools/h5info.py" data/imagenet/train.h5 data/imagenet/val.h5 >info.txt ||
  { cat info.txt; fail "h5info rejects the converted files"; }
"$PY" - "$SCRATCH" <<'PY' || fail "validation labels"
import os, sys, h5py, numpy as np
d = sys.argv[1]
want = dict(line.split() for line in open(f"{d}/expected.txt"))
with h5py.File(f"{d}/data/imagenet/train.h5") as t, h5py.File(f"{d}/data/imagenet/val.h5") as v:
    names = [n.decode() if isinstance(n, bytes) else n for n in t.attrs["class_names"]]
    assert names == sorted(os.listdir(f"{d}/ILSVRC/Data/CLS-LOC/train")), names
    assert np.array_equal(t.attrs["mean"], v.attrs["mean"])
    labels = v["labels"][()]
    assert len(labels) == len(want), (len(labels), len(want))
    # rows go class by class, each class's files in name order (as ImageFolder's)
    order = sorted(want, key=lambda n: (names.index(want[n]), n))
    got = [names[k] for k in labels]
    assert got == [want[n] for n in order], "labels differ from the CSV's classes"
    shorter = np.minimum(v["image_shapes"][:, 1], v["image_shapes"][:, 2])
    assert shorter.max() == 256, f"--max-side 256: shorter sides {shorter.min()}..{shorter.max()}"
print(f"{len(labels)} validation labels as the CSV gives them, in the training file's numbering")
PY

echo "== 2. check the job (--dry-run)"
DATA=(--synthetic "" --train-data data/imagenet/train.h5 --test-data data/imagenet/val.h5
      --random-resized-crop 224 --random-flip --eval-resize 256 --center-crop 224)
timeout 120 "$MPIEXEC" -n 2 "$DTRAIN" --config "$SRC/jobs/resnet50_imagenet.ini" "${DATA[@]}" --dry-run \
  >dry.log 2>&1 || { cat dry.log; fail "--dry-run"; }
grep -q "10 classes" dry.log || { cat dry.log; fail "--dry-run did not size the model to the file's 10 classes"; }
[[ ! -e runs ]] || fail "--dry-run wrote $(ls runs)"

echo "== 3. train (2 workers, 2 steps of 2 images, the page's options)"
timeout 300 "$MPIEXEC" -n 2 "$DTRAIN" --config "$SRC/jobs/resnet50_imagenet.ini" "${DATA[@]}" --epochs 90 \
  --label-smoothing 0.1 --no-weight-decay-on bias,bn --run-dir runs/r50 --batch-size 2 --max-steps 2 \
  --threads 1 >train.log 2>&1 || { cat train.log; fail "training on the converted files"; }
R=runs/r50/results.json
grep -Eq "test accuracy [0-9.]+ \| top-5 [0-9.]+ \| $nval samples" train.log ||
  { cat train.log; fail "the evaluation did not cover the $nval validation images"; }
[[ $(json_get $R bad_images_skipped) -eq 0 ]] || fail "bad images skipped"
"$PY" - $R <<'PY' || fail "results.json"
import json, sys
r = json.load(open(sys.argv[1]))
assert 0.0 <= r["test_accuracy"] <= r["test_top5"] <= 1.0, (r["test_accuracy"], r["test_top5"])
assert r["step_data_ms_after_first_step"] >= 0.0 and r["global_step"] == 2
assert r["data_threads"] == 1, r["data_threads"]  # --data-threads auto on a CPU worker
print(f"top-1 {r['test_accuracy']:.3f}, top-5 {r['test_top5']:.3f}, data wait {r['step_data_ms_after_first_step']:.2f} ms/step")
PY
grep -q "step anatomy" train.log || fail "no step anatomy in the log"

echo "== 4. predict with the checkpoint: every training row decodes (the CMYK and the PNG among them)"
ckpt=$(ls runs/r50/ckpt-*.h5 | tail -n 1)
ntrain=$(find $IMAGENET/train -name '*.JPEG' | wc -l)
timeout 300 "$MPIEXEC" -n 2 "$DTRAIN" predict --config "$SRC/jobs/resnet50_imagenet.ini" --synthetic "" \
  --eval-resize 256 --center-crop 224 --checkpoint "$ckpt" --data data/imagenet/train.h5 --out train_predictions.h5 \
  --threads 1 >predict.log 2>&1 || { cat predict.log; fail "predict (it fails on any image it cannot decode)"; }
grep -q "predict: $ntrain samples of data/imagenet/train.h5" predict.log || { cat predict.log; fail "predict did not cover the $ntrain training images"; }
echo "PASS"
