#!/usr/bin/python3
"""tests/benchmarks/make_jpegs.py OUT N FASHION_MNIST — N JPEG files of about ImageNet's size for
the input benchmarks and tests: Fashion-MNIST training images (FASHION_MNIST: the folder of its
idx .gz files) upscaled bicubically to a random 400–500 × 300–375 (every third one portrait),
tinted and noised into RGB, saved at quality 90 as OUT/c<label>/<index>.jpg (an ImageFolder tree).
Fixed seed: the same files on every run. Used by input_bench.sh and run_tsan.sh (Pillow, numpy,
and h5py for data-tools/convert_idx.py, which reads the IDX files)."""
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "data-tools"))
from convert_idx import load_fashion_split  # noqa: E402  (dtrain's own IDX reader)

root, n, src = sys.argv[1], int(sys.argv[2]), sys.argv[3]
x, y = load_fashion_split(src, "train")
x = x[:, 0]  # N×28×28
rng = np.random.default_rng(0)
total = 0
for i in range(n):
    w, h = int(rng.integers(400, 501)), int(rng.integers(300, 376))
    if i % 3 == 0:
        w, h = h, w
    g = np.asarray(Image.fromarray(x[i]).resize((w, h), Image.BICUBIC), np.float32)
    tint = rng.uniform(0.4, 1.0, size=3)
    rgb = g[:, :, None] * tint + rng.uniform(0, 60, size=3) + rng.normal(0, 6, size=(h, w, 3))
    im = Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8))
    d = f"{root}/c{int(y[i])}"
    os.makedirs(d, exist_ok=True)
    im.save(f"{d}/{i:05d}.jpg", quality=90)
    total += os.path.getsize(f"{d}/{i:05d}.jpg")
print(f"# {n} JPEG files, mean {total / n / 1024:.1f} KiB", file=sys.stderr)
