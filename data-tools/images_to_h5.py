#!/usr/bin/python3
"""Convert an image-folder tree (ROOT/<class>/*.jpg|jpeg|png) to dtrain dataset files.

    images_to_h5.py ROOT --size 32x32 --out data/mine/train.h5
    images_to_h5.py ROOT --size 64 --channels 1 --out-dir data/mine --val-fraction 0.1   (train.h5, test.h5)
    images_to_h5.py VAL_ROOT --size 64 --out data/mine/val.h5 --like data/mine/train.h5
    images_to_h5.py ROOT --store encoded --max-side 256 --out-dir data/mine --val-fraction 0.05
    images_to_h5.py VAL_DIR --labels FILE --store encoded --out data/mine/val.h5 --like data/mine/train.h5

The tree is the ImageNet / torchvision ImageFolder layout: every sub-folder of ROOT is a class, in
sorted order (label k = the k-th folder name, as ImageFolder numbers them), holding .jpg, .jpeg or
.png files (any case) at any depth: a class folder's sub-folders are walked as ImageFolder walks
them (folders sorted by path, files by name). Hidden files and folders and other files are skipped
and counted. Every image is decoded with Pillow (a 16-bit grayscale PNG reduced to its high byte, as
dtrain's decoder does), converted to RGB (--channels 3) or grayscale (--channels 1) as ImageFolder's
loader does, and resized to --size HxW: --fit crop (default) scales the shorter side to fit and
crops the centre, keeping the aspect ratio; --fit stretch resizes to HxW directly. Bilinear
resampling.

Output (docs/data.md): `images` uint8 N×C×H×W chunked along N, `labels` int64 N, class by class;
attributes `num_classes`, `class_names` (the folder names) and per-channel `mean`/`std` of pixel/255
(exact, from per-channel histograms of the training images; with --val-fraction the test file gets
the training set's values). --like FILE takes class names, labels and mean/std from an existing
training file instead (for a separate validation tree; it may lack some classes).

--store encoded keeps each image's JPEG/PNG bytes instead (re-encoded only when its shorter side
exceeds --max-side or its mode is not L/RGB, a 16-bit grayscale PNG counting as L, which dtrain
decodes to its high byte; a multi-picture JPEG (MPO) is a JPEG): `images` variable-length uint8 N,
`image_shapes` N×3 (C, H, W as stored), attribute `channels`, labels and attributes as above,
mean/std of the decoded images; dtrain decodes, crops and resizes them while it trains
(docs/data.md, "Encoded images"). The stored bytes are checked as dtrain's decoder checks them
(stored_bytes_problem: PNG chunk CRCs and IEND, a JPEG's end marker), and no side may exceed 2^20
pixels (the schema's limit).

Memory stays flat: the images are read, resized and written one chunk of samples at a time into
datasets created at their final size; nothing grows with the number of images except the list of
file names. Each output is written to a hidden temporary file in its directory, checked against
the schema and renamed only when every output is complete; on any error or interruption the
temporaries are removed, so no partial output is ever left behind. An existing output is never
replaced without --force. --workers N decodes in N processes; one that dies (killed, out of
memory) ends the conversion with an error, the same way.

--labels FILE reads a flat folder instead (ImageNet's validation images come that way): FILE has a
line per image, `NAME,CLASS ...` or `NAME CLASS ...`, where NAME is the file's name in ROOT with or
without its extension and CLASS the first word after it (a class folder name of the training tree,
e.g. n01440764). Kaggle's LOC_val_solution.csv is such a file: its first line, which names no image,
is taken as a header and skipped; blank lines and lines starting with # are skipped too. Every image
of ROOT needs exactly one line and every line must name an image of ROOT (its sub-folders are
skipped and counted); classes are numbered in sorted order as folders are (or by --like's class
names).

A corrupt or unreadable image, an empty class folder, a class folder whose name is not UTF-8 or a
tree without class folders is an error naming the file or folder; an output that cannot be written
(a full disk) one naming the output (`cannot write OUT: No space left on device`). Exit status: 0
done, 1 bad input or refusal (message on stderr), 2 bad usage. Run with Debian's interpreter:
/usr/bin/python3 images_to_h5.py ...
"""

import argparse
import io
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
import os
import struct
import sys
import time
import zlib

import h5py
import numpy as np

try:
    from PIL import Image
except ImportError:  # pragma: no cover - depends on the machine
    sys.exit("images_to_h5.py: error: Pillow is missing (Debian: apt-get install python3-pil)")

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h5info  # noqa: E402  (schema validation shared with h5info.py)
import outputs  # noqa: E402  (the output checks every writing tool shares)
from h5files import open_h5  # noqa: E402  (file locks where the file system has them)

