#!/usr/bin/env bash
# tests/cli/test_images_to_h5.sh — data-tools/images_to_h5.py end to end: a tree of real PNG and
# JPEG files made here with Pillow (RGB, RGBA, grayscale and palette images of several sizes, upper-
# case extensions, a stray text file) → train.h5 + test.h5 (--val-fraction) that h5info.py accepts,
# with the expected shapes, labels, class names and exact pixels; dtrain trains on them for an epoch;
# --like maps a separate validation tree onto the training classes, and --labels the same images as
# one folder with a file of classes (header, comments, names without extensions) to the same rows;
# an ambiguous name, an unlabelled image, a line naming no image, an image labelled twice, a line
# without a class, a class unknown to --like and a missing labels file are errors naming the file
# and line, with nothing written. --store encoded keeps each file's own bytes (a multi-picture JPEG,
# MPO, too) and writes a split of one image; the mean/std of images it re-encodes (--max-side) are
# those of their stored bytes decoded. A corrupt JPEG, a truncated PNG, a .jpg that is not an image
# or is empty (named by its path in both modes), an empty class folder,
# encoded bytes Pillow decodes but dtrain rejects (a PNG without IEND or with a wrong chunk CRC, a
# JPEG without its end marker), an image side over 2^20, a class folder whose name is not UTF-8
# (refused before any image is decoded), an existing output, an output that is a directory or under
# a file, and an interruption: exit non-zero with a message naming the file or folder (no
# traceback), and no output or temporary file left behind. A 16-bit grayscale PNG becomes its high
# byte (its own bytes kept with --store encoded); images in sub-folders of a class folder are
# samples of it, in ImageFolder's order; hidden files and folders are counted as skipped; a file
# name that is not UTF-8 is shown with \xNN. A full disk (the no_space.so shim): one line, exit 1.
set -euo pipefail
source "$(dirname "$0")/common.sh"
TOOL="$PY $SRC/data-tools/images_to_h5.py"
H5INFO="$PY $SRC/data-tools/h5info.py"

# convert_fails NEEDLE OUTDIR ARGS...: the tool must fail, print NEEDLE, and leave OUTDIR empty.
convert_fails() {
  local needle=$1 outdir=$2
  shift 2
  mkdir -p "$outdir"
  local rc=0
  $TOOL "$@" >"$SCRATCH/err.txt" 2>&1 || rc=$?
  [[ $rc -ne 0 ]] || { cat "$SCRATCH/err.txt"; fail "accepted: $*"; }
  grep -qF -- "$needle" "$SCRATCH/err.txt" || { cat "$SCRATCH/err.txt"; fail "no '$needle' in the message for: $*"; }
  [[ -z $(ls -A "$outdir") ]] || fail "left behind in $outdir: $(ls -A "$outdir")"
  echo "-- exit $rc: $(grep error: "$SCRATCH/err.txt" | head -1)"
}

