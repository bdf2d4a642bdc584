#!/usr/bin/env bash
# tests/cli/test_image_dct.sh — the DCT-domain downscale of io/image.cpp (transform_image): when a
# random-resized crop is much smaller than the JPEG (its box, shrunk by d ∈ {2, 4, 8}, still at
# least the output size), the image is decoded at 1/d by libjpeg-turbo and the box resampled from
# there. Reference: Pillow's draft() — the same libjpeg scaled decode — then resize(BILINEAR) of
# the box divided by d. Fashion-MNIST images upscaled to 640×480 (gray and colour JPEGs written
# here), RandomResizedCrop(32) boxes from image_tool.
#   - within 1 grey level on >= 99.9 % of pixels of the draft() reference: both decode with
#     libjpeg-turbo's scaled IDCT, but Pillow may link another libjpeg-turbo release than dtrain,
#     whose rounding may differ by one level; the resampling itself is Pillow's, bit for bit;
#   - the path is really taken: every box here has d ≥ 2, and dtrain's output is closer to the
#     draft() reference than to the full-resolution decode + crop + resize (which differs).
set -euo pipefail
source "$(dirname "$0")/common.sh"
FMNIST=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
[[ -r $FMNIST ]] || { echo "SKIP: no Fashion-MNIST package (dataset-fashion-mnist)"; exit 77; }
"$PY" -c "import PIL" 2>/dev/null || { echo "SKIP: no Pillow for $PY"; exit 77; }
mkdir -p "$SCRATCH/dct"

# Images and the boxes RandomResizedCrop(32) draws for them (image_tool box W H KEY).
PYTHONPATH=$SRC/data-tools "$PY" - "$SCRATCH/dct" <<'PY'
import sys
import numpy as np
from PIL import Image
from convert_idx import load_fashion_split
d = sys.argv[1]
x = load_fashion_split("/usr/share/datasets/fashion-mnist", "train")[0][:, 0]  # N×28×28
cmds = []
for i in range(8):
    img = Image.fromarray(x[i]).resize((640, 480), Image.BICUBIC)
    if i % 2:  # colour: the digit in three tints
        a = np.asarray(img, np.float32)
        tints = np.stack([a, 0.6 * a + 60, 255 - a], -1)
        img = Image.fromarray(tints.clip(0, 255).astype(np.uint8))
    img.save(f"{d}/img{i}.jpg", quality=90)
    for key in range(6):
        cmds.append(f"box 640 480 {1000 * i + key}")
open(f"{d}/boxes.txt", "w").write("\n".join(cmds) + "\n")
PY
"$BIN/image_tool" "$SCRATCH/dct/unused.bin" <"$SCRATCH/dct/boxes.txt" >"$SCRATCH/dct/boxes.out"

# dtrain's crops, and both references.
"$PY" - "$SCRATCH/dct" <<'PY'
import sys
import numpy as np
from PIL import Image
d = sys.argv[1]
S = 32
boxes = [tuple(map(int, l.split())) for l in open(f"{d}/boxes.out").read().split("\n") if l]
cmds, draft, full, denoms = [], [], [], []
for n, (x, y, w, h) in enumerate(boxes):
    i, key = n // 6, 1000 * (n // 6) + n % 6
    path = f"{d}/img{i}.jpg"
    mode, c = ("RGB", 3) if i % 2 else ("L", 1)
    # pick_denom of transform_image with dct_ratio 1: the largest d with box / d >= S.
    k = next((k for k in (8, 4, 2) if w // k >= S and h // k >= S), 1)
    denoms.append(k)
    cmds.append(f"rrc {path} {c} {S} {key} 0")
    im = Image.open(path)
    im.draft(mode, (640 // k, 480 // k))
    assert im.size == (640 // k, 480 // k), (im.size, k)
    box = (x / k, y / k, min(im.size[0], (x + w) / k), min(im.size[1], (y + h) / k))
    planar = lambda a: (a[None] if a.ndim == 2 else a.transpose(2, 0, 1)).reshape(-1)
    draft.append(planar(np.asarray(im.convert(mode).resize((S, S), Image.BILINEAR, box=box))))
    whole = Image.open(path).convert(mode)
    full.append(planar(np.asarray(whole.crop((x, y, x + w, y + h)).resize((S, S), Image.BILINEAR))))
assert min(denoms) >= 2, f"a box too large for the DCT path: denominators {denoms}"
print(f"{len(boxes)} crops, DCT denominators {sorted(set(denoms))}")
open(f"{d}/cmds.txt", "w").write("\n".join(cmds) + "\n")
np.save(f"{d}/draft.npy", np.concatenate(draft))
np.save(f"{d}/full.npy", np.concatenate(full))
PY
"$BIN/image_tool" "$SCRATCH/dct/out.bin" <"$SCRATCH/dct/cmds.txt" >"$SCRATCH/dct/res.txt" ||
  fail "image_tool failed"
[[ $(grep -c '^ok' "$SCRATCH/dct/res.txt") -eq 48 ]] || fail "not every crop decoded"
"$PY" - "$SCRATCH/dct" <<'PY' || fail "the DCT-scaled crops differ from Pillow's draft() + resize"
import sys
import numpy as np
d = sys.argv[1]
out = np.fromfile(f"{d}/out.bin", np.uint8).astype(np.int16)
draft = np.load(f"{d}/draft.npy").astype(np.int16)
full = np.load(f"{d}/full.npy").astype(np.int16)
assert out.size == draft.size == full.size, (out.size, draft.size, full.size)
dd, df = np.abs(out - draft), np.abs(out - full)
within = float((dd <= 1).mean())
print(f"{out.size} pixels: draft() reference {100 * within:.4f} % within 1 grey level, "
      f"{100 * float((dd == 0).mean()):.4f} % equal, max diff {dd.max()}, mean {dd.mean():.4f}; "
      f"full-resolution reference: mean diff {df.mean():.4f}, max {df.max()}")
assert within >= 0.999
assert dd.mean() < df.mean(), "no closer to the draft() reference than to the full decode"
PY
echo "PASS"
