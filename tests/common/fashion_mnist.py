"""tests/common/fashion_mnist.py — Fashion-MNIST (Xiao et al. 2017) as numpy arrays, read from the
gzip'd IDX files of Debian's dataset-fashion-mnist package, for the tests and benchmarks that make
JPEG and PNG files from real images with Pillow. numpy only (no h5py): the device machine's
Python runs it too. dtrain's own converter, with every check on the files, is
data-tools/convert_idx.py."""
import gzip

import numpy as np

FOLDER = "/usr/share/datasets/fashion-mnist"


def load(split="train", folder=FOLDER):
    """(images uint8 N×28×28, labels uint8 N) of `split`: "train" (60,000) or "test" (10,000)."""
    prefix = {"train": "train", "test": "t10k"}[split]
    with gzip.open(f"{folder}/{prefix}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(f"{folder}/{prefix}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images, labels
