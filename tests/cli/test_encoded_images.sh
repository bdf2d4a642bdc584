#!/usr/bin/env bash
# tests/cli/test_encoded_images.sh — encoded images end to end (docs/data.md "Encoded images"):
#  1. pixels: dtrain's decode + crop + resize (+ flip) of real JPEG and PNG files — Fashion-MNIST
#     images upscaled to varied (odd and even) sizes, gray and colour (JPEG 4:4:4, 4:2:2, 4:2:0),
#     written here with Pillow, crop boxes on every edge, slivers and the whole image; the JPEG
#     decoded only where the box lies (ImageDecoder::decode_region) — equals Pillow's
#     decode + img.crop(box).resize(S, BILINEAR) for the same box, and torchvision's Resize(R) +
#     CenterCrop(S), within 1 grey level on >= 99.9 % of pixels (build/bin/image_tool);
#  2. images_to_h5.py --store encoded: the schema (variable-length uint8 `images`, `image_shapes`,
#     `channels`, labels, class names, mean/std), the original bytes kept, --max-side re-encoding,
#     h5info.py accepting it, and a failed conversion leaving nothing behind;
#  3. dtrain trains on it (--random-resized-crop, --random-flip, --data-threads 2, centre-crop
#     evaluation) with resumable, bit-identical results for the same seed, and the same with
#     --data-threads left at auto (one decode thread on a CPU worker, in the log and results.json);
#  4. bad images: --on-bad-image skip leaves them out and counts them (log, results.json), in the
#     training and the test file (`samples` lowered by the training ones only), fail stops naming
#     the file and sample index, a file of nothing but bad images fails at start, dtrain predict
#     fails on one in its own terms and writes nothing;
#  5. --cache-mb on encoded files: the whole file held (no HDF5 read of a training row), a prefix
#     of a file larger than the budget (at most --cache-mb MiB, the longest prefix that fits), and
#     off; every variant trains bit-identically; hits and misses in the log and results.json;
#  6. decode options refused on decoded pixels, out of bounds, or a --center-crop other than
#     --random-resized-crop; a test file whose class names differ from the training file's.
set -euo pipefail
source "$(dirname "$0")/common.sh"
TOOL="$PY $SRC/data-tools/images_to_h5.py"
H5INFO="$PY $SRC/data-tools/h5info.py"
FMNIST=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
[[ -r $FMNIST ]] || { echo "SKIP: no Fashion-MNIST package (dataset-fashion-mnist)"; exit 77; }

echo "== 1. pixels against Pillow (JPEG and PNG, gray and RGB, 40-400 px sides)"
PYTHONPATH=$SRC/data-tools "$PY" - "$SCRATCH" <<'PY'
import os, sys
import numpy as np
from PIL import Image
from convert_idx import load_fashion_split
d = sys.argv[1]
x, y = load_fashion_split("/usr/share/datasets/fashion-mnist", "train")
x = x[:, 0]  # N×28×28
rng = np.random.default_rng(5)
os.makedirs(f"{d}/pix", exist_ok=True)
cmds, refs = [], []
def ref_array(im, c, s):
    return np.asarray(im).reshape(s, s, c).transpose(2, 0, 1)
