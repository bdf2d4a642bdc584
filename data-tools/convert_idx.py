#!/usr/bin/python3
"""Convert IDX files (MNIST / Fashion-MNIST format, gzipped or not) to dtrain dataset files.

One split:
    convert_idx.py --images train-images-idx3-ubyte.gz --labels train-labels-idx1-ubyte.gz \\
                   --out data/train.h5 [--mean-std-from other.h5] [--class-names fashion|digits|"a,b,..."]
Fashion-MNIST (train.h5 and test.h5; mean/std from the training set written to both, the
Fashion-MNIST class names; --class-names and --mean-std-from are refused there):
    convert_idx.py --fashion-mnist /usr/share/datasets/fashion-mnist --out-dir data/fashion_mnist
A subset of the classes, relabelled 0..k-1 in the order given (e.g. for fine-tuning on held-out
classes: pretrain on 0-4, fine-tune on 5-9, labels 5..9 becoming 0..4; either mode):
    convert_idx.py --fashion-mnist /usr/share/datasets/fashion-mnist --out-dir data/fm_5-9 --classes 5-9

Output (docs/data.md): `images` uint8 N×1×H×W chunked by 256 samples (fast hyperslab reads of
random batches), `labels` int64 N, root attributes `mean`/`std` (float32, per channel, of pixel/255;
computed from the images unless --mean-std-from names a file to copy them from), `num_classes`
(number of class names, else max(label)+1) and `class_names` when known. With --classes, only the
samples of those classes, relabelled, `num_classes` = their number, their names, and mean/std of
the kept (training) images.

All inputs are read and checked (IDX magic numbers, gzip streams, dimensions (H, W >= 1), sizes,
labels against the class names; without --class-names, max(label)+1 classes of which more than half
have no sample, as dtrain refuses them: a corrupt label) before anything is written; no output
directory is created for bad input. Each output is written to a temporary name in its directory,
checked against the schema (h5info.validate), and the outputs are renamed only when all of them are
complete (--fashion-mnist: train.h5 and test.h5 together): a failed or interrupted run (SIGINT,
SIGTERM, SIGHUP) never leaves a half-written file or only one of the splits (nor a folder it
created); a full disk is one line `cannot write OUT: No space left on device`. An existing output is
never replaced without --force. Exit status: 0 done, 1 bad input or refusal (message on stderr), 2
bad usage, 128+N killed by signal N (130: interrupted).
Run with Debian's interpreter: /usr/bin/python3 convert_idx.py ...
"""

import argparse
import gzip
import math
import os
import sys
import zlib

import h5py
import numpy as np

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h5info  # noqa: E402  (schema validation shared with h5info.py)
import outputs  # noqa: E402  (the output checks every writing tool shares)
from h5files import open_h5  # noqa: E402  (file locks where the file system has them)

# IDX type codes (third magic byte) → big-endian numpy dtype.
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
CLASS_NAMES = {
    "fashion": ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                "Bag", "Ankle boot"],
    "digits": [str(d) for d in range(10)],
}
CHUNK_SAMPLES = 256
FASHION_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


class ConvertError(Exception):
    """Bad input or an output that may not be written; the message is shown to the user."""


def read_idx(path):
    """Reads an IDX file (gzip detected by its magic bytes) and returns a numpy array.

    Raises ConvertError naming the file when the magic number, type code, dimensions or size are wrong.
    """
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            data = f.read()
    except FileNotFoundError:
        raise ConvertError(f"{path}: no such file") from None
    except (OSError, EOFError, zlib.error) as e:  # zlib.error: a damaged deflate stream in a .gz
        raise ConvertError(f"{path}: cannot read: {e}") from None
    if len(data) < 4:
        raise ConvertError(f"{path}: too short for an IDX header ({len(data)} bytes)")
    if data[0] != 0 or data[1] != 0:
        raise ConvertError(f"{path}: bad IDX magic number {data[:4].hex()} (expected 0000TTDD)")
    code, ndim = data[2], data[3]
    if code not in IDX_DTYPES:
        raise ConvertError(f"{path}: unknown IDX type code 0x{code:02x}")
    if ndim < 1:
        raise ConvertError(f"{path}: IDX file with 0 dimensions")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ConvertError(f"{path}: truncated IDX header")
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    dtype = np.dtype(IDX_DTYPES[code])
    expected = header + math.prod(dims) * dtype.itemsize  # Python ints: no overflow
    if len(data) != expected:
        raise ConvertError(f"{path}: size {len(data)} bytes does not match its header "
                           f"(dims {dims}, {dtype.itemsize}-byte values: expected {expected} bytes)")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)


