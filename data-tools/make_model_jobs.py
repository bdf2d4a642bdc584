#!/usr/bin/env python3
"""Writes the job files of the standard CNNs in dtrain's layer-graph syntax (layers/layer.hpp):

  jobs/resnet20_cifar.ini      He et al. 2016, §4.2: 3 stages x 3 basic blocks, option-A shortcuts
  jobs/resnet50_imagenet.ini   torchvision resnet50 (v1.5: stride on the 3x3 conv), 25,557,032 params
  jobs/vgg16_imagenet.ini      torchvision vgg16 (no batchnorm), 138,357,544 params
  jobs/inception3_imagenet.ini torchvision inception_v3 without the auxiliary head (Szegedy et al. 2016)

Each architecture is written out layer by layer from its paper / torchvision's definition, so that
`dtrain --dry-run` prints the same parameter count as the PyTorch reference
(tests/benchmarks/pytorch_reference.py --param-count builds the same graph from the job file).

Usage: data-tools/make_model_jobs.py [--out-dir jobs] [--width-div K]
  --width-div K divides every channel count by K (tiny versions for tests; written to --out-dir).
"""
import argparse
import os


class Net:
    """Collects `layer =` lines; conv_bn_relu etc. return the name of their output."""

    def __init__(self, width_div=1, bn_eps=None):
        self.lines, self.n, self.div, self.bn_eps = [], 0, width_div, bn_eps

    def w(self, c):
        return max(1, c // self.div)

    def add(self, spec, name=None, inputs=None):
        self.n += 1
        name = name or f"l{self.n}"
        line = spec + f" name={name}"
        if inputs:
            line += " input=" + ",".join(inputs)
        self.lines.append(line)
        return name

    def conv_bn(self, x, c, k=1, s=1, p=0, relu=True, bias=False):
        ks = k if isinstance(k, str) else str(k)
        ps = p if isinstance(p, str) else str(p)
        self.add(f"conv filters={self.w(c)} kernel={ks} stride={s} pad={ps}"
                 + ("" if bias else " bias=false"), inputs=[x])
        bn = "batchnorm" + (f" eps={self.bn_eps}" if self.bn_eps else "")
        out = self.add(bn)
        return self.add("relu") if relu else out

    def text(self):
        return "\n".join("layer = " + l for l in self.lines)


def resnet20(div):
    """He et al. 2016 §4.2: 16-32-64 filters, n = 3, identity shortcuts (option A: subsample with
    a stride-2 1x1 average pool, zero-pad the new channels)."""
    net = Net(div)
    x = net.conv_bn("data", 16, 3, 1, 1)
    cin = 16
    for stage, width in enumerate([16, 32, 64]):
        for block in range(3):
            s = 2 if stage > 0 and block == 0 else 1
            h = net.conv_bn(x, width, 3, s, 1)
            h = net.conv_bn(h, width, 3, 1, 1, relu=False)
            sc = x
            if s != 1 or cin != width:
                sc = net.add("avgpool kernel=1 stride=2", inputs=[x])
                sc = net.add(f"zeropad channels={net.w(width)}", inputs=[sc])
            x = net.add("add", inputs=[h, sc])
            x = net.add("relu", name=f"res{stage + 1}{'abc'[block]}")
            cin = width
    net.add("globalavgpool", inputs=[x])
    net.add("dense", name="logits")
    return net


def resnet50(div):
    """torchvision.models.resnet50: bottlenecks [3, 4, 6, 3], stride on the 3x3 conv (v1.5)."""
    net = Net(div)
    x = net.conv_bn("data", 64, 7, 2, 3)
    x = net.add("maxpool kernel=3 stride=2 pad=1", name="pool1")
    cin = 64
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        for b in range(blocks):
            s = 2 if stage > 0 and b == 0 else 1
            h = net.conv_bn(x, width, 1)
            h = net.conv_bn(h, width, 3, s, 1)
            h = net.conv_bn(h, width * 4, 1, relu=False)
            sc = x
            if b == 0:
                sc = net.conv_bn(x, width * 4, 1, s, 0, relu=False)
            x = net.add("add", inputs=[h, sc])
            x = net.add("relu", name=f"res{stage + 2}{chr(ord('a') + b)}")
            cin = width * 4
    net.add("globalavgpool", inputs=[x])
    net.add("dense units=1000", name="fc")
    return net


def vgg16(div):
    """torchvision.models.vgg16 (configuration D, no batchnorm)."""
    net = Net(div)
    x = "data"
    for stage, (width, n) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)]):
        for i in range(n):
            net.add(f"conv filters={net.w(width)} kernel=3 pad=1", inputs=[x])
            x = net.add("relu", name=f"conv{stage + 1}_{i + 1}")
        x = net.add("maxpool kernel=2 stride=2", name=f"pool{stage + 1}")
    net.add(f"dense units={net.w(4096)}", inputs=[x])
    net.add("relu")
    net.add("dropout rate=0.5")
    net.add(f"dense units={net.w(4096)}")
    net.add("relu")
    net.add("dropout rate=0.5")
    net.add("dense units=1000", name="fc8")
    return net