for i in range(240):
    w, h = int(rng.integers(40, 400)), int(rng.integers(40, 400))
    im = Image.fromarray(x[i]).resize((w, h), Image.BICUBIC)
    if i % 2:  # colour: a different tone curve per channel
        g = np.asarray(im).astype(np.int32)
        im = Image.fromarray(np.stack([g, 255 - g, (g * 3) % 256], -1).astype(np.uint8))
    ext = "png" if i % 3 == 0 else "jpg"
    p = f"{d}/pix/img{i}.{ext}"
    # colour JPEGs cycle through 4:4:4, 4:2:2 and 4:2:0 chroma subsampling
    q, sub = int(rng.integers(70, 96)), (i // 3) % 3
    im.save(p, quality=q, subsampling=sub) if ext == "jpg" else im.save(p)
    c = 3 if i % 4 < 2 else 1
    s = int(rng.integers(8, 80))
    bw, bh = int(rng.integers(1, w + 1)), int(rng.integers(1, h + 1))
    if i % 7 == 3:  # a sliver: 1-3 columns or rows
        bw, bh = (bw % 3 + 1, bh) if i % 2 else (bw, bh % 3 + 1)
    bx, by = int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1))
    # boxes touching each edge of the image, and the whole image (the region decode's edges)
    bx, by, bw, bh = [(bx, by, bw, bh), (0, by, bw, bh), (w - bw, by, bw, bh), (bx, 0, bw, bh),
                      (bx, h - bh, bw, bh), (0, 0, w, h)][int(rng.integers(0, 6))]
    flip = int(rng.integers(0, 2))
    with Image.open(p) as src:
        img = src.convert("RGB" if c == 3 else "L")
    cmds.append(f"crop {p} {c} {bx} {by} {bw} {bh} {s} {flip}")
    r = img.crop((bx, by, bx + bw, by + bh)).resize((s, s), Image.BILINEAR)
    refs.append(ref_array(r.transpose(Image.FLIP_LEFT_RIGHT) if flip else r, c, s))
    R = int(rng.integers(s, 2 * s + 20))  # torchvision Resize(R) + CenterCrop(s)
    cmds.append(f"center {p} {c} {R} {s}")
    W, H = img.size
    nw, nh = (R, int(R * H / W)) if W <= H else (int(R * W / H), R)
    top, left = int(round((nh - s) / 2.0)), int(round((nw - s) / 2.0))
    refs.append(ref_array(img.resize((nw, nh), Image.BILINEAR).crop((left, top, left + s, top + s)), c, s))
open(f"{d}/pix/cmds.txt", "w").write("\n".join(cmds) + "\n")
np.save(f"{d}/pix/refs.npy", np.concatenate([r.reshape(-1) for r in refs]))
PY
"$BIN/image_tool" "$SCRATCH/pix/out.bin" <"$SCRATCH/pix/cmds.txt" >"$SCRATCH/pix/res.txt" || fail "image_tool failed"
[[ $(grep -c '^ok' "$SCRATCH/pix/res.txt") -eq 480 ]] || { grep -v '^ok' "$SCRATCH/pix/res.txt" | head; fail "not every image decoded"; }
"$PY" - "$SCRATCH" <<'PY' || fail "pixels differ from Pillow's"
import sys, numpy as np
d = sys.argv[1]
ref = np.load(f"{d}/pix/refs.npy").astype(np.int16)
out = np.fromfile(f"{d}/pix/out.bin", np.uint8).astype(np.int16)
assert ref.size == out.size, (ref.size, out.size)
diff = np.abs(ref - out)
within = float((diff <= 1).mean())
print(f"{ref.size} pixels (480 crops): {100 * within:.4f} % within 1 grey level, {100 * float((diff == 0).mean()):.4f} % equal, max diff {diff.max()}")
assert within >= 0.999
PY

echo "== flip is the mirror image; the random crop is a pure function of its key"
p=$SCRATCH/pix/img1.jpg
printf 'rrc %s 3 32 77 0\nrrc %s 3 32 77 1\nrrc %s 3 32 77 0\nrrc %s 3 32 78 0\n' "$p" "$p" "$p" "$p" |
  "$BIN/image_tool" "$SCRATCH/pix/rrc.bin" >"$SCRATCH/pix/rrc.txt"
"$PY" - "$SCRATCH" <<'PY' || fail "flip or key"
import sys, numpy as np
d = sys.argv[1]
a = np.fromfile(f"{d}/pix/rrc.bin", np.uint8).reshape(4, 3, 32, 32)
boxes = open(f"{d}/pix/rrc.txt").read().split("\n")
assert np.array_equal(a[1], a[0][:, :, ::-1]), "flip is not the mirror image"
assert np.array_equal(a[2], a[0]) and boxes[0] == boxes[2], "same key, different crop"
assert boxes[3] != boxes[0], "another key, same crop"
PY