def load_split(images_path, labels_path):
    """Returns (images uint8 N×1×H×W, labels int64 N) after checking they belong together."""
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3:
        raise ConvertError(f"{images_path}: expected a 3-D image file N×H×W, got dims {list(images.shape)}")
    if 0 in images.shape[1:]:
        raise ConvertError(f"{images_path}: images of {images.shape[1]}×{images.shape[2]} pixels "
                           f"(dims {list(images.shape)}), expected H, W >= 1")
    if images.dtype != np.uint8:
        raise ConvertError(f"{images_path}: expected uint8 pixels (IDX type 0x08), got {images.dtype}")
    if labels.ndim != 1:
        raise ConvertError(f"{labels_path}: expected a 1-D label file, got dims {list(labels.shape)}")
    if labels.dtype.kind not in "iu":
        raise ConvertError(f"{labels_path}: expected integer labels, got {labels.dtype}")
    if images.shape[0] != labels.shape[0]:
        raise ConvertError(f"{images_path} has {images.shape[0]} images but {labels_path} has "
                           f"{labels.shape[0]} labels")
    if images.shape[0] == 0:
        raise ConvertError(f"{images_path}: zero images")
    if labels.min() < 0:
        i = int(np.argmin(labels))
        raise ConvertError(f"{labels_path}: label {labels[i]} at index {i}, expected labels >= 0")
    return images[:, None, :, :], labels.astype(np.int64)


def num_classes_of(labels_path, labels, class_names):
    """len(class_names), else max(label)+1; labels must lie below it (load_split checked >= 0).
    max(label)+1 is refused, as dtrain refuses it, when more than half of those classes have no
    sample: one corrupt label (say 1,000,000) must not become a `num_classes` attribute, which
    dtrain would trust, of a 1,000,001-way output layer."""
    num_classes = len(class_names) if class_names else int(labels.max()) + 1
    if not class_names:
        empty = num_classes - np.unique(labels).size
        if 2 * empty > num_classes:
            i = int(np.argmax(labels))
            raise ConvertError(f"{labels_path}: label {labels[i]} at index {i}: max label + 1 = "
                               f"{num_classes} classes, of which {empty} have no sample (more than "
                               f"half): a corrupt label? Expected labels in [0, K) for K classes; "
                               f"give the K class names with --class-names")
    if labels.max() >= num_classes:
        raise ConvertError(f"{labels_path}: labels span [{labels.min()}, {labels.max()}] but there are "
                           f"{num_classes} class names")
    return num_classes


def mean_std(images, rows=4096):
    """Per-channel mean and population std of images/255 (float64 sums over blocks of rows)."""
    s = np.zeros(images.shape[1])
    s2 = np.zeros(images.shape[1])
    for start in range(0, images.shape[0], rows):
        x = images[start:start + rows].astype(np.float64) / 255.0
        s += x.sum(axis=(0, 2, 3))
        s2 += np.square(x).sum(axis=(0, 2, 3))
    count = images.shape[0] * images.shape[2] * images.shape[3]
    mean = s / count
    return mean.astype(np.float32), np.sqrt(np.maximum(s2 / count - mean * mean, 0.0)).astype(np.float32)