EXTENSIONS = (".jpg", ".jpeg", ".png")
CHUNK_SAMPLES = 256          # samples per chunk (at most), as convert_idx.py
CHUNK_BYTES = 8 << 20        # ... and at most this many bytes per chunk for large images
ENCODED_CHUNK = 1024         # --store encoded: rows per chunk of `images` (references) and `image_shapes`
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class ConvertError(Exception):
    """Bad input or an output that may not be written; the message is shown to the user."""


def parse_size(text):
    """'32' or '32x48' (H×W) → (H, W)."""
    parts = text.lower().split("x")
    try:
        if len(parts) == 1:
            h = w = int(parts[0])
        elif len(parts) == 2:
            h, w = int(parts[0]), int(parts[1])
        else:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"--size {text!r}: expected HxW or N, e.g. 32x32") from None
    if not (1 <= h <= 65536 and 1 <= w <= 65536):
        raise argparse.ArgumentTypeError(f"--size {text!r}: sizes must be in [1, 65536]")
    return h, w


def scan_tree(root):
    """Returns (class names, [[file, ...] per class], skipped file count). Raises ConvertError."""
    if not os.path.isdir(root):
        raise ConvertError(f"{root}: not a directory")
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise ConvertError(f"{root}: no class folders (expected ROOT/<class>/*.jpg|jpeg|png)")
    for name in classes:  # the names become `class_names`, UTF-8 strings (os.scandir decoded
        try:              # undecodable bytes to surrogates, which cannot be encoded)
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise ConvertError(f"{root}: class folder {os.fsencode(name)!r}: name is not valid UTF-8 "
                               f"(class names must be UTF-8: rename the folder)") from None
    files, skipped = [], 0
    for name in classes:
        folder = os.path.join(root, name)
        found, others = _image_names(folder, recursive=True)
        skipped += others
        if not found:
            raise ConvertError(f"{shown(folder)}: empty class folder (no .jpg, .jpeg or .png files)")
        files.append([os.path.join(folder, f) for f in found])
    return classes, files, skipped


def shown(path):
    """A path for a message: bytes of its name that are not UTF-8 written as \\xNN (os.scandir
    gives them as surrogates, which print as \\udcNN), as h5info.py shows class names."""
    return h5info.shown_name(path)


def decode_error(e, path):
    """Pillow's message of exception e about the file `path`, with the path shown as shown() shows
    it (Pillow writes it with repr(), where bytes that are not UTF-8 read as \\udcNN). A file
    Pillow cannot identify reads the same whether it was opened by path or from its bytes (then
    Pillow names the in-memory file object instead), and an empty one says so."""
    if isinstance(e, Image.UnidentifiedImageError):
        empty = os.path.isfile(path) and os.path.getsize(path) == 0
        return (f"cannot identify image file '{shown(path)}'"
                f"{' (an empty file)' if empty else ' (expected a JPEG or PNG image)'}")
    return shown(str(e).replace(repr(path), f"'{shown(path)}'"))