echo "== 2. images_to_h5.py --store encoded"
PYTHONPATH=$SRC/data-tools "$PY" - "$SCRATCH" <<'PY'
import os, sys
import numpy as np
from PIL import Image
from convert_idx import load_fashion_split
d = sys.argv[1]
x, y = load_fashion_split("/usr/share/datasets/fashion-mnist", "train")
x = x[:, 0]  # N×28×28
rng = np.random.default_rng(2)
names = ["tshirt", "trouser", "pullover", "dress"]
count = {k: 0 for k in range(4)}
for i in range(2000):
    k = int(y[i])
    if k >= 4 or count[k] >= 60:
        continue
    count[k] += 1
    s = int(rng.integers(28, 90))
    im = Image.fromarray(x[i]).resize((s, int(s * rng.uniform(0.75, 1.33))), Image.BILINEAR)
    os.makedirs(f"{d}/tree/{names[k]}", exist_ok=True)
    if count[k] % 4 == 0:
        im.save(f"{d}/tree/{names[k]}/i{i}.png")
    else:
        im.convert("RGB").save(f"{d}/tree/{names[k]}/i{i}.JPG", quality=92)
PY
$TOOL "$SCRATCH/tree" --store encoded --channels 1 --out-dir "$SCRATCH/enc" --val-fraction 0.25 --quiet ||
  fail "--store encoded failed"
$H5INFO "$SCRATCH/enc/train.h5" "$SCRATCH/enc/test.h5" >"$SCRATCH/h5info.txt" || { cat "$SCRATCH/h5info.txt"; fail "h5info rejects the encoded files"; }
grep -q "encoded" "$SCRATCH/h5info.txt" || fail "h5info does not say encoded"
"$PY" - "$SCRATCH" <<'PY' || fail "encoded schema"
import io, os, sys, glob
import h5py, numpy as np
from PIL import Image
d = sys.argv[1]
files = sorted(glob.glob(f"{d}/tree/*/*"))
by_bytes = {open(p, "rb").read(): p for p in files}
with h5py.File(f"{d}/enc/train.h5", "r") as f, h5py.File(f"{d}/enc/test.h5", "r") as t:
    im = f["images"]
    assert h5py.check_vlen_dtype(im.dtype) == np.uint8 and im.ndim == 1 and im.chunks is not None
    assert int(f.attrs["channels"]) == 1 and int(f.attrs["num_classes"]) == 4
    assert [str(s) for s in f.attrs["class_names"]] == ["dress", "pullover", "trouser", "tshirt"]
    assert im.shape[0] + t["images"].shape[0] == 240 and t["images"].shape[0] == 60
    sh, lab = f["image_shapes"][()], f["labels"][()]
    pix = []
    for i in range(im.shape[0]):
        raw = im[i].tobytes()
        src = by_bytes.get(raw)
        assert src is not None, f"row {i}: bytes are not one of the files (kept as they are)"
        cls = os.path.basename(os.path.dirname(src))
        assert lab[i] == ["dress", "pullover", "trouser", "tshirt"].index(cls)
        with Image.open(io.BytesIO(raw)) as p:
            assert tuple(sh[i]) == ({"L": 1, "RGB": 3}[p.mode], p.height, p.width), (sh[i], p.mode, p.size)
            pix.append(np.asarray(p.convert("L"), np.float64).reshape(-1) / 255)
    allp = np.concatenate(pix)
    assert abs(allp.mean() - float(f.attrs["mean"][0])) < 1e-5 and abs(allp.std() - float(f.attrs["std"][0])) < 1e-5
    assert np.array_equal(f.attrs["mean"], t.attrs["mean"])
print("schema, bytes, labels, shapes and mean/std as expected")
PY
$TOOL "$SCRATCH/tree" --store encoded --max-side 32 --channels 3 --out "$SCRATCH/small.h5" --quiet || fail "--max-side"
"$PY" - "$SCRATCH" <<'PY' || fail "--max-side"
import io, sys, h5py, numpy as np
from PIL import Image
with h5py.File(f"{sys.argv[1]}/small.h5", "r") as f:
    sh = f["image_shapes"][()]
    assert min(sh[:, 1].min(), sh[:, 2].min()) >= 1 and np.minimum(sh[:, 1], sh[:, 2]).max() == 32, sh[:5]
    for i in range(len(sh)):
        with Image.open(io.BytesIO(f["images"][i].tobytes())) as p:
            assert (p.height, p.width) == tuple(sh[i, 1:])