def computed_mean_std(images_path, images):
    """mean_std(images), refused (ConvertError naming the image file, before anything is written)
    when a channel's std is 0: images all of one value, which dtrain cannot normalize by."""
    mean, std = mean_std(images)
    if not (std > 0).all():
        raise ConvertError(f"{images_path}: every pixel converted has the value {images.flat[0]} (std 0), which "
                           "dtrain cannot normalize by; give --mean-std-from a file to copy mean/std "
                           "from")
    return mean, std


def mean_std_from(path, channels):
    """Reads the mean/std attributes of an existing schema file, as `channels` values each (one
    value is broadcast); checked as h5info.py checks them (numbers, finite, std > 0), and an error
    names `path`, the file they came from."""
    if not os.path.isfile(path):
        raise ConvertError(f"{path}: " + ("is a directory" if os.path.isdir(path) else "no such file"))
    try:
        with open_h5(path, "r") as f:
            if "mean" not in f.attrs or "std" not in f.attrs:
                raise ConvertError(f"{path}: has no `mean`/`std` attributes to copy")
            mean, std = h5info.mean_std(f, channels)
            return mean.astype(np.float32), std.astype(np.float32)
    except h5info.SchemaError as e:
        raise ConvertError(f"--mean-std-from {path}: {e}") from None
    except OSError as e:
        raise ConvertError(f"{path}: cannot open as HDF5: {e}") from None


def parse_class_names(spec):
    """'fashion', 'digits' or a comma-separated list → list of names (None for None)."""
    if spec is None:
        return None
    names = CLASS_NAMES.get(spec, [s.strip() for s in spec.split(",")])
    if any(not n for n in names):
        raise ConvertError(f"--class-names {spec!r}: empty class name")
    return names


def parse_classes(spec):
    """'5-9', '0,2,4' or '0-2,7' -> the class ids in that order, as a list of ranges (None for
    None; class_ids makes the ids of them). Raises ConvertError for anything else, a negative id,
    an empty range or an id given twice. Costs O(items), whatever the ranges' lengths."""
    if spec is None:
        return None
    ranges = []
    for item in spec.split(","):
        lo, dash, hi = item.strip().partition("-")
        try:
            first, last = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise ConvertError(f"--classes {spec!r}: {item.strip()!r} is not a class id or a range "
                               "A-B (e.g. 5-9 or 0,2,4)") from None
        if first < 0 or last < first:
            raise ConvertError(f"--classes {spec!r}: {item.strip()!r} is not a range of ids >= 0")
        ranges.append(range(first, last + 1))
    reach = -1  # the highest id of the ranges starting before this one (sorted by start)
    for r in sorted(ranges, key=lambda r: r.start):
        if r.start <= reach:  # the smallest id given twice: overlaps start at the later range's start
            raise ConvertError(f"--classes {spec!r}: class {r.start} given twice")
        reach = max(reach, r[-1])
    return ranges


def class_ids(labels_path, classes, num_classes):
    """The ids of parse_classes' ranges, in order, after checking (before listing them) that all
    lie below num_classes; raises ConvertError naming the label file otherwise."""
    beyond = [max(r.start, num_classes) for r in classes if r[-1] >= num_classes]
    if beyond:
        raise ConvertError(f"{labels_path}: --classes asks for class {beyond[0]} but there are "
                           f"{num_classes} classes (0-{num_classes - 1})")
    return [c for r in classes for c in r]


def select_classes(labels_path, images, labels, num_classes, classes):
    """The samples of `classes` (ids below num_classes, class_ids), in file order, labels
    relabelled to their position in `classes`. Raises ConvertError naming the label file for a
    class with no samples."""
    new_label = np.full(num_classes, -1, np.int64)
    new_label[classes] = np.arange(len(classes))
    keep = new_label[labels] >= 0
    counts = np.bincount(labels[keep], minlength=num_classes)
    empty = [c for c in classes if counts[c] == 0]
    if empty:
        raise ConvertError(f"{labels_path}: no sample of class {empty[0]} (--classes)")
    return images[keep], new_label[labels[keep]]


