#!/usr/bin/python3
"""Summarize and validate dtrain dataset files (the HDF5 schema of docs/data.md).

For each FILE prints: number of samples N, sample shape C×H×W, image and label dtypes, num_classes
(attribute or max(label)+1), the class histogram (with class names when present), the mean/std
attributes, and pixel min/max/mean (raw units). Then checks the schema with the same rules as
dtrain's reader (src/io/dataset.cpp): `images` uint8 or float32 (either byte order) of rank 4 with
C, H, W >= 1 (or encoded JPEG/PNG images: variable-length uint8 of rank 1 with attribute `channels`
and dataset `image_shapes`), `labels` integer of rank 1 with the same N > 0 (`images` and `labels`
datasets, not links that lead nowhere), labels in [0, num_classes) (without a `num_classes`
attribute, at most half of the max(label)+1 classes may be empty), mean/std both or neither with 1
or C finite values and std > 0, class_names strings, one per class, float pixels finite.

Exit status: 0 when every file is valid, 1 when any is not (one "FILE: error: ..." line on stderr
per invalid file), 2 on bad usage. Run with Debian's interpreter: /usr/bin/python3 h5info.py FILE...
"""

import argparse
import os
import sys

import h5py
import numpy as np

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h5files import open_h5  # noqa: E402  (file locks where the file system has them)

ROWS_PER_READ = 4096  # samples per read when scanning pixels (bounded memory)
MAX_ENCODED_SIDE = 1 << 20  # longest side of an encoded image (`image_shapes`), as dtrain checks


class SchemaError(Exception):
    """A file that does not follow the dataset schema."""


def _attr_floats(f, name, channels):
    if name not in f.attrs:
        return None
    raw = np.asarray(f.attrs[name])
    if raw.dtype.kind not in "iuf":
        raise SchemaError(f"attribute `{name}` has dtype {raw.dtype}, expected float")
    v = raw.astype(np.float64).reshape(-1)
    if v.size not in (1, channels):
        raise SchemaError(f"attribute `{name}` has {v.size} values, expected 1 or C = {channels}")
    if not np.all(np.isfinite(v)):
        raise SchemaError(f"attribute `{name}` has a non-finite value")
    return np.broadcast_to(v, (channels,)).copy()


def mean_std(f, channels):
    """The attributes `mean` and `std` of open file f, each as `channels` float64 values, or
    (None, None) without them. Raises SchemaError when they do not follow the schema."""
    mean, std = _attr_floats(f, "mean", channels), _attr_floats(f, "std", channels)
    if (mean is None) != (std is None):
        raise SchemaError("has only one of the attributes `mean` and `std`, expected both or neither")
    if std is not None and not np.all(std > 0):
        raise SchemaError(f"attribute `std` = {std.tolist()}, expected > 0")
    return mean, std


def _class_names(f):
    """The attribute `class_names` as str, or None. Bytes that are not UTF-8 (dtrain reads them as
    they are) come back as surrogate escapes, as h5py decodes variable-length strings:
    shown_name() prints them, and name.encode("utf-8") fails on them."""
    if "class_names" not in f.attrs:
        return None
    raw = np.asarray(f.attrs["class_names"]).reshape(-1)
    names = []
    for x in raw:
        if isinstance(x, bytes):
            names.append(x.decode("utf-8", "surrogateescape"))
        elif isinstance(x, str):
            names.append(x)
        else:
            raise SchemaError(f"attribute `class_names` holds {type(x).__name__}, expected strings")
    return names