PY
echo "-- a failed conversion leaves nothing behind"
mkdir -p "$SCRATCH/badtree/a" "$SCRATCH/badtree/b" "$SCRATCH/o-bad"
cp "$SCRATCH"/tree/dress/*.JPG "$SCRATCH/badtree/a/" && cp "$SCRATCH"/tree/trouser/*.png "$SCRATCH/badtree/b/"
printf 'not a jpeg' >"$SCRATCH/badtree/b/zz.jpg"
rc=0
$TOOL "$SCRATCH/badtree" --store encoded --out-dir "$SCRATCH/o-bad" --val-fraction 0.2 >"$SCRATCH/err.txt" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || { cat "$SCRATCH/err.txt"; fail "a corrupt image did not fail the conversion (rc $rc)"; }
grep -q "badtree/b/zz.jpg: cannot decode image" "$SCRATCH/err.txt" || { cat "$SCRATCH/err.txt"; fail "message"; }
[[ -z $(ls -A "$SCRATCH/o-bad") ]] || fail "left behind: $(ls -A "$SCRATCH/o-bad")"
rc=0
$TOOL "$SCRATCH/tree" --store encoded --size 32 --out "$SCRATCH/x.h5" >"$SCRATCH/err.txt" 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q "max-side" "$SCRATCH/err.txt" || fail "--size with --store encoded accepted"

echo "== 3. dtrain trains on encoded files (random-resized crop 24, flip, 2 decode threads)"
write_job "$SCRATCH/job.ini"
train() {  # train NAME ARGS...
  local name=$1
  shift
  timeout 180 "$MPIEXEC" -n 2 "$DTRAIN" --config "$SCRATCH/job.ini" --epochs 2 --batch-size 8 --mode sync \
    --num-ps 0 --run-dir "$SCRATCH/$name" "$@" >"$SCRATCH/$name.log" 2>&1
}
train run1 --train-data "$SCRATCH/enc/train.h5" --test-data "$SCRATCH/enc/test.h5" --random-resized-crop 24 \
  --random-flip --data-threads 2 --eval-resize 28 || { cat "$SCRATCH/run1.log"; fail "training on encoded files"; }
[[ $(json_get "$SCRATCH/run1/results.json" epochs_completed) -eq 2 ]] || fail "epochs"
[[ $(json_get "$SCRATCH/run1/results.json" bad_images_skipped) -eq 0 ]] || fail "bad images counted in a clean file"
grep -q "1x24x24" "$SCRATCH/run1.log" || grep -q "1×24×24" "$SCRATCH/run1.log" || { grep -i sample "$SCRATCH/run1.log" | head -3; fail "sample shape not 1x24x24"; }
# The second run leaves --data-threads at auto: one decode thread on a CPU worker.
train run2 --train-data "$SCRATCH/enc/train.h5" --test-data "$SCRATCH/enc/test.h5" --random-resized-crop 24 \
  --random-flip --eval-resize 28 || { cat "$SCRATCH/run2.log"; fail "second run"; }
for r in "run1 2" "run2 1"; do
  set -- $r
  [[ $(json_get "$SCRATCH/$1/results.json" data_threads) -eq $2 ]] || fail "$1: data_threads $(json_get "$SCRATCH/$1/results.json" data_threads), want $2"
  grep -q "encoded images decoded on $2 thread(s) per worker" "$SCRATCH/$1.log" || fail "$1: no line naming its $2 decode thread(s)"
done
"$PY" - "$SCRATCH" <<'PY' || fail "1 and 2 decode threads trained differently"
import json, sys
d = sys.argv[1]
a, b = (json.load(open(f"{d}/{r}/results.json")) for r in ("run1", "run2"))
assert a["test_loss"] == b["test_loss"] and a["test_accuracy"] == b["test_accuracy"], (a["test_loss"], b["test_loss"])
print(f"same seed, 1 and 2 decode threads: test loss {a['test_loss']:.6f} both")
PY
rc=0
train run3 --train-data "$SCRATCH/enc/train.h5" --test-data "$SCRATCH/enc/test.h5" || rc=$?
[[ $rc -eq 2 ]] && grep -q "random-resized-crop SIZE" "$SCRATCH/run3.log" || { cat "$SCRATCH/run3.log"; fail "no output size accepted"; }
rc=0
train run4 --train-data "$SCRATCH/enc/train.h5" --random-resized-crop 24 --random-crop 2 || rc=$?
[[ $rc -eq 2 ]] && grep -q "option --random-crop" "$SCRATCH/run4.log" || { cat "$SCRATCH/run4.log"; fail "--random-crop on encoded accepted"; }

echo "== 4. bad images: skip (counted), fail (named), all bad (at start)"
"$PY" - "$SCRATCH" <<'PY'
import shutil, sys, h5py, numpy as np
d = sys.argv[1]
shutil.copy(f"{d}/enc/train.h5", f"{d}/bad.h5")
with h5py.File(f"{d}/bad.h5", "r+") as f:
    im = f["images"]
    im[3] = im[3][: len(im[3]) // 2]                     # truncated
    im[7] = np.frombuffer(b"garbage bytes", np.uint8)    # not an image
    im[11] = np.zeros(0, np.uint8)                       # empty
shutil.copy(f"{d}/enc/test.h5", f"{d}/badtest.h5")
with h5py.File(f"{d}/badtest.h5", "r+") as f:
    f["images"][5] = np.frombuffer(b"garbage bytes", np.uint8)
    f["images"][9] = np.frombuffer(b"garbage bytes", np.uint8)
shutil.copy(f"{d}/enc/test.h5", f"{d}/allbad.h5")
with h5py.File(f"{d}/allbad.h5", "r+") as f:
    for i in range(f["images"].shape[0]):
        f["images"][i] = np.frombuffer(b"\xff\xd8\xff junk", np.uint8)
PY
# 2 bad test images too, evaluated after each epoch and at step 10 (--eval-every 10).
train skip --train-data "$SCRATCH/bad.h5" --test-data "$SCRATCH/badtest.h5" --random-resized-crop 24 \
  --data-threads 2 --eval-every 10 || { cat "$SCRATCH/skip.log"; fail "skip mode failed"; }
evals=$("$PY" -c 'import csv, sys; print(sum(r["kind"] == "test" for r in csv.DictReader(open(sys.argv[1]))))' \
  "$SCRATCH/skip/metrics.csv")
[[ $evals -ge 3 ]] || { cat "$SCRATCH/skip/metrics.csv"; fail "$evals evaluations, expected at least 3"; }
[[ $(json_get "$SCRATCH/skip/results.json" bad_images_skipped) -eq $((6 + 2 * evals)) ]] ||
  fail "expected 3 bad images × 2 epochs + 2 bad test images × $evals evaluations skipped, results.json says $(json_get "$SCRATCH/skip/results.json" bad_images_skipped)"
grep -q "bad.h5: dataset \`images\` sample 7 is a bad image" "$SCRATCH/skip.log" || { cat "$SCRATCH/skip.log"; fail "skip not logged"; }
grep -q "badtest.h5: dataset \`images\` sample 9 is a bad image" "$SCRATCH/skip.log" || { cat "$SCRATCH/skip.log"; fail "test skip not logged"; }
grep -q "# bad images skipped: $((6 + 2 * evals))" "$SCRATCH/skip.log" || fail "no summary line"
# The samples trained leave the training images skipped out (not the test set's): 2 epochs of the
# file's images, less the 6 skipped.
"$PY" - "$SCRATCH/skip/results.json" "$SCRATCH/bad.h5" <<'PY' || fail "samples counts skipped images"
import json, sys, h5py
r, n = json.load(open(sys.argv[1])), h5py.File(sys.argv[2], "r")["images"].shape[0]
assert r["samples"] == 2 * n - 6, (r["samples"], n)
PY
# The chief's first 6 batches are all bad (unshuffled, its shard is rows 0-89): the log interval of
# steps 0-3 trained on no sample of its own and has no loss (not a loss of 0 in metrics.csv).
"$PY" - "$SCRATCH" <<'PY'
import shutil, sys, h5py, numpy as np
d = sys.argv[1]
shutil.copy(f"{d}/enc/train.h5", f"{d}/badhead.h5")
with h5py.File(f"{d}/badhead.h5", "r+") as f:
    for i in range(48):
        f["images"][i] = np.frombuffer(b"garbage bytes", np.uint8)
PY
train badhead --train-data "$SCRATCH/badhead.h5" --random-resized-crop 24 --shuffle false ||
  { cat "$SCRATCH/badhead.log"; fail "a run whose first batches are all bad"; }
grep -qE "^step +[0-9]+ \| epoch +1 \| loss +- \| acc +- \|" "$SCRATCH/badhead.log" ||
  { grep "^step" "$SCRATCH/badhead.log"; fail "no log line without a loss for the interval of bad batches"; }
"$PY" - "$SCRATCH/badhead/metrics.csv" <<'PY' || fail "metrics.csv of a run with all-bad batches"
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "train"]
assert rows and all(float(r["loss"]) > 0 for r in rows), [(r["global_step"], r["loss"]) for r in rows]
PY
rc=0
train failrun --train-data "$SCRATCH/bad.h5" --random-resized-crop 24 --on-bad-image fail || rc=$?
[[ $rc -eq 2 ]] || { cat "$SCRATCH/failrun.log"; fail "fail mode: rc $rc, expected 2"; }
grep -qE "bad.h5: dataset \`images\` sample (3|7|11) is a bad image" "$SCRATCH/failrun.log" || { cat "$SCRATCH/failrun.log"; fail "fail mode does not name file and sample"; }
rc=0
train allbad --train-data "$SCRATCH/allbad.h5" --random-resized-crop 24 || rc=$?
[[ $rc -eq 2 ]] && grep -q "allbad.h5: dataset \`images\`: none of the 60 encoded images probed decodes" "$SCRATCH/allbad.log" ||
  { cat "$SCRATCH/allbad.log"; fail "an all-bad file did not fail at start"; }
[[ ! -e $SCRATCH/allbad/results.json ]] || fail "the all-bad run wrote results"
# dtrain predict always fails on a bad image, saying why in its own terms (not --on-bad-image's).
ckpt=$(ls "$SCRATCH"/run1/ckpt-*.h5 | tail -1)
expect_error 2 "bad.h5: dataset \`images\` sample|is a bad image|dtrain predict: every image has its output row" \
  predict --checkpoint "$ckpt" --data "$SCRATCH/bad.h5" --out "$SCRATCH/pbad.h5" --center-crop 24 --threads 1
[[ $last_rc -eq 2 ]] || fail "predict on a bad image: exit $last_rc, want 2"
! grep -q -- "--on-bad-image" "$SCRATCH/case$((cases - 1)).log" || { cat "$SCRATCH/case$((cases - 1)).log"; fail "predict's message names --on-bad-image"; }
[[ ! -e $SCRATCH/pbad.h5 ]] || fail "predict on a bad image wrote its output"
echo "== 5. --cache-mb: encoded rows held in memory"
# run1 above ran with the default --cache-mb 1024: the 180-row file is held whole.
"$PY" - "$SCRATCH/run1/results.json" <<'PY' || fail "whole-file cache"
import json, sys
r = json.load(open(sys.argv[1]))
# 2 epochs x 2 workers x 11 steps x 8 samples consumed (the prefetch may read a batch more)
assert r["encoded_cache_rows"] == 180 and r["encoded_cache_misses"] == 0, r
assert r["encoded_cache_hits"] >= 352 and 0 < r["encoded_cache_mb"] < 1, r
PY
grep -q "# encoded cache (--cache-mb 1024): 180 of 180 rows" "$SCRATCH/run1.log" || { grep "encoded cache" "$SCRATCH/run1.log"; fail "no cache line in the log"; }
train nocache --train-data "$SCRATCH/enc/train.h5" --test-data "$SCRATCH/enc/test.h5" --random-resized-crop 24 \
  --random-flip --data-threads 2 --eval-resize 28 --cache-mb 0 || { cat "$SCRATCH/nocache.log"; fail "--cache-mb 0"; }
[[ $(json_get "$SCRATCH/nocache/results.json" encoded_cache_hits) -eq 0 ]] || fail "--cache-mb 0 still cached"
! grep -q "encoded cache" "$SCRATCH/nocache.log" || fail "--cache-mb 0 logs a cache"
# A file of ~4 MiB (64 noisy 256x256 JPEGs): 1 MiB holds a prefix of it.
"$PY" - "$SCRATCH" <<'PY'
import os, sys
import numpy as np
from PIL import Image
d = sys.argv[1]
rng = np.random.default_rng(9)
for i in range(64):
    os.makedirs(f"{d}/bigtree/c{i % 4}", exist_ok=True)
    px = rng.integers(0, 256, size=(256, 256, 3), dtype=np.uint8)
    Image.fromarray(px).save(f"{d}/bigtree/c{i % 4}/{i:02d}.jpg", quality=90)
PY
$TOOL "$SCRATCH/bigtree" --store encoded --channels 1 --out "$SCRATCH/big.h5" --quiet || fail "big.h5"
for mb in 0 1; do
  train big$mb --train-data "$SCRATCH/big.h5" --test-data "$SCRATCH/big.h5" --random-resized-crop 24 \
    --random-flip --eval-resize 28 --cache-mb $mb || { cat "$SCRATCH/big$mb.log"; fail "big file, --cache-mb $mb"; }
done
"$PY" - "$SCRATCH" <<'PY' || fail "cache of a prefix"
import json, sys, h5py, numpy as np
d = sys.argv[1]
a, b, w = (json.load(open(f"{d}/{r}/results.json")) for r in ("run1", "nocache", "big1"))
assert a["test_loss"] == b["test_loss"] and a["test_accuracy"] == b["test_accuracy"], (a["test_loss"], b["test_loss"])
o = json.load(open(f"{d}/big0/results.json"))
assert w["test_loss"] == o["test_loss"] and w["test_accuracy"] == o["test_accuracy"], (w["test_loss"], o["test_loss"])
with h5py.File(f"{d}/big.h5", "r") as f:
    sizes = np.array([len(x) for x in f["images"][()]])
k = int(np.searchsorted(np.cumsum(sizes), 2**20, side="right"))  # longest prefix <= 1 MiB
assert sizes.sum() > 3 * 2**20 and 0 < k < len(sizes), (sizes.sum(), k)
assert w["encoded_cache_rows"] == k, (w["encoded_cache_rows"], k)
assert abs(w["encoded_cache_mb"] - sizes[:k].sum() / 2**20) < 1e-9 and w["encoded_cache_mb"] <= 1, w
assert w["encoded_cache_hits"] > 0 and w["encoded_cache_misses"] > 0, w
assert o["encoded_cache_hits"] == 0 and o["encoded_cache_rows"] == 0, o
print(f"cache off, whole and a {k}-row prefix ({sizes[:k].sum()} bytes of {sizes.sum()}): same test loss")
PY

echo "== 6. decode options: refused where they would do nothing, bounded, or disagreeing; a test file"
echo "   whose class names are not the training file's"
# --center-crop / --eval-resize on decoded pixels were ignored (the full images trained and
# scored); a huge --eval-resize made every test image "bad"; --data-threads 100000 aborted.
make_data pixels 64 --seed 3
PIX=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/pixels.h5" --mode sync --num-ps 0
     --threads 1 --dry-run)
expect_error 0 "option --center-crop|pixels.h5 holds decoded pixels" "${PIX[@]}" --center-crop 10
expect_error 0 "option --eval-resize|pixels.h5 holds decoded pixels" "${PIX[@]}" --eval-resize 14
expect_error 0 "option --eval-resize: at most 1048576" "${PIX[@]}" --eval-resize 2000000000
expect_error 0 "option --data-threads: at most 1024" "${PIX[@]}" --data-threads 100000
# Each error on every rank (one agreed message), exit 2, no run written.
ENC=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/enc/train.h5" --random-resized-crop 24 --mode sync
     --num-ps 0 --batch-size 8 --threads 1)
expect_error 2 "options --center-crop 20 and --random-resized-crop 24" "${ENC[@]}" --test-data "$SCRATCH/enc/test.h5" \
  --center-crop 20 --run-dir "$SCRATCH/crops"
[[ $last_rc -eq 2 && ! -e $SCRATCH/crops/metrics.csv ]] || fail "--center-crop 20 with --random-resized-crop 24: exit $last_rc"
"$PY" - "$SCRATCH" <<'PY'
import shutil, sys, h5py
d = sys.argv[1]
shutil.copy(f"{d}/enc/test.h5", f"{d}/names.h5")
with h5py.File(f"{d}/names.h5", "r+") as f:  # the same classes, numbered otherwise
    f.attrs["class_names"] = ["dress", "trouser", "pullover", "tshirt"]
PY
expect_error 2 "names.h5: attribute \`class_names\` differs from the training file $SCRATCH/enc/train.h5's: label 1 is 'trouser' here, 'pullover' there" \
  "${ENC[@]}" --test-data "$SCRATCH/names.h5" --run-dir "$SCRATCH/names"
[[ $last_rc -eq 2 && ! -e $SCRATCH/names/metrics.csv ]] || fail "class names differing from the training file's: exit $last_rc"
echo "PASS"