def write_temp(out, tmp, images, labels, mean, std, num_classes, class_names):
    """Writes one split to its temporary file `tmp` (creating the directory) and checks it against
    the schema; the caller renames it to `out` or removes it."""
    try:
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        f, objects = None, []  # the datasets too: one freed would be closed, a write failing there unseen
        try:
            f = open_h5(tmp, "w")  # in here: a create that fails (a full disk) is one line too
            objects.append(f)
            chunks = (min(CHUNK_SAMPLES, images.shape[0]),) + images.shape[1:]
            objects.append(f.create_dataset("images", data=images, dtype=np.uint8, chunks=chunks))
            objects.append(f.create_dataset("labels", data=labels, dtype=np.int64))
            f.attrs["mean"] = mean.astype(np.float32)
            f.attrs["std"] = std.astype(np.float32)
            f.attrs["num_classes"] = np.int64(num_classes)
            if class_names:
                f.attrs["class_names"] = class_names  # variable-length UTF-8 strings
            f.close()
        except (OSError, RuntimeError) as e:  # h5py's write and close failures (a full disk)
            raise ConvertError(outputs.hdf5_write_failed(out, e, objects)) from None
        except BaseException:  # interrupted: closed before the temporary is removed
            if f is not None:
                f.close()
            raise
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        h5info.validate(tmp, scan_pixels=False)
    except h5info.SchemaError as e:
        raise ConvertError(f"{out}: written file fails the schema check: {e}") from None
    except OSError as e:
        raise ConvertError(f"cannot write {out}: {e.strerror or e}") from None


def write_outputs(splits, mean, std, class_names, force):
    """splits: [(out, images, labels, num_classes)]. Every split goes to a temporary file first;
    all are renamed only when all were written, and the temporaries are removed on any error or
    interruption."""
    for out, images, _, _ in splits:
        if mean.size not in (1, images.shape[1]) or std.size != mean.size:
            raise ConvertError(f"{out}: mean/std have {mean.size}/{std.size} values for "
                               f"{images.shape[1]} channels")
    tmps = [outputs.temp_name(out) for out, *_ in splits]
    created = []  # folders write_temp creates, outermost first: removed again if the run fails
    for tmp in tmps:
        d, missing = os.path.dirname(tmp), []
        while not os.path.exists(d):
            missing.append(d)
            d = os.path.dirname(d)
        created += [m for m in reversed(missing) if m not in created]
    complete = False
    try:
        for tmp, (out, images, labels, num_classes) in zip(tmps, splits):
            write_temp(out, tmp, images, labels, mean, std, num_classes, class_names)
        for out, *_ in splits:  # appeared while we were writing
            outputs.check_output(out, force, ConvertError)
        for tmp, (out, *_) in zip(tmps, splits):
            try:
                os.replace(tmp, out)
            except OSError as e:
                raise ConvertError(f"cannot write {out}: {e.strerror or e}") from None
        complete = True
    finally:
        for tmp in tmps:
            outputs.remove_if_exists(tmp)
        for d in reversed(created) if not complete else []:  # a failed run leaves no new folder
            try:
                os.rmdir(d)
            except OSError:
                pass
    for out, images, _, num_classes in splits:
        print(f"convert_idx.py: wrote {out}: {images.shape[0]} samples "
              f"{'×'.join(map(str, images.shape[1:]))} uint8, {num_classes} classes, "
              f"mean {mean.tolist()} std {std.tolist()}")


def find_idx(directory, stem):
    """Path of stem or stem.gz in directory."""
    for name in (stem + ".gz", stem):
        if os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    raise ConvertError(f"{directory}: no {stem}[.gz]")


def load_fashion_split(src, split):
    """Fashion-MNIST's `split` ("train" or "test") from its IDX files in folder src (.gz or not),
    as load_split returns it: images uint8 N×1×28×28, labels int64 N. Raises ConvertError."""
    return load_split(*(find_idx(src, stem) for stem in FASHION_FILES[split]))


