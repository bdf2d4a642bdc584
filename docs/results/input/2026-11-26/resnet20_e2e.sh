#!/usr/bin/env bash
# What made resnet20_run{A,B,C}.*: ResNet-20 (jobs/resnet20_cifar.ini) on Fashion-MNIST, sync,
# 2 workers, 2 epochs (938 global steps), seed of the job file; decoded pixels (A) against the
# same images stored as JPEG quality 95 and decoded by dtrain: centre crop 28 of 28, i.e. the
# pixels as decoded (C), and --random-resized-crop 28 --random-flip (B). Run from the repository
# root on the 2-core development VM (other engineers' builds and tests ran beside it).
set -euo pipefail
FM=/usr/share/datasets/fashion-mnist
W=/tmp/e2e
mkdir -p $W
# JPEG trees ROOT/c<label>/<index>.jpg from the IDX files (Pillow, quality 95), then encoded files.
/usr/bin/python3 - $FM $W <<'PY'
import gzip, os, sys
import numpy as np
from PIL import Image
src, out = sys.argv[1], sys.argv[2]
for split, pre in (("train", "train"), ("test", "t10k")):
    with gzip.open(f"{src}/{pre}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(f"{src}/{pre}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    for k in range(10):
        os.makedirs(f"{out}/tree_{split}/c{k}", exist_ok=True)
    for i in range(len(y)):
        Image.fromarray(x[i]).save(f"{out}/tree_{split}/c{y[i]}/{i:05d}.jpg", quality=95)
PY
/usr/bin/python3 data-tools/images_to_h5.py $W/tree_train --store encoded --channels 1 --out $W/enc_train.h5 --workers 2
/usr/bin/python3 data-tools/images_to_h5.py $W/tree_test --store encoded --channels 1 --out $W/enc_test.h5 --like $W/enc_train.h5
/usr/bin/python3 data-tools/convert_idx.py --fashion-mnist $FM --out-dir $W/dec
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--config jobs/resnet20_cifar.ini --mode sync --num-ps 0 --epochs 2)
mpirun --bind-to none -np 2 build/bin/dtrain "${common[@]}" --train-data $W/dec/train.h5 --test-data $W/dec/test.h5 --run-dir $W/runA
mpirun --bind-to none -np 2 build/bin/dtrain "${common[@]}" --train-data $W/enc_train.h5 --test-data $W/enc_test.h5 --center-crop 28 --eval-resize 28 --run-dir $W/runC
mpirun --bind-to none -np 2 build/bin/dtrain "${common[@]}" --train-data $W/enc_train.h5 --test-data $W/enc_test.h5 --random-resized-crop 28 --random-flip --eval-resize 28 --run-dir $W/runB