"$PY" - "$SCRATCH" <<'PY'
import os, sys
import numpy as np
from PIL import Image
d = sys.argv[1]
rng = np.random.default_rng(1)
# 3 learnable classes: a bright square in a different place per class, on noise; 24 images each.
for k, cls in enumerate(["apple", "banana", "cherry"]):
    for split, n in (("tree", 24), ("val", 6)):
        os.makedirs(f"{d}/{split}/{cls}", exist_ok=True)
        for i in range(n):
            h, w = (int(x) for x in rng.integers(20, 48, size=2))
            a = rng.integers(0, 80, size=(h, w, 3), dtype=np.uint8)
            y0, x0 = [(0, 0), (h // 2, 0), (0, w // 2)][k]
            a[y0:y0 + h // 2, x0:x0 + w // 2] = [200, 180, 160]
            im = Image.fromarray(a)
            kind = i % 5
            name = f"{d}/{split}/{cls}/img{i:02d}"
            if kind == 0: im.save(name + ".jpg", quality=92)
            elif kind == 1: im.save(name + ".JPEG", quality=92)
            elif kind == 2: im.convert("RGBA").save(name + ".png")
            elif kind == 3: im.convert("L").save(name + ".png")
            else: im.convert("P", palette=Image.ADAPTIVE, colors=64).save(name + ".Png")
open(f"{d}/tree/apple/README.txt", "w").write("not an image\n")
# An image of known pixels at the output size (16 high, 12 wide): kept exactly with --fit stretch.
os.makedirs(f"{d}/exact/one", exist_ok=True)
pattern = (np.arange(16 * 12 * 3).reshape(16, 12, 3) % 251).astype(np.uint8)
Image.fromarray(pattern).save(f"{d}/exact/one/p.png")
np.save(f"{d}/pattern.npy", pattern)
# Broken trees: a corrupt JPEG, a truncated PNG, an empty class folder.
import shutil
for bad in ("corrupt", "truncated", "empty"):
    shutil.copytree(f"{d}/val", f"{d}/{bad}")
open(f"{d}/corrupt/banana/img03.jpg", "wb").write(b"\xff\xd8\xff\xe0 this is not really a JPEG" * 20)
png = open(f"{d}/truncated/cherry/img02.png", "rb").read()
open(f"{d}/truncated/cherry/img02.png", "wb").write(png[: len(png) // 2])
os.makedirs(f"{d}/empty/durian")
PY

echo "== a tree of PNG and JPEG files → train.h5 + test.h5"
$TOOL "$SCRATCH/tree" --size 16x12 --out-dir "$SCRATCH/out" --val-fraction 0.25 --seed 3 >"$SCRATCH/conv.log" 2>&1 ||
  { cat "$SCRATCH/conv.log"; fail "conversion failed"; }
grep -q "skipped 1 files" "$SCRATCH/conv.log" || fail "the stray text file was not reported as skipped"
$H5INFO "$SCRATCH/out/train.h5" "$SCRATCH/out/test.h5" >"$SCRATCH/info.txt" || { cat "$SCRATCH/info.txt"; fail "h5info rejects the output"; }
grep -q "images       54×3×16×12 uint8" "$SCRATCH/info.txt" || { cat "$SCRATCH/info.txt"; fail "train.h5 shape"; }
grep -q "images       18×3×16×12 uint8" "$SCRATCH/info.txt" || fail "test.h5 shape"
grep -Eq "^ +0 apple +18 " "$SCRATCH/info.txt" || fail "class 0 is not apple with 18 training images"
grep -Eq "^ +2 cherry +6 " "$SCRATCH/info.txt" || fail "class 2 is not cherry with 6 test images"
[[ $(grep -c "mean / std" "$SCRATCH/info.txt") -eq 2 && $(grep "mean / std" "$SCRATCH/info.txt" | sort -u | wc -l) -eq 1 ]] ||
  fail "train and test do not share mean/std"
ls -A "$SCRATCH/out" | grep -q tmp && fail "temporary files left: $(ls -A "$SCRATCH/out")"

echo "== exact pixels, grayscale, and mean/std against numpy"
$TOOL "$SCRATCH/exact" --size 16x12 --fit stretch --out "$SCRATCH/exact.h5" --quiet || fail "exact conversion"
$TOOL "$SCRATCH/exact" --size 8x6 --channels 1 --out "$SCRATCH/gray.h5" --quiet || fail "grayscale conversion"
"$PY" - "$SCRATCH" <<'PY' || fail "pixel check"
import sys, h5py, numpy as np
d = sys.argv[1]
pattern = np.load(f"{d}/pattern.npy")
with h5py.File(f"{d}/exact.h5", "r") as f:
    x = f["images"][0]
    assert np.array_equal(x, pattern.transpose(2, 0, 1)), "pixels changed"
    want = (pattern / 255.0).reshape(-1, 3)
    assert np.allclose(f.attrs["mean"], want.mean(0), atol=1e-6) and np.allclose(f.attrs["std"], want.std(0), atol=1e-6)
    assert list(f.attrs["class_names"]) == ["one"] and f.attrs["num_classes"] == 1
with h5py.File(f"{d}/gray.h5", "r") as f:
    assert f["images"].shape == (1, 1, 8, 6), f["images"].shape
with h5py.File(f"{d}/out/train.h5", "r") as f:
    x = f["images"][()] / 255.0
    assert np.allclose(f.attrs["mean"], x.mean(axis=(0, 2, 3)), atol=1e-6)
    assert np.allclose(f.attrs["std"], x.std(axis=(0, 2, 3)), atol=1e-6)
print("pixels, grayscale shape and mean/std as expected")
PY

echo "== dtrain trains on the converted files (1 epoch, sync, 2 workers)"
write_job "$SCRATCH/img.ini"
timeout 120 "$MPIEXEC" -n 2 "$DTRAIN" --config "$SCRATCH/img.ini" --epochs 1 --batch-size 8 --mode sync --num-ps 0 \
  --train-data "$SCRATCH/out/train.h5" --test-data "$SCRATCH/out/test.h5" --run-dir "$SCRATCH/run" \
  --random-crop 2 --random-flip >"$SCRATCH/train.log" 2>&1 || { cat "$SCRATCH/train.log"; fail "dtrain failed on the converted files"; }
grep -q "3 classes" "$SCRATCH/train.log" || fail "dtrain did not see 3 classes"
[[ $(json_get "$SCRATCH/run/results.json" epochs_completed) -eq 1 ]] || fail "no epoch completed"

echo "== --like: a separate validation tree on the training classes"
$TOOL "$SCRATCH/val" --size 16x12 --out "$SCRATCH/val.h5" --like "$SCRATCH/out/train.h5" --quiet || fail "--like"
"$PY" - "$SCRATCH" <<'PY' || fail "--like copied the wrong attributes"
import sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(f"{d}/out/train.h5", "r") as t, h5py.File(f"{d}/val.h5", "r") as v:
    assert list(t.attrs["class_names"]) == list(v.attrs["class_names"])
    assert np.array_equal(t.attrs["mean"], v.attrs["mean"]) and np.array_equal(t.attrs["std"], v.attrs["std"])
    assert np.bincount(v["labels"][()]).tolist() == [6, 6, 6]
PY
mkdir -p "$SCRATCH/val2/kiwi" && cp "$SCRATCH/val/apple/img00.jpg" "$SCRATCH/val2/kiwi/"
convert_fails "val2/kiwi: class folder not among the 3 class names" "$SCRATCH/o-like" \
  "$SCRATCH/val2" --size 8 --out "$SCRATCH/o-like/v.h5" --like "$SCRATCH/out/train.h5"
# A --like file whose class_names holds bytes that are not UTF-8 (dtrain reads them; a new file's
# names must be UTF-8): one error naming the file and the name, no traceback.
"$PY" - "$SCRATCH" <<'PY'
import shutil, sys, h5py, numpy as np
d = sys.argv[1]
shutil.copy(f"{d}/out/train.h5", f"{d}/latin1.h5")
with h5py.File(f"{d}/latin1.h5", "r+") as f:
    names = [n.encode() for n in f.attrs["class_names"]]
    names[1] = b"caf\xe9"
    f.attrs["class_names"] = np.array(names, dtype="S8")
PY
convert_fails "--like $SCRATCH/latin1.h5: attribute \`class_names\`: name 1 'caf\\xe9' is not valid UTF-8" \
  "$SCRATCH/o-like" "$SCRATCH/val" --size 8 --out "$SCRATCH/o-like/v.h5" --like "$SCRATCH/latin1.h5"
! grep -q Traceback "$SCRATCH/err.txt" || { cat "$SCRATCH/err.txt"; fail "--like latin1.h5: a traceback"; }

echo "== --labels: the validation tree as one folder and a file of classes"
mkdir -p "$SCRATCH/flat"
{
  echo "name,class"  # a header: names no image
  echo "# a comment, then a blank line"
  echo
  for f in "$SCRATCH"/val/*/*; do
    cls=$(basename "$(dirname "$f")")
    cp "$f" "$SCRATCH/flat/${cls}_$(basename "$f")"
    b=$(basename "$f")
    echo "${cls}_${b%.*}  $cls extra words"  # the name without its extension, spaces between
  done | sort -r
} >"$SCRATCH/labels.txt"
$TOOL "$SCRATCH/flat" --labels "$SCRATCH/labels.txt" --size 16x12 --out "$SCRATCH/flat.h5" \
  --like "$SCRATCH/out/train.h5" --quiet || fail "--labels"
"$PY" - "$SCRATCH" <<'PY' || fail "--labels gave other rows than the class folders"
import sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(f"{d}/val.h5", "r") as tree, h5py.File(f"{d}/flat.h5", "r") as flat:
    assert np.array_equal(tree["labels"][()], flat["labels"][()])
    assert np.array_equal(tree["images"][()], flat["images"][()])
PY
cp "$SCRATCH/flat/apple_img00.jpg" "$SCRATCH/flat/apple_img00.png"
convert_fails "labels.txt:" "$SCRATCH/o-lab1" "$SCRATCH/flat" --labels "$SCRATCH/labels.txt" --size 8 --out "$SCRATCH/o-lab1/v.h5"
grep -qF "'apple_img00' is ambiguous in $SCRATCH/flat: apple_img00.jpg, apple_img00.png" "$SCRATCH/err.txt" ||
  { cat "$SCRATCH/err.txt"; fail "no ambiguity named"; }
sed 's/^apple_img00 /apple_img00.jpg /' "$SCRATCH/labels.txt" >"$SCRATCH/labels2.txt"  # the full name: not ambiguous
convert_fails "flat/apple_img00.png: no label in $SCRATCH/labels2.txt" "$SCRATCH/o-lab2" "$SCRATCH/flat" \
  --labels "$SCRATCH/labels2.txt" --size 8 --out "$SCRATCH/o-lab2/v.h5"
rm "$SCRATCH/flat/apple_img00.png"
printf 'apple_img00 apple\nkiwi_img00 apple\n' >"$SCRATCH/labels3.txt"
convert_fails "labels3.txt:2: no image 'kiwi_img00' in $SCRATCH/flat" "$SCRATCH/o-lab3" "$SCRATCH/flat" --labels "$SCRATCH/labels3.txt" --size 8 --out "$SCRATCH/o-lab3/v.h5"
{ cat "$SCRATCH/labels.txt"; echo "apple_img01.JPEG,banana"; } >"$SCRATCH/labels4.txt"
convert_fails "labels4.txt:22: apple_img01.JPEG is labelled twice" "$SCRATCH/o-lab4" "$SCRATCH/flat" --labels "$SCRATCH/labels4.txt" --size 8 --out "$SCRATCH/o-lab4/v.h5"
{ echo "apple_img00"; } >"$SCRATCH/labels5.txt"
convert_fails "labels5.txt:1: no class after 'apple_img00'" "$SCRATCH/o-lab5" "$SCRATCH/flat" --labels "$SCRATCH/labels5.txt" --size 8 --out "$SCRATCH/o-lab5/v.h5"
sed 's/^\(cherry_img02 *\)cherry/\1kiwi/' "$SCRATCH/labels.txt" >"$SCRATCH/labels6.txt"
convert_fails "labels6.txt: class 'kiwi' not among the 3 class names" "$SCRATCH/o-lab6" "$SCRATCH/flat" --labels "$SCRATCH/labels6.txt" --size 8 --out "$SCRATCH/o-lab6/v.h5" --like "$SCRATCH/out/train.h5"
convert_fails "--labels $SCRATCH/none.txt: cannot read" "$SCRATCH/o-lab7" "$SCRATCH/flat" --labels "$SCRATCH/none.txt" --size 8 --out "$SCRATCH/o-lab7/v.h5"

echo "== bad trees and outputs: an error naming the file or folder, nothing left behind"
convert_fails "corrupt/banana/img03.jpg: cannot decode image" "$SCRATCH/o1" "$SCRATCH/corrupt" --size 8 --out-dir "$SCRATCH/o1" --val-fraction 0.2
convert_fails "truncated/cherry/img02.png: cannot decode image" "$SCRATCH/o2" "$SCRATCH/truncated" --size 8 --out "$SCRATCH/o2/t.h5"
# An output folder the run would create is not left behind when it fails.
convert_fails "truncated/cherry/img02.png: cannot decode image" "$SCRATCH/o2b" "$SCRATCH/truncated" --size 8 --out "$SCRATCH/o2b/new/deeper/t.h5"
[[ ! -e $SCRATCH/o2b/new ]] || fail "a failed conversion left the folders it created: $(find "$SCRATCH/o2b")"
convert_fails "empty/durian: empty class folder" "$SCRATCH/o3" "$SCRATCH/empty" --size 8 --out "$SCRATCH/o3/t.h5"
convert_fails "no class folders" "$SCRATCH/o4" "$SCRATCH/exact/one" --size 8 --out "$SCRATCH/o4/t.h5"
before=$(md5sum <"$SCRATCH/out/train.h5")
convert_fails "exists; not overwriting" "$SCRATCH/o5" "$SCRATCH/tree" --size 8 --out "$SCRATCH/out/train.h5"
[[ $(md5sum <"$SCRATCH/out/train.h5") == "$before" ]] || fail "a refused conversion changed train.h5"
$TOOL "$SCRATCH/tree" --size 8 --out "$SCRATCH/out/train.h5" --force --quiet || fail "--force"
[[ $(md5sum <"$SCRATCH/out/train.h5") != "$before" ]] || fail "--force did not replace train.h5"
rc=0
$TOOL "$SCRATCH/tree" --size 8 --out "$SCRATCH/o6.h5" --val-fraction 0.1 >/dev/null 2>&1 || rc=$?
[[ $rc -eq 2 ]] || fail "--val-fraction without --out-dir: exit $rc, want 2 (usage)"
# An output that is a directory (even with --force), or under a file: exit 1, one line, nothing written.
convert_fails "cannot write $SCRATCH/o8/d/train.h5: it is a directory" "$SCRATCH/o8/d/train.h5" \
  "$SCRATCH/tree" --size 8 --out-dir "$SCRATCH/o8/d" --val-fraction 0.2 --force
convert_fails "cannot write $SCRATCH/o8/x.h5: it is a directory" "$SCRATCH/o8/x.h5" \
  "$SCRATCH/tree" --size 8 --out "$SCRATCH/o8/x.h5" --force
convert_fails "cannot write $SCRATCH/pattern.npy/sub/t.h5: $SCRATCH/pattern.npy is not a directory" "$SCRATCH/o8/e" \
  "$SCRATCH/tree" --size 8 --out "$SCRATCH/pattern.npy/sub/t.h5"
! grep -q Traceback "$SCRATCH/err.txt" || { cat "$SCRATCH/err.txt"; fail "traceback for an output under a file"; }
[[ $(ls -A "$SCRATCH/o8" "$SCRATCH/o8/d" | tr '\n' ' ') == "$SCRATCH/o8: d e x.h5  $SCRATCH/o8/d: train.h5 " ]] ||
  fail "left behind: $(ls -AR "$SCRATCH/o8")"

echo "== --store encoded: a split of one image, an MPO kept as its JPEG bytes; bytes dtrain rejects,"
echo "   a side over 2^20 and a non-UTF-8 class folder are errors naming the file or folder"
"$PY" - "$SCRATCH/enc" <<'PY'
import io, os, struct, sys
import numpy as np
from PIL import Image
d = sys.argv[1]
rng = np.random.default_rng(4)
def img(h, w):
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
def encoded(im, fmt):
    b = io.BytesIO(); im.save(b, fmt); return b.getvalue()
# a: 3 PNGs and a multi-picture JPEG (MPO), b: one JPEG; --val-fraction 0.25 puts one image of a
# (and none of b) into test.h5: a write block of one row.
for c in "ab":
    os.makedirs(f"{d}/tree/{c}")
for i in range(3):
    img(20 + i, 24).save(f"{d}/tree/a/p{i}.png")
img(30, 40).save(f"{d}/tree/a/photo.jpg", "MPO", save_all=True, append_images=[img(15, 20)], quality=90)
with Image.open(f"{d}/tree/a/photo.jpg") as im:
    assert im.format == "MPO" and im.n_frames == 2, (im.format, im.n_frames)
img(16, 16).save(f"{d}/tree/b/only.jpg", quality=90)
# Bytes Pillow decodes but dtrain rejects, each in a tree of its own (and a good image in a).
png, jpg = encoded(img(32, 32), "PNG"), encoded(img(32, 32), "JPEG")
n = struct.unpack(">I", png[33:37])[0]
bad_crc = bytearray(png); bad_crc[33 + 8 + n] ^= 0xFF            # the IDAT CRC, data intact
no_eoi = jpg[:-2] + b"\0" * 512                                  # the EOI marker zeroed
com_eoi = jpg[:2] + b"\xff\xfe\x00\x04\xff\xd9" + no_eoi[2:]    # ... and an FF D9 in a comment
bad = {"noiend.png": png[:-12], "badcrc.png": bytes(bad_crc), "noeoi.jpg": no_eoi, "comeoi.jpg": com_eoi}
for name, data in bad.items():
    for c in "ab":
        os.makedirs(f"{d}/bad-{name}/{c}")
    img(8, 8).save(f"{d}/bad-{name}/a/good.png")
    open(f"{d}/bad-{name}/b/{name}", "wb").write(data)
    with Image.open(f"{d}/bad-{name}/b/{name}") as im:
        im.load()  # Pillow decodes it: only the check of the stored bytes refuses it
# A strip 2^20 + 1 pixels wide (the schema allows sides up to 2^20).
os.makedirs(f"{d}/wide/a")
Image.new("L", ((1 << 20) + 1, 1)).save(f"{d}/wide/a/strip.png")
# A class folder named in Latin-1, not UTF-8, and a corrupt image in the other: the name is refused
# by the tree scan, before any image is decoded.
root = f"{d}/latin1".encode()
for c in (b"caf\xe9", b"tea"):
    os.makedirs(root + b"/" + c)
with open(root + b"/caf\xe9/i.png", "wb") as fh:
    img(8, 8).save(fh, "PNG")
open(root + b"/tea/corrupt.png", "wb").write(b"\x89PNG\r\n\x1a\n not a PNG")
# A file that is not an image, and an empty one: named in both modes as Pillow names a path (the
# encoded mode reads the bytes first: Pillow's message named the in-memory file object).
for name, data in (("notimg.jpg", b"hello"), ("empty.jpg", b"")):
    for c in "ab":
        os.makedirs(f"{d}/bad-{name}/{c}")
    img(8, 8).save(f"{d}/bad-{name}/a/good.png")
    open(f"{d}/bad-{name}/b/{name}", "wb").write(data)
PY
$TOOL "$SCRATCH/enc/tree" --store encoded --out-dir "$SCRATCH/enc/out" --val-fraction 0.25 --quiet ||
  fail "--store encoded with a one-image test split"
$H5INFO "$SCRATCH/enc/out/train.h5" "$SCRATCH/enc/out/test.h5" >"$SCRATCH/enc/info.txt" ||
  { cat "$SCRATCH/enc/info.txt"; fail "h5info rejects the encoded files"; }
"$PY" - "$SCRATCH/enc" <<'PY' || fail "encoded rows are not the files' own bytes"
import glob, sys, h5py
d = sys.argv[1]
rows = []
for split, n in (("train", 4), ("test", 1)):
    with h5py.File(f"{d}/out/{split}.h5", "r") as f:
        assert len(f["images"]) == n, (split, len(f["images"]))
        rows += [f["images"][i].tobytes() for i in range(n)]
files = sorted(open(p, "rb").read() for p in glob.glob(f"{d}/tree/*/*"))
assert sorted(rows) == files, "a row is not its file's bytes (the MPO re-encoded?)"
print("5 rows, each its file's own bytes (the MPO a JPEG)")
PY
# Re-encoded (--max-side, JPEG at a low quality): mean/std are those of the images as stored,
# decoded, not of the pixels before the lossy re-encoding.
$TOOL "$SCRATCH/enc/tree" --store encoded --max-side 12 --quality 20 --out "$SCRATCH/enc/small.h5" --quiet ||
  fail "--store encoded --max-side 12"
"$PY" - "$SCRATCH/enc/small.h5" <<'PY' || fail "mean/std of re-encoded images are not those of the stored bytes"
import io, sys, h5py, numpy as np
from PIL import Image
with h5py.File(sys.argv[1], "r") as f:
    assert f["image_shapes"][:, 1:].min() == 12, f["image_shapes"][()]  # every image re-encoded
    px = np.concatenate([np.asarray(Image.open(io.BytesIO(f["images"][i].tobytes())).convert("RGB"),
                                    np.float64).reshape(-1, 3) / 255 for i in range(len(f["images"]))])
    mean, std = f.attrs["mean"], f.attrs["std"]
assert np.abs(px.mean(0) - mean).max() < 1e-6 and np.abs(px.std(0) - std).max() < 1e-6, (px.mean(0), mean)
print(f"re-encoded: mean {mean} = the stored images' mean")
PY
convert_fails "bad-noiend.png/b/noiend.png: corrupt or truncated image, which dtrain would skip as bad: PNG without an IEND chunk" \
  "$SCRATCH/enc/o1" "$SCRATCH/enc/bad-noiend.png" --store encoded --out "$SCRATCH/enc/o1/t.h5"
convert_fails "bad-badcrc.png/b/badcrc.png: corrupt or truncated image, which dtrain would skip as bad: PNG chunk IDAT at byte 33 has a wrong CRC" \
  "$SCRATCH/enc/o2" "$SCRATCH/enc/bad-badcrc.png" --store encoded --out "$SCRATCH/enc/o2/t.h5"
for name in noeoi comeoi; do
  convert_fails "bad-$name.jpg/b/$name.jpg: corrupt or truncated image, which dtrain would skip as bad: JPEG without its end-of-image marker (FF D9)" \
    "$SCRATCH/enc/o-$name" "$SCRATCH/enc/bad-$name.jpg" --store encoded --out "$SCRATCH/enc/o-$name/t.h5"
done
for mode in "--store encoded" "--size 8"; do
  convert_fails "bad-notimg.jpg/b/notimg.jpg: cannot decode image: cannot identify image file '$SCRATCH/enc/bad-notimg.jpg/b/notimg.jpg' (expected a JPEG or PNG image)" \
    "$SCRATCH/enc/o-notimg" "$SCRATCH/enc/bad-notimg.jpg" $mode --out "$SCRATCH/enc/o-notimg/t.h5"
  convert_fails "bad-empty.jpg/b/empty.jpg: cannot decode image: cannot identify image file '$SCRATCH/enc/bad-empty.jpg/b/empty.jpg' (an empty file)" \
    "$SCRATCH/enc/o-empty" "$SCRATCH/enc/bad-empty.jpg" $mode --out "$SCRATCH/enc/o-empty/t.h5"
done
convert_fails "wide/a/strip.png: image of 1048577×1 pixels: a side is longer than 1048576, the limit of encoded images" \
  "$SCRATCH/enc/o3" "$SCRATCH/enc/wide" --store encoded --out "$SCRATCH/enc/o3/t.h5"
convert_fails "latin1: class folder b'caf\\xe9': name is not valid UTF-8" \
  "$SCRATCH/enc/o4" "$SCRATCH/enc/latin1" --size 8 --out "$SCRATCH/enc/o4/t.h5"

echo "== a 16-bit grayscale PNG: its high byte (as dtrain decodes it), not white; sub-folders of a"
echo "   class folder walked as ImageFolder walks them; hidden files counted; non-UTF-8 names shown"
"$PY" - "$SCRATCH/odd" <<'PY'
import os, sys
import numpy as np
from PIL import Image
d = sys.argv[1]
g16 = np.full((40, 50), 0x8000, np.uint16)
g16[:, :25] = 0x4000
for c in ("a", "b"):
    os.makedirs(f"{d}/g16/{c}")
Image.fromarray(g16).save(f"{d}/g16/a/gray16.png")
with Image.open(f"{d}/g16/a/gray16.png") as im:
    assert im.mode.startswith("I"), im.mode  # Pillow reads it as 16-bit: convert("L") would clip it
Image.new("L", (8, 8), 200).save(f"{d}/g16/b/gray8.png")
# A class folder with images in sub-folders (solid grays 10, 20, 30; b: 40), a hidden AppleDouble
# file and a hidden folder (skipped and counted).
for sub in ("nest/a/sub/deeper", "nest/a/.hidden", "nest/b"):
    os.makedirs(f"{d}/{sub}")
for value, name in ((30, "a/sub/deeper/x.png"), (20, "a/sub/deep.png"), (10, "a/top.png"), (40, "b/one.png"),
                    (99, "a/.hidden/h.png")):
    Image.new("L", (8, 8), value).save(f"{d}/nest/{name}")
open(f"{d}/nest/a/._top.png", "wb").write(b"\0\5\26\7 AppleDouble")
os.makedirs(f"{d}/latin1name/a")
open(f"{d}/latin1name/a".encode() + b"/caf\xe9.png", "wb").write(b"junk")
PY
$TOOL "$SCRATCH/odd/g16" --size 8 --fit stretch --channels 1 --out "$SCRATCH/odd/g16-pix.h5" --quiet || fail "16-bit PNG, pixels"
$TOOL "$SCRATCH/odd/g16" --store encoded --channels 1 --out "$SCRATCH/odd/g16-enc.h5" --quiet || fail "16-bit PNG, encoded"
$TOOL "$SCRATCH/odd/g16" --store encoded --max-side 20 --out "$SCRATCH/odd/g16-small.h5" --quiet ||
  fail "16-bit PNG, encoded with --max-side (re-encoded)"
$TOOL "$SCRATCH/odd/nest" --size 4 --channels 1 --out "$SCRATCH/odd/nest.h5" >"$SCRATCH/odd/nest.log" 2>&1 ||
  { cat "$SCRATCH/odd/nest.log"; fail "nested class folders"; }
grep -q "skipped 2 files and folders" "$SCRATCH/odd/nest.log" || { cat "$SCRATCH/odd/nest.log"; fail "hidden file and folder not counted"; }
"$PY" - "$SCRATCH/odd" <<'PY' || fail "16-bit PNG or nested folders converted wrongly"
import io, sys
import h5py, numpy as np
from PIL import Image
d = sys.argv[1]
with h5py.File(f"{d}/g16-pix.h5", "r") as f:
    x = f["images"][0, 0]
    assert x.min() == 64 and x.max() == 128 and (x[:, 0] == 64).all() and (x[:, -1] == 128).all(), x
with h5py.File(f"{d}/g16-enc.h5", "r") as f:  # dtrain decodes a 16-bit PNG to its high byte: kept as it is
    assert f["images"][0].tobytes() == open(f"{d}/g16/a/gray16.png", "rb").read(), "16-bit PNG re-encoded"
    assert f["image_shapes"][0].tolist() == [1, 40, 50], f["image_shapes"][0]
    want = (np.r_[np.full(1000, 64), np.full(1000, 128), np.full(64, 200)] / 255.0)
    assert abs(f.attrs["mean"][0] - want.mean()) < 1e-6, (f.attrs["mean"], want.mean())
with h5py.File(f"{d}/g16-small.h5", "r") as f:
    with Image.open(io.BytesIO(f["images"][0].tobytes())) as im:
        assert im.mode == "RGB" and im.size == (25, 20), (im.mode, im.size)
        lo, hi = im.convert("L").getextrema()
        assert lo == 64 and hi == 128, (lo, hi)
with h5py.File(f"{d}/nest.h5", "r") as f:
    assert f["labels"][()].tolist() == [0, 0, 0, 1], f["labels"][()]
    assert [int(f["images"][i, 0, 0, 0]) for i in range(4)] == [10, 20, 30, 40], "not ImageFolder's order"
print("16-bit PNG as its high byte; nested images in ImageFolder's order")
PY
convert_fails "latin1name/a/caf\\xe9.png: cannot decode image" "$SCRATCH/odd/o1" "$SCRATCH/odd/latin1name" --size 8 --out "$SCRATCH/odd/o1/t.h5"
! grep -q 'udce9' "$SCRATCH/err.txt" || { cat "$SCRATCH/err.txt"; fail "a non-UTF-8 file name shown as a surrogate"; }

echo "== a full disk (no_space.so: writes into the output folder fail with ENOSPC past 20000 bytes):"
echo "   one line naming the output, exit 1, no traceback or crash, nothing left"
for args in "--size 16x12" "--store encoded" "--size 16x12 --workers 2"; do
  mkdir -p "$SCRATCH/full"
  rc=0
  LD_PRELOAD=$BIN/no_space.so DTRAIN_TEST_NO_SPACE_MATCH=$SCRATCH/full/ DTRAIN_TEST_NO_SPACE_BYTES=20000 \
    $TOOL "$SCRATCH/tree" $args --out-dir "$SCRATCH/full/o" --val-fraction 0.25 --quiet >"$SCRATCH/err.txt" 2>&1 || rc=$?
  [[ $rc -eq 1 ]] || { cat "$SCRATCH/err.txt"; fail "a full disk ($args): exit $rc (want 1)"; }
  [[ $(cat "$SCRATCH/err.txt") == "images_to_h5.py: error: cannot write $SCRATCH/full/o/train.h5: No space left on device" ]] ||
    { cat "$SCRATCH/err.txt"; fail "a full disk ($args): not the one line expected"; }
  [[ -z $(ls -A "$SCRATCH/full") ]] || fail "a full disk ($args) left $(ls -AR "$SCRATCH/full")"
done

echo "== interrupted (SIGTERM) halfway: no output, no temporary"
"$PY" - "$SCRATCH/big" <<'PY'
import os, sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(2)
for c in range(2):
    os.makedirs(f"{sys.argv[1]}/c{c}", exist_ok=True)
    a = rng.integers(0, 255, size=(256, 256, 3), dtype=np.uint8)
    for i in range(300):
        Image.fromarray(np.roll(a, i, axis=1)).save(f"{sys.argv[1]}/c{c}/{i:03d}.png", compress_level=0)
PY
mkdir -p "$SCRATCH/o7"
# The conversion takes about a second here, a few hundred ms on a fast host: it is frozen
# (SIGSTOP) as soon as its temporary file appears, so that the signal lands halfway on any host,
# and the signal acts when it is let go (SIGCONT).
# halfway PID [SECS [group]]: SECS (default 0) after the temporary file appears, PID (with its
# process group) is frozen, still converting.
halfway() {
  local pid=$1 secs=${2:-0} group=${3:-}
  for _ in $(seq 200); do ls -A "$SCRATCH/o7" | grep -q tmp && break; sleep 0.02; done
  sleep "$secs"
  if [[ -n $group ]]; then kill -STOP -- -"$pid"; else kill -STOP "$pid"; fi
  ls -A "$SCRATCH/o7" | grep -q tmp && kill -0 "$pid" 2>/dev/null ||
    fail "no conversion in progress to interrupt (over before its temporary file was seen?)"
}
$TOOL "$SCRATCH/big" --size 128 --out "$SCRATCH/o7/big.h5" >"$SCRATCH/big.log" 2>&1 &
pid=$!
halfway $pid
kill -TERM $pid
kill -CONT $pid
rc=0
wait $pid || rc=$?
[[ $rc -eq 143 ]] || { cat "$SCRATCH/big.log"; fail "interrupted conversion exit $rc (want 143)"; }
[[ -z $(ls -A "$SCRATCH/o7") ]] || fail "an interrupted conversion left: $(ls -A "$SCRATCH/o7")"
# The same with 2 decoding processes: SIGTERM to the tool alone, to its whole process group (as
# Slurm and timeout send it), and SIGKILL to one worker (the out-of-memory killer): exit 143, 143
# and 1 ("a decoding process (--workers) died"), never a hang, no process and nothing left.
# ends_within SECONDS PID: PID exits within SECONDS.
ends_within() { timeout "$1" tail --pid="$2" -f /dev/null; }
for round in 1 2 3; do
  for how in tool group worker; do
    setsid $TOOL "$SCRATCH/big" --size 128 --workers 2 --out "$SCRATCH/o7/big.h5" >"$SCRATCH/big.log" 2>&1 &
    pid=$!
    halfway $pid "0.0$round" group  # a little further in each round, well inside the conversion
    case $how in
      tool) kill -TERM $pid; want=143 ;;
      group) kill -TERM -- -$pid; want=143 ;;
      worker) kill -KILL "$(pgrep -P $pid | head -n 1)"; want=1 ;;
    esac
    kill -CONT -- -$pid 2>/dev/null || true
    ends_within 60 $pid || { kill -KILL -- -$pid; fail "--workers 2, $how killed: the conversion hung"; }
    rc=0
    wait $pid || rc=$?
    [[ $rc -eq $want ]] || { cat "$SCRATCH/big.log"; fail "--workers 2, $how killed: exit $rc (want $want)"; }
    [[ $how != worker ]] || grep -q "a decoding process (--workers) died" "$SCRATCH/big.log" ||
      { cat "$SCRATCH/big.log"; fail "a killed worker not reported"; }
    ! grep -q Traceback "$SCRATCH/big.log" || { cat "$SCRATCH/big.log"; fail "--workers 2, $how killed: a traceback"; }
    [[ -z $(ls -A "$SCRATCH/o7") ]] || fail "--workers 2, $how killed: left $(ls -A "$SCRATCH/o7")"
    ! pgrep -f "images_to_h5.py $SCRATCH/big" >/dev/null || fail "--workers 2, $how killed: processes left"
  done
done
rm -rf "$SCRATCH/big"
echo "PASS"