def convert_fashion_mnist(src, out_dir, force, classes=None):
    """Writes out_dir/train.h5 and out_dir/test.h5 (both or neither); mean/std of the training set
    go to both. `classes`: only those (select_classes), the class names theirs."""
    outs = {split: os.path.join(out_dir, split + ".h5") for split in FASHION_FILES}
    for out in outs.values():
        outputs.check_output(out, force, ConvertError)  # refuse before converting anything
    splits = []
    for split, (img, lab) in FASHION_FILES.items():  # read and check both before writing either
        images_path, labels_path = find_idx(src, img), find_idx(src, lab)
        images, labels = load_split(images_path, labels_path)
        names = CLASS_NAMES["fashion"]
        k = num_classes_of(labels_path, labels, names)
        if classes:
            ids = class_ids(labels_path, classes, k)
            images, labels = select_classes(labels_path, images, labels, k, ids)
            names, k = [names[c] for c in ids], len(ids)
        splits.append((outs[split], images, labels, k))
    mean, std = computed_mean_std(find_idx(src, FASHION_FILES["train"][0]), splits[0][1])
    write_outputs(splits, mean, std, names, force)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--images", help="IDX image file (N×H×W uint8, .gz or not)")
    parser.add_argument("--labels", help="IDX label file (N, .gz or not)")
    parser.add_argument("--out", help="output .h5 for --images/--labels")
    parser.add_argument("--mean-std-from", metavar="H5", help="copy mean/std from this schema file "
                        "(e.g. the training split) instead of computing them from --images")
    parser.add_argument("--class-names", metavar="NAMES",
                        help="'fashion', 'digits', or a comma-separated list (sets num_classes)")
    parser.add_argument("--fashion-mnist", metavar="DIR",
                        help="convert the four Fashion-MNIST IDX files in DIR (needs --out-dir)")
    parser.add_argument("--out-dir", metavar="DIR", help="output directory for --fashion-mnist")
    parser.add_argument("--classes", metavar="IDS", help="keep only these classes, relabelled "
                        "0..k-1 in this order: '5-9', '0,2,4', '0-2,7'")
    parser.add_argument("--force", action="store_true", help="replace existing outputs")
    args = parser.parse_args(argv)

    def body():
        if args.fashion_mnist:
            if not args.out_dir or args.images or args.labels or args.out:
                parser.error("--fashion-mnist takes --out-dir (and not --images/--labels/--out)")
            # Its class names are Fashion-MNIST's, its mean/std the training set's: an option
            # asking for others is refused, not left without effect.
            given = [o for o, v in (("--class-names", args.class_names),
                                    ("--mean-std-from", args.mean_std_from)) if v is not None]
            if given:
                parser.error(f"--fashion-mnist does not take {' or '.join(given)} (its class names "
                             "are Fashion-MNIST's and its mean/std the training set's, written to "
                             "both splits; convert each split with --images/--labels/--out for "
                             "others)")
            convert_fashion_mnist(args.fashion_mnist, args.out_dir, args.force,
                                  parse_classes(args.classes))
            return 0
        if not (args.images and args.labels and args.out):
            parser.error("need --images, --labels and --out (or --fashion-mnist DIR --out-dir DIR)")
        outputs.check_output(args.out, args.force, ConvertError)
        class_names = parse_class_names(args.class_names)
        classes = parse_classes(args.classes)
        images, labels = load_split(args.images, args.labels)
        k = num_classes_of(args.labels, labels, class_names)
        if classes:
            ids = class_ids(args.labels, classes, k)
            images, labels = select_classes(args.labels, images, labels, k, ids)
            class_names = [class_names[c] for c in ids] if class_names else None
            k = len(ids)
        mean, std = mean_std_from(args.mean_std_from, images.shape[1]) if args.mean_std_from \
            else computed_mean_std(args.images, images)
        write_outputs([(args.out, images, labels, k)], mean, std, class_names, args.force)
        return 0
    return outputs.run_tool("convert_idx.py", body, ConvertError)


if __name__ == "__main__":
    sys.exit(main())