def _image_names(root, recursive=False):
    """The image files in folder `root`, as paths relative to it, and the count of what was
    skipped: hidden files and folders, other files and (not `recursive`) sub-folders. `recursive`
    walks the sub-folders too, as torchvision's ImageFolder does (symbolic links followed, each
    folder once), in its order: folders sorted by path, files by name in each. Raises
    ConvertError, also for a sub-folder that cannot be read."""
    if not os.path.isdir(root):
        raise ConvertError(f"{shown(root)}: not a directory")

    def unreadable(e):
        raise ConvertError(f"{shown(e.filename or root)}: cannot read the folder: {e.strerror or e}")
    folders, skipped, seen = [], 0, set()
    for top, dirs, names in os.walk(root, onerror=unreadable, followlinks=True):
        st = os.stat(top)
        if (st.st_dev, st.st_ino) in seen:  # a link back up the tree: walked once
            dirs[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        hidden = [d for d in dirs if d.startswith(".")]
        skipped += len(dirs) if not recursive else len(hidden)
        dirs[:] = [d for d in dirs if not d.startswith(".")] if recursive else []
        rel = os.path.relpath(top, root)
        images = []
        for name in names:
            if not name.startswith(".") and name.lower().endswith(EXTENSIONS) \
                    and os.path.isfile(os.path.join(top, name)):
                images.append(name if rel == "." else os.path.join(rel, name))
            else:
                skipped += 1
        folders.append((top, sorted(images)))
    return [name for _, images in sorted(folders) for name in images], skipped


def _parse_label_line(line):
    """(name, class) of one --labels line, `NAME,CLASS ...` or `NAME CLASS ...`; class None when
    the line has no class."""
    if "," in line:
        name, rest = line.split(",", 1)
    else:
        name, rest = (line.split(None, 1) + [""])[:2]
    fields = rest.split()
    return name.strip(), (fields[0] if fields else None)


def scan_labelled(root, labels_path):
    """--labels: a flat folder of images and a file giving each one's class. Returns (class names,
    [[file, ...] per class], skipped file count), as scan_tree. Raises ConvertError naming the
    file and line."""
    images, skipped = _image_names(root)
    if not images:
        raise ConvertError(f"{shown(root)}: no .jpg, .jpeg or .png files (expected with --labels: a folder of images)")
    names = set(images)
    stems = {}
    for n in images:
        stems.setdefault(os.path.splitext(n)[0], []).append(n)
    try:
        with open(labels_path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConvertError(f"--labels {labels_path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    label_of, first = {}, True
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, cls = _parse_label_line(line)
        image = name if name in names else None
        if image is None and len(stems.get(name, ())) > 1:
            raise ConvertError(f"{labels_path}:{number}: {name!r} is ambiguous in {root}: "
                               f"{', '.join(stems[name])}")
        if image is None and len(stems.get(name, ())) == 1:
            image = stems[name][0]
        if image is None and first:  # a header line (e.g. Kaggle's "ImageId,PredictionString")
            first = False
            continue
        first = False
        if image is None:
            raise ConvertError(f"{labels_path}:{number}: no image {name!r} in {root}")
        if cls is None:
            raise ConvertError(f"{labels_path}:{number}: no class after {name!r} "
                               f"(expected NAME,CLASS or NAME CLASS)")
        if image in label_of:
            raise ConvertError(f"{labels_path}:{number}: {image} is labelled twice")
        label_of[image] = cls
    unlabelled = [n for n in images if n not in label_of]
    if unlabelled:
        raise ConvertError(f"{os.path.join(root, unlabelled[0])}: no label in {labels_path} "
                           f"({len(unlabelled)} of {len(images)} images have none)")
    classes = sorted(set(label_of.values()))
    members = {c: [] for c in classes}
    for n in images:
        members[label_of[n]].append(os.path.join(root, n))
    return classes, [members[c] for c in classes], skipped


def high_byte(im):
    """A 16-bit grayscale image (Pillow mode I;16*, or I as some Pillows read such PNGs) reduced to
    8 bits by its high byte, as dtrain's decoder reduces 16-bit PNGs (docs/data.md), in mode L;
    other images as they are. (Pillow's convert("L") of these modes clips at 255: all white.)"""
    if not (im.mode == "I" or im.mode.startswith("I;16")):
        return im
    values = np.asarray(im).astype(np.int64)
    return Image.fromarray((np.clip(values, 0, 65535) >> 8).astype(np.uint8), "L")


def load_image(path, size, channels, fit):
    """Decodes one image and returns it as uint8 C×H×W. Raises ConvertError naming the file."""
    h, w = size
    try:
        with Image.open(path) as im:
            im.load()  # decode fully: truncated or corrupt data fails here
            im = high_byte(im).convert("RGB" if channels == 3 else "L")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise ConvertError(f"{shown(path)}: cannot decode image: {decode_error(e, path)}") from None
    if fit == "stretch":
        im = im.resize((w, h), Image.BILINEAR)
    else:  # scale the shorter side to fit, then crop the centre
        scale = max(w / im.width, h / im.height)
        sw, sh = max(w, round(im.width * scale)), max(h, round(im.height * scale))
        im = im.resize((sw, sh), Image.BILINEAR)
        left, top = (sw - w) // 2, (sh - h) // 2
        im = im.crop((left, top, left + w, top + h))
    a = np.asarray(im, dtype=np.uint8)
    return a[None] if channels == 1 else a.transpose(2, 0, 1)


def _load_job(job):
    return load_image(*job)


def load_encoded(path, channels, max_side, quality):
    """--store encoded: (bytes as uint8 array, (C, H, W) as stored, C×256 histogram of the pixels
    the stored bytes decode to, converted to `channels`). The file's own bytes are kept when it is
    a JPEG (an MPO, a JPEG with more pictures after the first, counts as one: Pillow and dtrain
    decode its first) or PNG in mode L or RGB whose shorter side is at most max_side (0: no limit);
    otherwise the image is converted to `channels`, its shorter side scaled down to max_side
    (bilinear) and re-encoded in its own format (JPEG at `quality`; anything else as PNG). Raises
    ConvertError naming the file when Pillow cannot decode it, dtrain would not
    (stored_bytes_problem) or a side stored would exceed the schema's 2^20 pixels
    (h5info.MAX_ENCODED_SIDE)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        with Image.open(io.BytesIO(raw)) as im:
            fmt = "JPEG" if im.format == "MPO" else im.format
            scale = max_side / min(im.size) if max_side and min(im.size) > max_side else 1.0
            size = (max(1, round(im.width * scale)), max(1, round(im.height * scale)))
            if max(size) > h5info.MAX_ENCODED_SIDE:  # from the header, before decoding
                raise ConvertError(f"{shown(path)}: image of {size[0]}×{size[1]} pixels"
                                   f"{' (after --max-side)' if scale < 1.0 else ''}: a side is longer "
                                   f"than {h5info.MAX_ENCODED_SIDE}, the limit of encoded images")
            im.load()  # decode fully: truncated or corrupt data fails here
            im = high_byte(im)  # a 16-bit PNG's own bytes decode (in dtrain) to these 8 bits
            if scale == 1.0 and fmt in ("JPEG", "PNG") and im.mode in ("L", "RGB"):
                stored = im
            else:
                stored = im.convert("RGB" if channels == 3 else "L")
                if scale < 1.0:
                    stored = stored.resize(size, Image.BILINEAR)
                out = io.BytesIO()
                if fmt == "JPEG":
                    stored.save(out, format="JPEG", quality=quality)
                else:
                    stored.save(out, format="PNG")
                raw = out.getvalue()
                # mean/std count what is stored: the re-encoded bytes decoded (JPEG is lossy)
                with Image.open(io.BytesIO(raw)) as again:
                    stored = again.convert(stored.mode)
            pixels = np.asarray(stored.convert("RGB" if channels == 3 else "L"), dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise ConvertError(f"{shown(path)}: cannot decode image: {decode_error(e, path)}") from None
    problem = stored_bytes_problem(raw)
    if problem:
        raise ConvertError(f"{shown(path)}: corrupt or truncated image, which dtrain would skip as bad: {problem}")
    pixels = pixels.reshape(pixels.shape[0], pixels.shape[1], -1)
    hist = np.stack([np.bincount(pixels[:, :, c].reshape(-1), minlength=256) for c in range(channels)])
    shape = (1 if stored.mode == "L" else 3, stored.height, stored.width)
    return np.frombuffer(raw, dtype=np.uint8), shape, hist


def _png_problem(raw):
    """What libpng, as dtrain calls it, rejects in PNG bytes `raw`, or None: a chunk cut short, a
    chunk whose CRC is wrong (zlib.crc32 of type and data; libpng only warns for ancillary chunks,
    rejected here too as corrupt) or no IEND chunk (png_read_end). Bytes after IEND are ignored."""
    view, at = memoryview(raw), len(PNG_SIGNATURE)
    while at + 12 <= len(raw):
        length, kind = struct.unpack_from(">I4s", raw, at)
        end = at + 12 + length
        name = kind.decode("latin-1")
        if end > len(raw):
            return f"PNG chunk {name} at byte {at} runs past the end of the file (truncated)"
        if zlib.crc32(view[at + 4:end - 4]) != struct.unpack_from(">I", raw, end - 4)[0]:
            return f"PNG chunk {name} at byte {at} has a wrong CRC (corrupt)"
        if kind == b"IEND":
            return None
        at = end
    return "PNG without an IEND chunk (truncated)"


def _jpeg_problem(raw):
    """What dtrain rejects in JPEG bytes `raw` that Pillow may accept, or None: no end-of-image
    marker (FF D9) after the start of the first scan's data (src/io/jpeg_region.cpp has_eoi_after,
    from where jpeg_read_header stops, just past the SOS segment; entropy-coded data never holds
    FF D9, so a file without one is truncated). dtrain checks this for single-scan JPEGs; for
    progressive ones libjpeg's end-of-data warning, an error in dtrain, requires the same. The
    markers up to SOS are walked as libjpeg's next_marker does (bytes before an FF and FF fill bytes
    skipped): an FF D9 in an earlier segment, such as an EXIF thumbnail's, does not count."""
    at = 2  # past SOI (FF D8)
    while True:
        at = raw.find(b"\xff", at)
        while 0 <= at < len(raw) and raw[at] == 0xFF:
            at += 1
        if at < 0 or at + 3 > len(raw):
            return "JPEG without image data (no SOS marker: truncated)"
        marker, length = raw[at], int.from_bytes(raw[at + 1:at + 3], "big")
        if marker == 0xDA:  # SOS: its segment is the scan header, the scan data follows
            break
        at += 1 if marker in (0x00, 0x01) or 0xD0 <= marker <= 0xD9 else 1 + length
    if raw.find(b"\xff\xd9", at + 1 + length) < 0:
        return "JPEG without its end-of-image marker (FF D9) after the scan data (truncated)"
    return None


def stored_bytes_problem(raw):
    """What dtrain's decoder (src/io/image.cpp, src/io/jpeg_region.cpp) rejects in the bytes
    `raw` to be stored, although Pillow decoded them, or None."""
    if raw[:len(PNG_SIGNATURE)] == PNG_SIGNATURE:
        return _png_problem(raw)
    if raw[:3] == b"\xff\xd8\xff":
        return _jpeg_problem(raw)
    return "not a JPEG or PNG file (unknown signature)"


def _load_encoded_job(job):
    return load_encoded(*job)


class SplitWriter:
    """One output file, written chunk by chunk into datasets created at their final size."""

    failed = False  # a write or close of the file failed: it is never touched again

    def __init__(self, out, n, size, channels, chunk):
        self.out = out
        self.tmp = outputs.temp_name(out)
        self.n, self.at = n, 0
        self.hist = np.zeros((channels, 256), np.int64)  # exact per-channel pixel histograms
        self.file = open_h5(self.tmp, "w")
        shape = (n, channels) + tuple(size)
        self.images = self.file.create_dataset("images", shape=shape, dtype=np.uint8,
                                               chunks=(min(chunk, n), channels) + tuple(size))
        self.labels = self.file.create_dataset("labels", shape=(n,), dtype=np.int64)

    def write(self, block, labels):
        """Writes images block (k×C×H×W uint8) and their labels at the current position."""
        k = block.shape[0]
        try:
            self.images[self.at:self.at + k] = block
            self.labels[self.at:self.at + k] = labels
        except (OSError, RuntimeError) as e:  # h5py's write failures (a full disk)
            raise self.write_failed(e) from None
        for c in range(block.shape[1]):
            self.hist[c] += np.bincount(block[:, c].reshape(-1), minlength=256)
        self.at += k

    def mean_std(self):
        """Per-channel mean and population std of pixel/255 (exact)."""
        v = np.arange(256, dtype=np.float64) / 255.0
        count = self.hist.sum(axis=1).astype(np.float64)
        mean = (self.hist * v).sum(axis=1) / count
        var = (self.hist * v * v).sum(axis=1) / count - mean * mean
        return mean.astype(np.float32), np.sqrt(np.maximum(var, 0.0)).astype(np.float32)

    def write_failed(self, e):
        """The ConvertError for an HDF5 write or close that raised e (`cannot write OUT: No space
        left on device`); the file is not closed again (outputs.hdf5_write_failed)."""
        self.failed = True
        objects = [self.file, self.images, self.labels, getattr(self, "shapes", None)]
        return ConvertError(outputs.hdf5_write_failed(self.out, e, objects))

    def finish(self, mean, std, class_names):
        assert self.at == self.n, (self.at, self.n)
        try:
            self.file.attrs["mean"] = mean
            self.file.attrs["std"] = std
            self.file.attrs["num_classes"] = np.int64(len(class_names))
            self.file.attrs["class_names"] = list(class_names)  # variable-length UTF-8 strings
            self.file.close()
        except (OSError, RuntimeError) as e:  # h5py's write and close failures (a full disk)
            raise self.write_failed(e) from None
        try:
            with open(self.tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        except OSError as e:
            raise ConvertError(f"cannot write {self.out}: {e.strerror or e}") from None
        try:
            h5info.validate(self.tmp, scan_pixels=False)
        except h5info.SchemaError as e:
            raise ConvertError(f"{self.out}: written file fails the schema check: {e}") from None

    def discard(self):
        if not self.failed:
            try:
                self.file.close()
            except (OSError, RuntimeError) as e:  # failed too (the same full disk): left alone
                self.write_failed(e)
            except Exception:  # noqa: BLE001 - best effort on the error path
                pass
        outputs.remove_if_exists(self.tmp)


class EncodedWriter(SplitWriter):
    """--store encoded: `images` variable-length uint8 (one encoded image per row), `image_shapes`
    N×3 int32 (C, H, W as stored), `labels`; root attribute `channels`. Chunked along N."""

    def __init__(self, out, n, channels, chunk):  # noqa: D401 - same life cycle as SplitWriter
        self.out = out
        self.tmp = outputs.temp_name(out)
        self.n, self.at = n, 0
        self.hist = np.zeros((channels, 256), np.int64)
        self.file = open_h5(self.tmp, "w")
        self.images = self.file.create_dataset("images", shape=(n,), dtype=h5py.vlen_dtype(np.uint8),
                                               chunks=(min(chunk, n),))
        self.shapes = self.file.create_dataset("image_shapes", shape=(n, 3), dtype=np.int32,
                                               chunks=(min(chunk, n), 3))
        self.labels = self.file.create_dataset("labels", shape=(n,), dtype=np.int64)
        self.file.attrs["channels"] = np.int64(channels)
        self.file.attrs["store"] = "encoded"

    def write_encoded(self, results, labels):
        """results: [(bytes uint8 array, (C, H, W), histogram)] of load_encoded, in order."""
        k = len(results)
        rows = np.empty(k, dtype=self.images.dtype)
        for i, (data, _, _) in enumerate(results):
            rows[i] = data
        # write_direct, not `images[a:b] = rows`: h5py stacks rows of equal length into a 2-D
        # array and then fails ("Can't broadcast (k, L) -> (k,)").
        try:
            self.images.write_direct(rows, dest_sel=np.s_[self.at:self.at + k])
            self.shapes[self.at:self.at + k] = np.array([shape for _, shape, _ in results], np.int32)
            self.labels[self.at:self.at + k] = labels
        except (OSError, RuntimeError) as e:  # h5py's write failures (a full disk)
            raise self.write_failed(e) from None
        for _, _, hist in results:
            self.hist += hist
        self.at += k


def _call_each(fn, jobs):
    """[fn(job) for job in jobs]: one task of DecodePool.map, run in a worker."""
    return [fn(job) for job in jobs]


class DecodePool:
    """--workers N decoding processes (concurrent.futures.ProcessPoolExecutor, which notices a
    worker's death where multiprocessing.Pool waits for it forever), started when it is made.
    Workers leave SIGINT to this process. On failure close() kills them: a worker stopped halfway
    through sending a result can leave the pool's result thread waiting for the rest forever, so
    a process whose pool was stopped ends with os._exit once its temporaries are gone (main();
    `abandoned`)."""

    abandoned = False

    def __init__(self, workers):
        self.workers = workers
        self.executor = ProcessPoolExecutor(workers, initializer=outputs.ignore_sigint_in_worker)
        # Start the workers now, before any output is open: a worker forked later would hold the
        # HDF5 file's descriptor (and its lock) as long as it lives.
        self.executor.submit(int).result()
        self.processes = list((getattr(self.executor, "_processes", None) or {}).values())

    def map(self, fn, jobs):
        """[fn(job) for job in jobs], in order, over the workers in runs of jobs. Raises what fn
        raised, or ConvertError when a worker died (killed, out of memory). (Not Executor.map:
        its iterator cancels the futures it leaves, and Python 3.11's pool thread then raises
        InvalidStateError when it finds a killed worker.)"""
        size = max(1, len(jobs) // (4 * self.workers))
        try:
            futures = [self.executor.submit(_call_each, fn, jobs[i:i + size])
                       for i in range(0, len(jobs), size)]
            return [result for f in futures for result in self._result(f)]
        except BrokenProcessPool:
            raise self._died() from None

    def _result(self, future):
        """future.result(), checking every second that no worker died: a worker killed while
        it sent a result leaves the pool's thread reading the rest of it, the future unfinished."""
        while True:
            try:
                return future.result(timeout=1.0)
            except TimeoutError:
                if any(p.exitcode is not None for p in self.processes):
                    raise self._died() from None

    @staticmethod
    def _died():
        return ConvertError("a decoding process (--workers) died: killed, or out of memory")

    def close(self, complete):
        """complete: waits for the workers to end; else kills them and marks the pool abandoned."""
        if complete:
            self.executor.shutdown(wait=True)
            return
        self.executor.shutdown(wait=False)
        for p in self.processes:
            p.kill()
        DecodePool.abandoned = True


def read_like(path):
    """class_names, mean, std of an existing schema file (--like)."""
    try:
        summary = h5info.validate(path, scan_pixels=False)
    except (h5info.SchemaError, OSError) as e:
        raise ConvertError(f"--like {path}: {e}") from None
    if summary["class_names"] is None or summary["mean"] is None:
        raise ConvertError(f"--like {path}: has no `class_names` or no `mean`/`std` to copy")
    for k, name in enumerate(summary["class_names"]):
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:  # h5info's surrogate escapes of bytes that are not UTF-8
            raise ConvertError(f"--like {path}: attribute `class_names`: name {k} "
                               f"'{h5info.shown_name(name)}' is not valid UTF-8 (class names must "
                               "be UTF-8)") from None
    return summary["class_names"], summary["mean"].astype(np.float32), summary["std"].astype(np.float32)


def split_items(files, labels, val_fraction, seed):
    """[(path, label)] for train and test: per class, round(f·n) images (at most n − 1) drawn for test."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for paths, label in zip(files, labels):
        n_test = min(int(round(val_fraction * len(paths))), len(paths) - 1) if val_fraction > 0 else 0
        chosen = set(rng.permutation(len(paths))[:n_test].tolist())
        for i, p in enumerate(paths):
            (test if i in chosen else train).append((p, label))
    return train, test


def convert(args):
    size, channels = args.size, args.channels
    if args.labels:
        classes, files, skipped = scan_labelled(args.root, args.labels)
    else:
        classes, files, skipped = scan_tree(args.root)
    if args.like:
        class_names, like_mean, like_std = read_like(args.like)
        index = {name: k for k, name in enumerate(class_names)}
        unknown = [c for c in classes if c not in index]
        if unknown:
            where = (f"{args.labels}: class {unknown[0]!r}" if args.labels
                     else f"{os.path.join(args.root, unknown[0])}: class folder")
            raise ConvertError(f"{where} not among the {len(class_names)} class names of {args.like}")
        labels = [index[c] for c in classes]
        if like_mean.size != channels:
            raise ConvertError(f"--like {args.like}: mean/std of {like_mean.size} channels, "
                               f"but --channels {channels}")
    else:
        class_names, labels = classes, list(range(len(classes)))
    train, test = split_items(files, labels, args.val_fraction, args.seed)
    if args.val_fraction > 0 and not test:
        raise ConvertError(f"{args.root}: --val-fraction {args.val_fraction} selects no test image "
                           f"(each class keeps at least one training image)")
    if args.out_dir:
        outs = [(os.path.join(args.out_dir, "train.h5"), train)]
        if test:
            outs.append((os.path.join(args.out_dir, "test.h5"), test))
    else:
        outs = [(args.out, train)]
    for out, _ in outs:
        outputs.check_output(out, args.force, ConvertError)
    created = []  # folders this run creates, deepest last: removed again if it fails
    for out, _ in outs:
        d = os.path.dirname(os.path.abspath(out))
        missing = []
        while not os.path.exists(d):
            missing.append(d)
            d = os.path.dirname(d)
        created += [m for m in reversed(missing) if m not in created]
        try:
            os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        except OSError as e:
            raise ConvertError(f"cannot write {out}: {e.strerror or e}") from None

    encoded = args.store == "encoded"
    sample_bytes = channels * size[0] * size[1] if not encoded else 1
    chunk = max(1, min(CHUNK_SAMPLES, CHUNK_BYTES // sample_bytes)) if not encoded else ENCODED_CHUNK
    pool = DecodePool(args.workers) if args.workers > 1 else None
    writers = []
    complete = False
    total = sum(len(items) for _, items in outs)
    done, t0, last = 0, time.time(), time.time()
    try:
        for out, items in outs:
            wr = EncodedWriter(out, len(items), channels, chunk) if encoded else \
                SplitWriter(out, len(items), size, channels, chunk)
            writers.append(wr)
            block = None if encoded else np.empty((chunk, channels) + tuple(size), np.uint8)
            for start in range(0, len(items), chunk):  # one chunk of samples in memory at a time
                part = items[start:start + chunk]
                if encoded:
                    jobs = [(p, channels, args.max_side, args.quality) for p, _ in part]
                    fn = _load_encoded_job
                else:
                    jobs = [(p, size, channels, args.fit) for p, _ in part]
                    fn = _load_job
                arrays = pool.map(fn, jobs) if pool else list(map(fn, jobs))
                labels_part = np.array([lab for _, lab in part], np.int64)
                if encoded:
                    wr.write_encoded(arrays, labels_part)
                else:
                    for i, a in enumerate(arrays):
                        block[i] = a
                    wr.write(block[:len(part)], labels_part)
                done += len(part)
                if not args.quiet and time.time() - last > 10:
                    last = time.time()
                    print(f"images_to_h5.py: {done}/{total} images, {done / (last - t0):.0f}/s",
                          file=sys.stderr)
        mean, std = (like_mean, like_std) if args.like else writers[0].mean_std()
        for wr in writers:
            wr.finish(mean, std, class_names)
        for wr in writers:  # only now, with every output complete
            outputs.check_output(wr.out, args.force, ConvertError)
        for wr in writers:
            try:
                os.replace(wr.tmp, wr.out)
            except OSError as e:
                raise ConvertError(f"cannot write {wr.out}: {e.strerror or e}") from None
        complete = True
    finally:
        if pool is not None:
            pool.close(complete)
        for wr in writers:
            wr.discard()
        for out, _ in outs if not complete else []:  # a writer stopped while being made
            outputs.remove_if_exists(outputs.temp_name(out))
        for d in reversed(created) if not complete else []:  # a failed run leaves no new folder
            try:
                os.rmdir(d)
            except OSError:
                pass
    if not args.quiet:
        for wr in writers:
            what = (f"encoded images (JPEG/PNG bytes, {os.path.getsize(wr.out) / max(wr.n, 1) / 1024:.1f} KiB "
                    f"an image on disk), {channels} channels") if encoded else f"{channels}×{size[0]}×{size[1]} uint8"
            print(f"images_to_h5.py: wrote {wr.out}: {wr.n} samples {what}, {len(class_names)} classes, mean {[round(float(x), 4) for x in mean]} "
                  f"std {[round(float(x), 4) for x in std]}")
        if skipped:
            print(f"images_to_h5.py: skipped {skipped} files and folders: hidden, not .jpg/.jpeg/.png"
                  f"{' or (--labels) sub-folders' if args.labels else ''}", file=sys.stderr)
        rate = total / max(time.time() - t0, 1e-9)
        print(f"images_to_h5.py: {total} images in {time.time() - t0:.1f} s ({rate:.0f}/s)", file=sys.stderr)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("root", metavar="ROOT", help="tree of class folders: ROOT/<class>/*.jpg|jpeg|png "
                        "(with --labels: a folder of images)")
    parser.add_argument("--store", choices=("pixels", "encoded"), default="pixels",
                        help="pixels: decoded, resized uint8 N×C×H×W (default); encoded: each image's "
                        "JPEG/PNG bytes (variable-length uint8), decoded by dtrain while it trains")
    parser.add_argument("--size", type=parse_size, metavar="HxW",
                        help="output image size, HxW or N for NxN (e.g. 32x32); required with --store pixels")
    parser.add_argument("--max-side", type=int, default=0, metavar="S",
                        help="--store encoded: re-encode images whose shorter side exceeds S with the "
                        "shorter side S (0: keep every image's size; default)")
    parser.add_argument("--quality", type=int, default=90,
                        help="--store encoded: JPEG quality of re-encoded JPEGs (default 90)")
    parser.add_argument("--channels", type=int, choices=(1, 3), default=3,
                        help="3: RGB (default), 1: grayscale")
    parser.add_argument("--fit", choices=("crop", "stretch"), default="crop",
                        help="crop: keep the aspect ratio, crop the centre (default); stretch: resize to HxW")
    out = parser.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", metavar="H5", help="one output file (all images)")
    out.add_argument("--out-dir", metavar="DIR", help="writes DIR/train.h5 (and DIR/test.h5 with --val-fraction)")
    parser.add_argument("--val-fraction", type=float, default=0.0, metavar="F",
                        help="with --out-dir: put this fraction of each class into test.h5 (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the --val-fraction split (default 0)")
    parser.add_argument("--like", metavar="H5", help="take class names, labels and mean/std from this "
                        "training file (for a separate validation tree)")
    parser.add_argument("--labels", metavar="FILE", help="ROOT is one folder of images and FILE gives "
                        "each one's class, a line `NAME,CLASS` or `NAME CLASS` (ImageNet's validation set)")
    parser.add_argument("--workers", type=int, default=1, help="decoding processes (default 1)")
    parser.add_argument("--force", action="store_true", help="replace existing outputs")
    parser.add_argument("--quiet", action="store_true", help="no progress or summary lines")
    args = parser.parse_args(argv)
    if not 0.0 <= args.val_fraction < 1.0:
        parser.error("--val-fraction must be in [0, 1)")
    if args.val_fraction > 0 and not args.out_dir:
        parser.error("--val-fraction needs --out-dir (it writes train.h5 and test.h5)")
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    if args.store == "pixels" and args.size is None:
        parser.error("--size is required with --store pixels")
    if args.store == "encoded" and (args.size is not None or args.fit != "crop"):
        parser.error("--size / --fit resize decoded pixels; with --store encoded use --max-side "
                     "(dtrain crops and resizes while it trains)")
    if args.max_side < 0 or (args.max_side and args.store != "encoded"):
        parser.error("--max-side must be >= 0 and needs --store encoded")
    if not 1 <= args.quality <= 100:
        parser.error("--quality must be in [1, 100]")

    def body():
        convert(args)
        return 0
    try:
        code = outputs.run_tool("images_to_h5.py", body, ConvertError)
    except SystemExit as e:  # a signal's 128 + N, after the temporaries were removed
        if not DecodePool.abandoned:
            raise
        code = e.code
    if DecodePool.abandoned:  # its result thread may wait forever for a killed worker's result
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
