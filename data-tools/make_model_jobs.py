#!/usr/bin/python3
"""Writes the job files of the standard CNNs in dtrain's layer-graph syntax (docs/models.md):

  jobs/resnet20_cifar.ini       He et al. 2016 §4.2, option-A shortcuts: 269,434 params on 1x28x28
  jobs/resnet50_imagenet.ini    torchvision resnet50 (v1.5: stride on the 3x3 conv): 25,557,032
  jobs/vgg16_imagenet.ini       torchvision vgg16 (no batchnorm): 138,357,544
  jobs/inception3_imagenet.ini  torchvision inception_v3(aux_logits=False): 23,834,568

Each model is written out layer by layer after torchvision's definition (the paper's for ResNet-20),
in torchvision's parameter order, so `dtrain --dry-run` prints torchvision's parameter count and
tests/benchmarks/pytorch_reference.py --param-count (the same graph in PyTorch) agrees. Every layer
with parameters is named as torchvision's module (`conv1`, `layer1.0.bn2`, `features.0`,
`Mixed_5b.branch1x1.conv`, `fc`; ResNet-20 as torchvision's ResNet would name it), so dtrain's
tensor names are torchvision's state_dict keys (`layer1.0.bn2.running_var`; docs/checkpoints.md) and
`dtrain export` writes a file torchvision loads with load_state_dict(strict=True). A line gets
`input=` only where it does not take the previous line's output, and `name=` where a later line takes
its output by name, on block outputs (for reading) and on every layer with parameters.

Usage: data-tools/make_model_jobs.py [--out-dir jobs] [--width-div K] [--only NAME ...] [--force]
  --width-div K divides every channel count by K >= 1 (tiny versions for tests).
  --only NAME   writes only these jobs (names as above, without .ini).
  --force       replaces existing job files (regenerating jobs/ needs it); without it an existing
                output is an error and nothing is written.
Every job is written under a hidden temporary name beside its file (data-tools/outputs.py), and the
files are renamed only when all of them are complete: a failed run (a full disk) or one killed by
SIGTERM/SIGHUP or Ctrl-C replaces no existing job file and leaves no new or half-written one.
Exit status: 0 done, 1 an output that may not be written (message on stderr), 2 bad usage,
128+N killed by signal N (130: interrupted).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import outputs  # noqa: E402  (the output checks every writing tool shares)

DATA = 0  # the network input; layers are numbered from 1 in line order


class Net:
    """The `layer =` lines of one model. add() returns the new layer's number, which later layers
    pass as inputs; without inputs a layer takes the previous line's output."""

    def __init__(self, width_div=1, bn_eps=None):
        self.layers = []  # (spec, input numbers, name or None)
        self.div, self.bn_eps = width_div, bn_eps

    def w(self, channels):
        return max(1, channels // self.div)

    def add(self, spec, *inputs, name=None):
        inputs = [i for i in inputs if i is not None] or [len(self.layers)]  # None: previous line
        self.layers.append((spec, inputs, name))
        return len(self.layers)

    def conv(self, x, filters, k, s=1, p=0, bias=True, name=None):
        """A conv line; `name` is torchvision's module name where it has one."""
        spec = f"conv filters={self.w(filters)} kernel={k}"
        spec += (f" stride={s}" if str(s) != "1" else "") + (f" pad={p}" if str(p) != "0" else "")
        return self.add(spec + ("" if bias else " bias=false"), x, name=name)

    def conv_bn(self, x, filters, k=1, s=1, p=0, relu=True, name=None, conv=None, bn=None):
        """conv without bias + batchnorm (+ relu): torchvision's BasicConv2d and ResNet conv-bn pairs.
        `conv` and `bn` are torchvision's module names of the two (default: `name`.conv and
        `name`.bn, BasicConv2d's); `name` names the relu's output (without relu: ignored, the
        batchnorm's name is its output's)."""
        self.conv(x, filters, k, s, p, bias=False, name=conv or (name and name + ".conv"))
        out = self.add("batchnorm" + (f" eps={self.bn_eps}" if self.bn_eps else ""),
                       name=bn or (name and name + ".bn"))
        return self.add("relu", name=name) if relu else out

    def text(self):
        by_name = {i for n, (_, ins, _) in enumerate(self.layers, 1) if ins != [n - 1] for i in ins}
        names = {DATA: "data"}
        for n, (spec, _, name) in enumerate(self.layers, 1):
            assert name or n not in by_name, f"layer #{n} '{spec}' is taken by name but has none"
            if name:
                names[n] = name
        lines = []
        for n, (spec, ins, _) in enumerate(self.layers, 1):
            line = "layer = " + spec + (f" name={names[n]}" if n in names else "")
            if ins != [n - 1]:
                line += " input=" + ",".join(names[i] for i in ins)
            lines.append(line)
        assert len(set(names.values())) == len(names), "duplicate layer names"
        return "\n".join(lines)


def resnet20(div):
    """He et al. 2016 §4.2: n = 3 basic blocks per stage, 16-32-64 filters; identity shortcuts,
    option A where the shape changes (subsample by a 1x1 stride-2 average pool = x[:, :, ::2, ::2],
    zero-pad the new channels, half on each side)."""
    net = Net(div)
    x = net.conv_bn(DATA, 16, 3, 1, 1, name="relu", conv="conv1", bn="bn1")
    cin = 16
    for stage, width in enumerate([16, 32, 64], start=1):
        for b in range(3):
            blk = f"layer{stage}.{b}"
            s = 2 if stage > 1 and b == 0 else 1
            h = net.conv_bn(x, width, 3, s, 1, conv=blk + ".conv1", bn=blk + ".bn1")
            h = net.conv_bn(h, width, 3, 1, 1, relu=False, conv=blk + ".conv2", bn=blk + ".bn2")
            sc = x
            if s != 1 or cin != width:
                net.add("avgpool kernel=1 stride=2", x)
                sc = net.add(f"zeropad channels={net.w(width)}", name=blk + ".shortcut")
            net.add("add", h, sc)
            x = net.add("relu", name=blk)
            cin = width
    net.add("globalavgpool")
    net.add("dense", name="fc")
    return net


def resnet50(div):
    """torchvision.models.resnet50: bottlenecks [3, 4, 6, 3], stride on the 3x3 conv (v1.5),
    projection shortcut (1x1 conv + batchnorm) on each stage's first block."""
    net = Net(div)
    net.conv_bn(DATA, 64, 7, 2, 3, conv="conv1", bn="bn1")
    x = net.add("maxpool kernel=3 stride=2 pad=1", name="maxpool")
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)], start=1):
        for b in range(blocks):
            blk = f"layer{stage}.{b}"
            s = 2 if stage > 1 and b == 0 else 1
            h = net.conv_bn(x, width, 1, conv=blk + ".conv1", bn=blk + ".bn1")
            h = net.conv_bn(h, width, 3, s, 1, conv=blk + ".conv2", bn=blk + ".bn2")
            h = net.conv_bn(h, 4 * width, 1, relu=False, conv=blk + ".conv3", bn=blk + ".bn3")
            sc = x
            if b == 0:
                sc = net.conv_bn(x, 4 * width, 1, s, relu=False, conv=blk + ".downsample.0",
                                 bn=blk + ".downsample.1")
            net.add("add", h, sc)
            x = net.add("relu", name=blk)
    net.add("globalavgpool")
    net.add("dense", name="fc")
    return net