def inception3(div):
    """torchvision.models.inception_v3(aux_logits=False): BasicConv2d = conv (no bias) + batchnorm
    (eps 0.001) + relu; average-pool branches are 3x3, stride 1, pad 1."""
    net = Net(div, bn_eps="0.001")
    c = net.conv_bn
    x = c("data", 32, 3, 2)
    x = c(x, 32, 3)
    x = c(x, 64, 3, 1, 1)
    x = net.add("maxpool kernel=3 stride=2")
    x = c(x, 80, 1)
    x = c(x, 192, 3)
    x = net.add("maxpool kernel=3 stride=2")

    def avg_branch(x, cout):
        p = net.add("avgpool kernel=3 stride=1 pad=1", inputs=[x])
        return c(p, cout, 1)

    def block_a(x, pool_features, name):
        b1 = c(x, 64, 1)
        b5 = c(c(x, 48, 1), 64, 5, 1, 2)
        b3 = c(c(c(x, 64, 1), 96, 3, 1, 1), 96, 3, 1, 1)
        bp = avg_branch(x, pool_features)
        return net.add("concat", name=name, inputs=[b1, b5, b3, bp])

    def block_b(x, name):
        b3 = c(x, 384, 3, 2)
        bd = c(c(c(x, 64, 1), 96, 3, 1, 1), 96, 3, 2)
        bp = net.add("maxpool kernel=3 stride=2", inputs=[x])
        return net.add("concat", name=name, inputs=[b3, bd, bp])

    def block_c(x, c7, name):
        b1 = c(x, 192, 1)
        b7 = c(c(c(x, c7, 1), c7, "1x7", 1, "0x3"), 192, "7x1", 1, "3x0")
        bd = c(x, c7, 1)
        bd = c(bd, c7, "7x1", 1, "3x0")
        bd = c(bd, c7, "1x7", 1, "0x3")
        bd = c(bd, c7, "7x1", 1, "3x0")
        bd = c(bd, 192, "1x7", 1, "0x3")
        bp = avg_branch(x, 192)
        return net.add("concat", name=name, inputs=[b1, b7, bd, bp])

    def block_d(x, name):
        b3 = c(c(x, 192, 1), 320, 3, 2)
        b7 = c(c(c(c(x, 192, 1), 192, "1x7", 1, "0x3"), 192, "7x1", 1, "3x0"), 192, 3, 2)
        bp = net.add("maxpool kernel=3 stride=2", inputs=[x])
        return net.add("concat", name=name, inputs=[b3, b7, bp])

    def block_e(x, name):
        b1 = c(x, 320, 1)
        t = c(x, 384, 1)
        b3a, b3b = c(t, 384, "1x3", 1, "0x1"), c(t, 384, "3x1", 1, "1x0")
        d = c(c(x, 448, 1), 384, 3, 1, 1)
        bda, bdb = c(d, 384, "1x3", 1, "0x1"), c(d, 384, "3x1", 1, "1x0")
        bp = avg_branch(x, 192)
        # torchvision concatenates [b1, cat(b3a, b3b), cat(bda, bdb), bp]: the same channel order.
        return net.add("concat", name=name, inputs=[b1, b3a, b3b, bda, bdb, bp])

    x = block_a(x, 32, "mixed_5b")
    x = block_a(x, 64, "mixed_5c")
    x = block_a(x, 64, "mixed_5d")
    x = block_b(x, "mixed_6a")
    for name, c7 in [("mixed_6b", 128), ("mixed_6c", 160), ("mixed_6d", 160), ("mixed_6e", 192)]:
        x = block_c(x, c7, name)
    x = block_d(x, "mixed_7a")
    x = block_e(x, "mixed_7b")
    x = block_e(x, "mixed_7c")
    net.add("globalavgpool", inputs=[x])
    net.add("dropout rate=0.5")
    net.add("dense units=1000", name="fc")
    return net