def shown_name(name):
    """A class name for the terminal: bytes that are not UTF-8 written as \\xNN."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _dataset(f, name, what=""):
    """Dataset `name` of open file f. Raises SchemaError naming it when there is none, when it is a
    link that leads nowhere (a dangling soft or external link) or another kind of object."""
    link = f.get(name, getlink=True)
    if link is None:
        raise SchemaError(f"no dataset `{name}`{what}")
    try:
        obj = f[name]
    except (KeyError, OSError) as e:
        target = (f"a soft link to {link.path}" if isinstance(link, h5py.SoftLink) else
                  f"an external link to {link.filename}:{link.path}" if isinstance(link, h5py.ExternalLink)
                  else "a link")
        raise SchemaError(f"`{name}` is {target}, which does not resolve "
                          f"({e.args[0] if e.args else e}); expected "
                          f"dataset `{name}`{what}") from None
    if not isinstance(obj, h5py.Dataset):
        raise SchemaError(f"`{name}` is a {type(obj).__name__.lower()}, expected dataset `{name}`{what}")
    return obj


def _is_integer(ds):
    """An integer dataset as dtrain reads one: not an HDF5 enum (h5py shows its base type)."""
    return ds.dtype.kind in "iu" and h5py.check_enum_dtype(ds.dtype) is None


def _int64_values(ds, name):
    """The values of integer dataset `name` as int64; a uint64 above 2^63 - 1 is named as dtrain does."""
    raw = ds[...]
    if raw.dtype.kind == "u" and raw.size and raw.max() > np.iinfo(np.int64).max:
        i = int(np.argmax(raw > np.iinfo(np.int64).max))
        raise SchemaError(f"dataset `{name}` has value {raw.reshape(-1)[i]} at index {i}, "
                          f"expected at most {np.iinfo(np.int64).max}")
    return raw.astype(np.int64)


def validate(path, expected_classes=None, scan_pixels=True):
    """Checks one file against the schema and returns a summary dict.

    expected_classes: when given (the training set's num_classes), labels must be below it.
    scan_pixels: read all images once for min/max/mean and the finiteness check.
    Raises SchemaError (message without the path) for schema violations, OSError for unreadable files.
    """
    if os.path.isdir(path):
        raise SchemaError("is a directory, expected an HDF5 file")
    if not os.path.isfile(path):
        raise SchemaError("no such file")
    if not h5py.is_hdf5(path):
        raise SchemaError("not an HDF5 file")
    with open_h5(path, "r") as f:
        images, labels = _dataset(f, "images"), _dataset(f, "labels")
        encoded = h5py.check_vlen_dtype(images.dtype) is not None
        if encoded:  # encoded JPEG/PNG bytes, one variable-length uint8 row per image
            if h5py.check_vlen_dtype(images.dtype) != np.dtype("uint8") or images.ndim != 1:
                raise SchemaError(f"dataset `images` is variable-length {h5py.check_vlen_dtype(images.dtype)} "
                                  f"of rank {images.ndim}, expected variable-length uint8 of rank 1 (encoded images)")
            if "channels" not in f.attrs:
                raise SchemaError("encoded images need root attribute `channels` (1 or 3), which is missing")
            ch = np.asarray(f.attrs.get("channels", -1)).reshape(-1)
            if ch.size != 1 or ch.dtype.kind not in "iu" or int(ch[0]) not in (1, 3):
                raise SchemaError(f"attribute `channels` = {f.attrs.get('channels')!r}, expected 1 or 3 (encoded images)")
            shapes = _dataset(f, "image_shapes", " (N×3: C, H, W per encoded image)")
            if shapes.shape != (images.shape[0], 3) or not _is_integer(shapes):
                raise SchemaError(f"dataset `image_shapes` has shape {shapes.shape} {shapes.dtype}, "
                                  f"expected integer {(images.shape[0], 3)}")
            sh = _int64_values(shapes, "image_shapes")
            if sh.size and (sh.min() < 1 or sh.max() > MAX_ENCODED_SIDE):
                raise SchemaError("dataset `image_shapes` has a size outside [1, 2^20]")
            n, c = images.shape[0], int(ch[0])
            h = w = "var"
        elif images.ndim != 4:
            raise SchemaError(f"dataset `images` has rank {images.ndim} {images.shape}, expected rank 4 (N×C×H×W)")
        if not encoded and images.dtype.newbyteorder("=") not in (np.dtype("uint8"), np.dtype("float32")):
            raise SchemaError(f"dataset `images` has dtype {images.dtype}, expected uint8 or float32")
        if labels.ndim != 1:
            raise SchemaError(f"dataset `labels` has rank {labels.ndim} {labels.shape}, expected rank 1 (N)")
        if not _is_integer(labels):
            kind = "enum" if h5py.check_enum_dtype(labels.dtype) is not None else labels.dtype
            raise SchemaError(f"dataset `labels` has dtype {kind}, expected an integer type")
        if not encoded:
            n, c, h, w = images.shape
            if min(c, h, w) < 1:
                raise SchemaError(f"dataset `images` has shape {images.shape}, expected C, H, W >= 1")
        if labels.shape[0] != n:
            raise SchemaError(f"dataset `images` has N = {n} samples but dataset `labels` has {labels.shape[0]}")
        if n == 0:
            raise SchemaError("dataset `images` has zero samples")
        y = _int64_values(labels, "labels")
        if y.min() < 0:
            i = int(np.argmin(y))
            raise SchemaError(f"dataset `labels` has label {y[i]} at sample {i}, expected labels >= 0")
        if "num_classes" in f.attrs:
            k = np.asarray(f.attrs["num_classes"]).reshape(-1)
            if k.size != 1 or k.dtype.kind not in "iu" or int(k[0]) < 1:
                raise SchemaError(f"attribute `num_classes` = {f.attrs['num_classes']!r}, expected an integer >= 1")
            num_classes = int(k[0])
        else:
            num_classes = int(y.max()) + 1
            empty = num_classes - np.unique(y).size
            if 2 * empty > num_classes:  # one corrupt label (say 1,000,000) must not make a huge model
                i = int(np.argmax(y))
                raise SchemaError(f"dataset `labels` has label {y[i]} at sample {i}: max label + 1 = "
                                  f"{num_classes} classes, of which {empty} have no sample (more than "
                                  f"half): a corrupt label? Expected labels in [0, K) for K classes; "
                                  f"give K as attribute `num_classes`")
        i = int(np.argmax(y))
        if y[i] >= num_classes:
            raise SchemaError(f"dataset `labels` has label {y[i]} at sample {i}, expected < num_classes = {num_classes}")
        if expected_classes is not None and y[i] >= expected_classes:
            raise SchemaError(f"dataset `labels` has label {y[i]} at sample {i}, but the training set has only {expected_classes} classes")
        mean, std = mean_std(f, c)
        names = _class_names(f)
        if names is not None and len(names) != num_classes:
            raise SchemaError(f"attribute `class_names` has {len(names)} names, expected num_classes = {num_classes}")

        summary = {
            "path": path, "n": n, "shape": (c, h, w),
            "dtype": "encoded (variable-length uint8)" if encoded else str(images.dtype),
            "label_dtype": str(labels.dtype), "num_classes": num_classes,
            "histogram": np.bincount(y, minlength=num_classes), "mean": mean, "std": std,
            "class_names": names, "chunks": images.chunks,
        }
        if encoded:
            sh = f["image_shapes"][...]
            probe = range(0, n, max(1, n // 1000))  # the mean size of up to ~1000 images
            summary["encoded_bytes"] = int(n * sum(len(images[i]) for i in probe) / len(probe))
            summary["image_sizes"] = (int(sh[:, 1].min()), int(sh[:, 1].max()), int(sh[:, 2].min()), int(sh[:, 2].max()))
        elif scan_pixels:
            lo, hi, total = np.inf, -np.inf, 0.0
            for start in range(0, n, ROWS_PER_READ):
                block = images[start:start + ROWS_PER_READ]
                if block.dtype.kind == "f" and not np.all(np.isfinite(block)):
                    bad = start + int(np.argwhere(~np.isfinite(block))[0][0])
                    raise SchemaError(f"dataset `images` has a non-finite value in sample {bad}")
                lo, hi = min(lo, float(block.min())), max(hi, float(block.max()))
                total += float(block.sum(dtype=np.float64))
            summary["pixel_min"], summary["pixel_max"] = lo, hi
            summary["pixel_mean"] = total / (n * c * h * w)
        return summary


def format_summary(s):
    """Human-readable lines for a summary from validate()."""
    c, h, w = s["shape"]
    lines = [
        f"{s['path']}:",
        f"  samples      {s['n']}",
        f"  images       {s['n']}×{c}×{h}×{w} {s['dtype']} (chunks {s['chunks']})",
        f"  labels       {s['n']} {s['label_dtype']}",
        f"  num_classes  {s['num_classes']}",
    ]
    if s["mean"] is not None:
        lines.append(f"  mean / std   {np.round(s['mean'], 6).tolist()} / {np.round(s['std'], 6).tolist()}")
    else:
        lines.append("  mean / std   (none: pixels used as " + ("raw/255)" if s["dtype"] == "uint8" else "stored)"))
    if "image_sizes" in s:
        hmin, hmax, wmin, wmax = s["image_sizes"]
        lines.append(f"  stored       H {hmin}–{hmax}, W {wmin}–{wmax}, ≈{s['encoded_bytes'] / s['n'] / 1024:.1f} KiB an image")
    if "pixel_min" in s:
        lines.append(f"  pixels       min {s['pixel_min']:g}  max {s['pixel_max']:g}  mean {s['pixel_mean']:.4f} (raw units)")
    lines.append("  classes:")
    names = s["class_names"] or [""] * s["num_classes"]
    for k, (count, name) in enumerate(zip(s["histogram"], names)):
        lines.append(f"    {k:4d} {shown_name(name):<16} {count:8d}  {100.0 * count / s['n']:5.1f}%")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Exit status 0: all valid; 1: a schema violation; 2: usage.")
    parser.add_argument("files", nargs="+", metavar="FILE", help="dataset files (.h5)")
    parser.add_argument("--expected-classes", type=int, default=None, metavar="K",
                        help="also require labels < K (the training set's num_classes, K >= 1)")
    parser.add_argument("--no-pixels", action="store_true", help="skip the pixel scan (fast)")
    args = parser.parse_args(argv)
    if args.expected_classes is not None and args.expected_classes < 1:
        parser.error(f"--expected-classes must be >= 1 (got {args.expected_classes})")
    status = 0
    for path in args.files:
        try:
            summary = format_summary(validate(path, args.expected_classes, not args.no_pixels))
        except (SchemaError, OSError) as e:
            print(f"h5info.py: {path}: error: {e}", file=sys.stderr)
            status = 1
            continue
        try:
            print(summary, flush=True)
        except BrokenPipeError:  # `h5info.py ... | head`: the reader left; no verdict on the file
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
            return status
    return status


if __name__ == "__main__":
    sys.exit(main())