def vgg16(div):
    """torchvision.models.vgg16 (configuration D, no batchnorm). Its AdaptiveAvgPool2d(7) is the
    identity on the 7x7 maps of a 224x224 input and is left out."""
    net = Net(div)
    f = 0  # index in torchvision's `features` Sequential: conv, relu, ..., maxpool
    for stage, (width, n) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)], start=1):
        for i in range(n):
            net.conv(None, width, 3, 1, 1, name=f"features.{f}")
            net.add("relu")
            f += 2
        net.add("maxpool kernel=2 stride=2", name=f"features.{f}")
        f += 1
    for fc in ("classifier.0", "classifier.3"):  # classifier: linear, relu, dropout, ...
        net.add(f"dense units={net.w(4096)}", name=fc)
        net.add("relu")
        net.add("dropout rate=0.5")
    net.add("dense", name="classifier.6")
    return net


def inception3(div):
    """torchvision.models.inception_v3(aux_logits=False): BasicConv2d = conv (no bias) + batchnorm
    (eps 0.001) + relu; branches in torchvision's order; the pool branches average 3x3, stride 1,
    pad 1 (torchvision counts the padding in those averages, dtrain's avgpool does not)."""
    net = Net(div, bn_eps="0.001")
    c = net.conv_bn  # name=: torchvision's BasicConv2d (its .conv, .bn; the relu's output)
    c(DATA, 32, 3, 2, name="Conv2d_1a_3x3")
    c(None, 32, 3, name="Conv2d_2a_3x3")
    c(None, 64, 3, 1, 1, name="Conv2d_2b_3x3")
    net.add("maxpool kernel=3 stride=2", name="maxpool1")
    c(None, 80, 1, name="Conv2d_3b_1x1")
    c(None, 192, 3, name="Conv2d_4a_3x3")
    x = net.add("maxpool kernel=3 stride=2", name="maxpool2")

    def pool_branch(x, filters, m):
        net.add("avgpool kernel=3 stride=1 pad=1", x)
        return c(None, filters, 1, name=m + ".branch_pool")

    def block_a(x, pool_features, m):  # InceptionA
        b1 = c(x, 64, 1, name=m + ".branch1x1")
        b5 = c(c(x, 48, 1, name=m + ".branch5x5_1"), 64, 5, 1, 2, name=m + ".branch5x5_2")
        b3 = c(c(c(x, 64, 1, name=m + ".branch3x3dbl_1"), 96, 3, 1, 1, name=m + ".branch3x3dbl_2"),
               96, 3, 1, 1, name=m + ".branch3x3dbl_3")
        return net.add("concat", b1, b5, b3, pool_branch(x, pool_features, m), name=m)

    def block_b(x, m):  # InceptionB (grid reduction 35 -> 17)
        b3 = c(x, 384, 3, 2, name=m + ".branch3x3")
        bd = c(c(c(x, 64, 1, name=m + ".branch3x3dbl_1"), 96, 3, 1, 1, name=m + ".branch3x3dbl_2"),
               96, 3, 2, name=m + ".branch3x3dbl_3")
        bp = net.add("maxpool kernel=3 stride=2", x, name=m + ".branch_pool")
        return net.add("concat", b3, bd, bp, name=m)

    def block_c(x, c7, m):  # InceptionC: factorized 7x7
        b1 = c(x, 192, 1, name=m + ".branch1x1")
        b7 = c(c(c(x, c7, 1, name=m + ".branch7x7_1"), c7, "1x7", 1, "0x3", name=m + ".branch7x7_2"),
               192, "7x1", 1, "3x0", name=m + ".branch7x7_3")
        bd = c(x, c7, 1, name=m + ".branch7x7dbl_1")
        bd = c(bd, c7, "7x1", 1, "3x0", name=m + ".branch7x7dbl_2")
        bd = c(bd, c7, "1x7", 1, "0x3", name=m + ".branch7x7dbl_3")
        bd = c(bd, c7, "7x1", 1, "3x0", name=m + ".branch7x7dbl_4")
        bd = c(bd, 192, "1x7", 1, "0x3", name=m + ".branch7x7dbl_5")
        return net.add("concat", b1, b7, bd, pool_branch(x, 192, m), name=m)

    def block_d(x, m):  # InceptionD (grid reduction 17 -> 8)
        b3 = c(c(x, 192, 1, name=m + ".branch3x3_1"), 320, 3, 2, name=m + ".branch3x3_2")
        b7 = c(x, 192, 1, name=m + ".branch7x7x3_1")
        b7 = c(b7, 192, "1x7", 1, "0x3", name=m + ".branch7x7x3_2")
        b7 = c(b7, 192, "7x1", 1, "3x0", name=m + ".branch7x7x3_3")
        b7 = c(b7, 192, 3, 2, name=m + ".branch7x7x3_4")
        bp = net.add("maxpool kernel=3 stride=2", x, name=m + ".branch_pool")
        return net.add("concat", b3, b7, bp, name=m)

    def block_e(x, m):  # InceptionE: expanded filter banks
        b1 = c(x, 320, 1, name=m + ".branch1x1")
        t = c(x, 384, 1, name=m + ".branch3x3_1")
        b3a = c(t, 384, "1x3", 1, "0x1", name=m + ".branch3x3_2a")
        b3b = c(t, 384, "3x1", 1, "1x0", name=m + ".branch3x3_2b")
        d = c(c(x, 448, 1, name=m + ".branch3x3dbl_1"), 384, 3, 1, 1, name=m + ".branch3x3dbl_2")
        bda = c(d, 384, "1x3", 1, "0x1", name=m + ".branch3x3dbl_3a")
        bdb = c(d, 384, "3x1", 1, "1x0", name=m + ".branch3x3dbl_3b")
        bp = pool_branch(x, 192, m)
        # torchvision concatenates [b1, cat(b3a, b3b), cat(bda, bdb), bp]: the same channel order.
        return net.add("concat", b1, b3a, b3b, bda, bdb, bp, name=m)

    x = block_a(x, 32, "Mixed_5b")
    x = block_a(x, 64, "Mixed_5c")
    x = block_a(x, 64, "Mixed_5d")
    x = block_b(x, "Mixed_6a")
    for m, c7 in [("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)]:
        x = block_c(x, c7, m)
    x = block_d(x, "Mixed_7a")
    x = block_e(x, "Mixed_7b")
    block_e(x, "Mixed_7c")
    net.add("globalavgpool")
    net.add("dropout rate=0.5")
    net.add("dense", name="fc")
    return net


def train_section(name, batch, lr, log_every, weight_decay, warmup, epochs=1, keep=1, secs=0):
    """[train], [optimizer], [cluster] and [checkpoint]: sync data parallelism, momentum SGD, lr per
    worker batch scaled linearly with the workers (Goyal et al. 2017), warm-up then cosine; with
    secs > 0 a checkpoint every `secs` seconds as well as at epoch ends."""
    timed = (f"\n# an ImageNet epoch takes hours on a few CPU nodes: a checkpoint every {secs // 60} minutes"
             f" too\ncheckpoint-secs = {secs}") if secs else ""
    return f"""[train]
mode = sync
epochs = {epochs}
batch-size = {batch}
seed = 1
log-every = {log_every}

[optimizer]
optimizer = momentum
lr = {lr}
lr-scaling = linear
momentum = 0.9
weight-decay = {weight_decay}
lr-schedule = cosine
warmup-steps = {warmup}

[cluster]
num-ps = 0

[checkpoint]
run-dir = runs/{name}
keep-checkpoints = {keep}{timed}"""


SYNTHETIC_RUN = """# Runs out of the box on synthetic data (one random batch per worker, no I/O):
#   mpirun --bind-to none -np 2 build/bin/dtrain --config jobs/{job}.ini --max-steps 20
# Parameter and memory tables only: build/bin/dtrain --config jobs/{job}.ini --dry-run
# Against PyTorch (the same graph): tests/benchmarks/bench_vs_pytorch.sh jobs/{job}.ini
# For real data: --synthetic "" --train-data X.h5 --test-data Y.h5 (docs/data.md; ImageNet's JPEGs
# and the recipe's crops: docs/imagenet.md); the last dense layer has as many units as the data
# has classes."""

JOBS = {
    "resnet20_cifar": dict(
        build=resnet20,
        header="""# ResNet-20 (He et al. 2016, "Deep Residual Learning for Image Recognition", §4.2): a 3x3 conv,
# then 3 stages of 3 basic blocks (16, 32, 64 filters; the 2nd and 3rd stages start with stride 2),
# every conv without bias and followed by batchnorm, identity shortcuts, option A where the shape
# changes (subsample by a stride-2 1x1 average pool, zero-pad the new channels: no parameters),
# global average pooling and a dense layer. 269,434 parameters on Fashion-MNIST's 1x28x28 with 10
# classes (269,722 on CIFAR-10's 3x32x32: the paper's "0.27M"); input shape and class count come
# from the dataset. Training: sync, lr 0.05 per 64-sample worker batch, scaled linearly (2 workers:
# 0.1 at batch 128, as He et al.), 200 warm-up steps, then cosine to 0.
# Run: mpirun --bind-to none -np 2 build/bin/dtrain --config jobs/resnet20_cifar.ini
#      tests/benchmarks/resnet20_accuracy.sh           (the same training in PyTorch, side by side)""",
        data="""[data]
train-data = data/fashion_mnist/train.h5
test-data = data/fashion_mnist/test.h5""",
        train=train_section("resnet20_cifar", 64, 0.05, 100, 0.0005, 200, epochs=4, keep=2)),
    "resnet50_imagenet": dict(
        build=resnet50,
        header="""# ResNet-50 for ImageNet (He et al. 2016; torchvision.models.resnet50, "v1.5": a downsampling
# bottleneck has its stride on the 3x3 conv, not the first 1x1). Bottleneck stages [3, 4, 6, 3],
# convolutions without bias followed by batchnorm, a projection shortcut (1x1 conv + batchnorm) on
# each stage's first block, global average pooling, dense. 25,557,032 parameters with 1000 classes
# (torchvision's count). Training: sync, lr 0.0125 per 32-sample worker batch = 0.1 per 256 samples
# (Goyal et al. 2017), scaled linearly with the workers; weight decay 1e-4.
""" + SYNTHETIC_RUN.format(job="resnet50_imagenet"),
        data="""[data]
synthetic = 3x224x224:1000""",
        train=train_section("resnet50_imagenet", 32, 0.0125, 10, 0.0001, 100, secs=1800)),
    "vgg16_imagenet": dict(
        build=vgg16,
        header="""# VGG-16 for ImageNet (Simonyan & Zisserman 2015, configuration D; torchvision.models.vgg16, no
# batchnorm): 13 3x3 convolutions with bias and relu in 5 stages, each ending in a 2x2 max pool;
# dense 4096, relu, dropout 0.5, dense 4096, relu, dropout 0.5, dense. Needs 224x224 input (7x7
# maps before the dense layers; torchvision's AdaptiveAvgPool2d(7) is the identity there).
# 138,357,544 parameters with 1000 classes (torchvision's count): 553 MB of gradients per step, the
# standard stress test for gradient exchange. Training: sync, lr 0.000625 per 16-sample worker batch
# = 0.01 per 256 samples (the paper's), scaled linearly with the workers; weight decay 5e-4.
""" + SYNTHETIC_RUN.format(job="vgg16_imagenet"),
        data="""[data]
synthetic = 3x224x224:1000""",
        train=train_section("vgg16_imagenet", 16, 0.000625, 5, 0.0005, 100, secs=1800)),
    "inception3_imagenet": dict(
        build=inception3,
        header="""# Inception-v3 (Szegedy et al. 2016, "Rethinking the Inception Architecture for Computer Vision";
# torchvision.models.inception_v3(aux_logits=False): no auxiliary classifier) at 299x299: a stem of
# 5 convs and 2 max pools, Inception modules A x3, B, C x4 (factorized 1x7 / 7x1), D, E x2 (1x3 / 3x1
# banks) whose branches are joined by concat, every conv without bias followed by batchnorm (eps
# 0.001) and relu; global average pooling, dropout 0.5, dense. 23,834,568 parameters with 1000
# classes (torchvision's count). One difference in values, not shapes: torchvision's 3x3 average-pool
# branches count the zero padding in the average, dtrain's avgpool leaves it out (as PyTorch with
# count_include_pad=False). Training: sync, lr 0.0125 per 32-sample worker batch = 0.1 per 256
# samples, scaled linearly with the workers; weight decay 1e-4.
""" + SYNTHETIC_RUN.format(job="inception3_imagenet"),
        data="""[data]
synthetic = 3x299x299:1000""",
        train=train_section("inception3_imagenet", 32, 0.0125, 10, 0.0001, 100, secs=1800)),
}


class JobsError(Exception):
    """An output that may not be written; the message is shown to the user."""


def error(msg):
    raise JobsError(msg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "..", "jobs"))
    ap.add_argument("--width-div", type=int, default=1, metavar="K",
                    help="divide channel counts by K >= 1 (tiny test models)")
    ap.add_argument("--only", nargs="*", choices=list(JOBS), metavar="NAME",
                    help=f"job names to write (default: all): {', '.join(JOBS)}")
    ap.add_argument("--force", action="store_true", help="replace existing job files")
    a = ap.parse_args()
    if a.width_div < 1:
        ap.error(f"--width-div must be >= 1 (got {a.width_div})")
    return outputs.run_tool("make_model_jobs.py", lambda: write_jobs(a), JobsError)


def write_jobs(a):
    names = [n for n in JOBS if not a.only or n in a.only]
    paths = {n: os.path.join(a.out_dir, n + ".ini") for n in names}
    # Refuse before writing anything.
    if os.path.exists(a.out_dir) and not os.path.isdir(a.out_dir):
        error(f"cannot write {a.out_dir}: not a directory")
    for path in paths.values():
        outputs.check_output(path, a.force, error)
    texts = {}
    for name in names:
        job = JOBS[name]
        net = job["build"](a.width_div)
        texts[name] = (job["header"] + "\n# Generated by data-tools/make_model_jobs.py; edit the generator, "
                       "not this file.\n\n" + job["data"] + "\n\n[model]\n" + net.text() + "\n\n"
                       + job["train"] + "\n", len(net.layers))
    # Every job to its temporary name (outputs.temp_name) first; all are renamed only when all
    # were written, so a failed or interrupted run (a full disk, SIGTERM) leaves every existing
    # job file as it was and writes none; the temporaries (and a folder made here) are removed.
    tmps = {name: outputs.temp_name(path) for name, path in paths.items()}
    created = outputs.missing_folders(a.out_dir)
    complete = False
    try:
        try:
            os.makedirs(a.out_dir, exist_ok=True)
        except OSError as e:
            error(f"cannot write {a.out_dir}: {e.strerror or e}")
        for name, path in paths.items():
            try:
                with open(tmps[name], "w") as f:
                    f.write(texts[name][0])
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:
                error(f"cannot write {path}: {e.strerror or e}")
        for path in paths.values():  # appeared while we were writing
            outputs.check_output(path, a.force, error)
        for name, path in paths.items():
            try:
                os.replace(tmps[name], path)
            except OSError as e:
                error(f"cannot write {path}: {e.strerror or e}")
        complete = True
    finally:
        for tmp in tmps.values():
            outputs.remove_if_exists(tmp)
        if not complete:  # a failed run leaves no new folder
            outputs.remove_new_folders(created)
    for name, path in paths.items():
        print(f"make_model_jobs.py: wrote {path} ({texts[name][1]} layers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