def train_section(name, batch, lr, log_every, weight_decay, warmup, epochs=1, keep=1, mode="sync"):
    """The [train], [optimizer], [cluster] and [checkpoint] sections; lr is per worker batch and
    scaled linearly with the number of sync workers (Goyal et al. 2017)."""
    return f"""[train]
mode = {mode}
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
keep-checkpoints = {keep}"""


JOBS = {
    "resnet20_cifar": dict(
        build=resnet20,
        header="""# ResNet-20 (He et al. 2016, "Deep Residual Learning for Image Recognition", §4.2): 3 stages of
# 3 basic blocks (16, 32, 64 filters), batchnorm after every conv, identity shortcuts with
# option A (subsample by a stride-2 1x1 average pool, zero-pad the new channels: no parameters),
# global average pooling and a dense layer. About 0.27M parameters; input shape and class count
# come from the dataset, so it trains any 28x28 or 32x32 set (Fashion-MNIST here).
# Run: mpirun -np 2 build/bin/dtrain --config jobs/resnet20_cifar.ini
#      (sync, 2 workers; lr is per worker batch and scaled linearly with the workers)""",
        data="""[data]
train-data = data/fashion_mnist/train.h5
test-data = data/fashion_mnist/test.h5""",
        train=train_section("resnet20_cifar", 64, 0.05, 100, 0.0005, 200, epochs=4, keep=2)),
    "resnet50_imagenet": dict(
        build=resnet50,
        header="""# ResNet-50 for ImageNet (He et al. 2016; torchvision.models.resnet50, "v1.5": the stride of a
# downsampling bottleneck sits on its 3x3 conv). Bottleneck stages [3, 4, 6, 3], convolutions without
# bias followed by batchnorm, projection shortcuts where the shape changes. 25,557,032 parameters
# with 1000 classes (torchvision's count). Runs out of the box on synthetic data (no files):
#   mpirun -np 2 build/bin/dtrain --config jobs/resnet50_imagenet.ini --max-steps 50
# For real data: --synthetic "" --train-data X.h5 --test-data Y.h5 (3x224x224, docs/data.md).""",
        data="""[data]
synthetic = 3x224x224:1000""",
        train=train_section("resnet50_imagenet", 32, 0.0125, 10, 0.0001, 100)),
    "vgg16_imagenet": dict(
        build=vgg16,
        header="""# VGG-16 for ImageNet (Simonyan & Zisserman 2015, configuration D; torchvision.models.vgg16 without
# batchnorm): 13 3x3 convolutions with relu, 5 max pools, and three dense layers with dropout.
# 138,357,544 parameters with 1000 classes (torchvision's count): 553 MB of gradients per step, the
# standard stress test for gradient exchange. Runs out of the box on synthetic data:
#   mpirun -np 2 build/bin/dtrain --config jobs/vgg16_imagenet.ini --max-steps 20""",
        data="""[data]
synthetic = 3x224x224:1000""",
        train=train_section("vgg16_imagenet", 16, 0.0005, 5, 0.0005, 100)),
    "inception3_imagenet": dict(
        build=inception3,
        header="""# Inception-v3 (Szegedy et al. 2016, "Rethinking the Inception Architecture for Computer Vision";
# torchvision.models.inception_v3 without the auxiliary classifier) at 299x299: factorized 1x7 / 7x1
# and 1x3 / 3x1 convolutions, modules joined by concat, every conv without bias followed by
# batchnorm (eps 0.001) and relu; global average pooling, dropout 0.5, dense. Runs out of the box on
# synthetic data (TensorFlowOnSpark's scaling figure trains this model):
#   mpirun -np 2 build/bin/dtrain --config jobs/inception3_imagenet.ini --max-steps 50
# (torchvision's avg-pool branches count padding in the average; dtrain's avgpool excludes it.)""",
        data="""[data]
synthetic = 3x299x299:1000""",
        train=train_section("inception3_imagenet", 32, 0.0125, 10, 0.0001, 100)),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "..", "jobs"))
    ap.add_argument("--width-div", type=int, default=1,
                    help="divide channel counts by this (tiny test models)")
    ap.add_argument("--only", nargs="*", help="job names to write (default: all)")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    for name, job in JOBS.items():
        if a.only and name not in a.only:
            continue
        net = job["build"](a.width_div)
        path = os.path.join(a.out_dir, name + ".ini")
        with open(path, "w") as f:
            f.write(job["header"] + "\n# Generated by data-tools/make_model_jobs.py; edit the generator, "
                    "not this file.\n\n" + job["data"] + "\n\n[model]\n" + net.text() + "\n\n"
                    + job["train"] + "\n")
        print(f"make_model_jobs.py: wrote {path} ({len(net.lines)} layers)")


if __name__ == "__main__":
    main()
