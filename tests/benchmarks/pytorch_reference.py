#!/usr/bin/env python3
"""PyTorch reference for dtrain benchmarks (a benchmark reference only, never a dtrain dependency).

Builds the torch.nn equivalent of a dtrain job file's `layer =` lines (the layer graph of
docs/models.md: same layers and wiring, same initialisation family, optimizer, batch size, fp32)
and, by default, times a fixed number of training steps on one process, printing one JSON line:
  {"framework": "pytorch", "samples_per_sec": ..., "peak_rss_mb": ..., "steps": ..., ...}
Data: the job's HDF5 training set (normalised as dtrain does), or with `synthetic = CxHxW:classes`
in the job (or --synthetic) one random batch reused every step, as dtrain's --synthetic.

Other modes:
  --param-count          print the model's parameter count and exit (reads no images)
  --train-epochs E       train as dtrain's sync mode with --workers W does (per-worker shards and
                         batchnorm batches, gradient averaged over the global batch, dtrain's
                         warm-up/step/cosine schedule, --lr-scaling, coupled weight decay, --max-steps,
                         batchnorm statistics averaged before each evaluation) and report the test
                         accuracy after each epoch
  --target ACC           also train whole epochs until this test accuracy; report the time

Usage: pytorch_reference.py --config jobs/fashion_mnist_cnn.ini --steps 300 [--threads 2]
       [--device cpu|cuda] [--batch-size B] [--synthetic 3x224x224:1000]
       pytorch_reference.py --config jobs/resnet50_imagenet.ini --param-count
       pytorch_reference.py --config jobs/resnet20_cifar.ini --train-epochs 4 --workers 2
"""
import argparse
import configparser
import json
import math
import resource
import sys
import time

import h5py
import numpy as np
import torch
from torch import nn


def read_job(path):
    """Returns (flat dict of key -> value, list of layer lines) from a dtrain INI job file."""
    layers, values = [], {}
    with open(path) as f:
        for raw in f:
            line = raw.split("#", 1)[0].strip()
            if not line or line.startswith("["):
                continue
            key, _, value = line.partition("=")
            key, value = key.strip(), value.strip()
            if key == "layer":
                layers.append(value)
            else:
                values[key] = value
    return values, layers


def _hw(v):
    """'3' -> (3, 3); '1x7' -> (1, 7): dtrain's window syntax."""
    a, _, b = v.partition("x")
    return (int(a), int(b or a))


class Graph(nn.Module):
    """dtrain's layer graph (layers/layer.hpp): nodes run in line order; `name=` names an output,
    `input=a,b` takes earlier outputs ('data' is the image); add sums, concat joins channels.
    A layer with parameters or buffers sits at dtrain's tensor name for it (model.hpp
    TensorInfo::key): its `name=` ("layer1.0.conv1", nested as torchvision nests it), else
    "<line index>.<type>" ("0.conv"), so that state_dict() has the keys of `dtrain export` and
    `--init-from` and loads either way with strict=True. Layers without state are held in `ops`
    (no state_dict keys) so that train() / eval() reach them."""

    def __init__(self, layers, c, h, w, classes):
        super().__init__()
        self.mods, self.inputs, self.ops = [], [], nn.ModuleList()
        names, shapes = {"data": 0}, [(c, h, w)]
        for i, line in enumerate(layers):
            parts = line.split()
            kind, args = parts[0], dict(p.split("=", 1) for p in parts[1:])
            ins = [names[n] for n in args.pop("input").split(",")] if "input" in args else [i]
            name = args.pop("name", None)
            shp = [shapes[t] for t in ins]
            c0, h0, w0 = shp[0]
            if kind == "conv":
                k, s, p = _hw(args.get("kernel", "3")), _hw(args.get("stride", "1")), _hw(args.get("pad", "0"))
                f = int(args["filters"])
                m = nn.Conv2d(c0, f, k, s, p, bias=args.get("bias", "true") in ("true", "1"))
                out = (f, (h0 + 2 * p[0] - k[0]) // s[0] + 1, (w0 + 2 * p[1] - k[1]) // s[1] + 1)
            elif kind in ("maxpool", "avgpool"):
                k = _hw(args.get("kernel", "2"))
                s, p = _hw(args.get("stride", args.get("kernel", "2"))), _hw(args.get("pad", "0"))
                m = (nn.MaxPool2d(k, s, p) if kind == "maxpool"
                     else nn.AvgPool2d(k, s, p, count_include_pad=False))
                out = (c0, (h0 + 2 * p[0] - k[0]) // s[0] + 1, (w0 + 2 * p[1] - k[1]) // s[1] + 1)
            elif kind == "globalavgpool":
                m, out = nn.AdaptiveAvgPool2d(1), (c0, 1, 1)
            elif kind == "relu":
                m, out = nn.ReLU(inplace=True), shp[0]
            elif kind == "sigmoid":
                m, out = nn.Sigmoid(), shp[0]
            elif kind == "batchnorm":
                m = nn.BatchNorm2d(c0, eps=float(args.get("eps", 1e-5)),
                                   momentum=float(args.get("momentum", 0.1)))
                out = shp[0]
            elif kind == "dropout":
                m, out = nn.Dropout(float(args.get("rate", 0.5))), shp[0]
            elif kind == "flatten":
                m, out = nn.Flatten(), (c0 * h0 * w0, 1, 1)
            elif kind == "dense":
                units = int(args.get("units", classes))
                m, out = Dense(c0 * h0 * w0, units), (units, 1, 1)
            elif kind == "zeropad":
                m, out = ZeroPad(c0, int(args["channels"])), (int(args["channels"]), h0, w0)
            elif kind == "add":
                m, out = Add(), shp[0]
            elif kind == "concat":
                m, out = Concat(), (sum(t[0] for t in shp), h0, w0)
            else:
                sys.exit(f"pytorch_reference: unknown layer '{line}'")
            if m.state_dict():  # parameters or buffers
                _attach(self, name or f"{i}.{kind}", m)
            else:
                self.ops.append(m)
            self.mods.append(m)
            self.inputs.append(ins)
            shapes.append(out)
            if name:
                names[name] = i + 1
        for m in self.modules():  # He-normal weights, zero biases, as dtrain
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x):
        outs = [x]
        uses = [0] * (len(self.mods) + 1)
        for ins in self.inputs:
            for t in ins:
                uses[t] += 1
        for m, ins in zip(self.mods, self.inputs):
            args = [outs[t] for t in ins]
            if isinstance(m, nn.ReLU) and uses[ins[0]] > 1:
                y = torch.relu(args[0])  # an input other layers read too: not in place
            elif isinstance(m, (Add, Concat)):
                y = m(args)
            else:
                y = m(args[0])
            outs.append(y)
        return outs[-1].flatten(1)


def _attach(root, path, module):
    """Registers `module` under the dotted `path` below `root`, with plain nn.Module containers
    for the parts before the last ("layer1.0.conv1": root.layer1, its "0", that one's conv1)."""
    *parents, leaf = path.split(".")
    node = root
    for part in parents:
        if part not in node._modules:
            node.add_module(part, nn.Module())
        node = node._modules[part]
    node.add_module(leaf, module)


class Dense(nn.Linear):
    """dtrain's dense layer: flattens its input (N x C x H x W -> N x CHW), then x W^T + b."""

    def forward(self, x):
        return super().forward(x.flatten(1))


class Add(nn.Module):
    def forward(self, xs):
        y = xs[0] + xs[1]
        for x in xs[2:]:
            y = y + x
        return y


class Concat(nn.Module):
    def forward(self, xs):
        return torch.cat(xs, 1)


class ZeroPad(nn.Module):
    """He et al.'s option-A shortcut: zero channels around the input's (dtrain's zeropad)."""

    def __init__(self, cin, cout):
        super().__init__()
        self.before, self.after = (cout - cin) // 2, cout - cin - (cout - cin) // 2

    def forward(self, x):
        return nn.functional.pad(x, (0, 0, 0, 0, self.before, self.after))


def build_model(layers, c, h, w, classes):
    return Graph(layers, c, h, w, classes)


def data_shape(path):
    """(C, H, W, classes) of a dtrain HDF5 set without reading its images (docs/data.md: the
    num_classes attribute, else the largest label + 1)."""
    with h5py.File(path, "r") as f:
        c, h, w = f["images"].shape[1:]
        classes = int(f.attrs["num_classes"]) if "num_classes" in f.attrs else int(f["labels"][...].max()) + 1
    return c, h, w, classes


def load(path, device):
    """Images normalized exactly as dtrain does (docs/data.md): /255 for uint8, then (v-mean)/std.
    Returns images, labels and the normalized value of a raw 0 pixel (per channel, N x C x 1 x 1)."""
    with h5py.File(path, "r") as f:
        raw = f["images"][...]
        y = f["labels"][...].astype(np.int64)
        mean = np.asarray(f.attrs.get("mean", [0.0]), dtype=np.float32).reshape(1, -1, 1, 1)
        std = np.asarray(f.attrs.get("std", [1.0]), dtype=np.float32).reshape(1, -1, 1, 1)
    x = raw.astype(np.float32)
    if raw.dtype == np.uint8:
        x /= 255.0
    x -= mean  # in place: no full-size temporaries
    x /= std
    zero = torch.from_numpy(np.ascontiguousarray(-mean / std)).to(device)
    return torch.from_numpy(np.ascontiguousarray(x)).to(device), torch.from_numpy(y).to(device), zero


def evaluate(model, x, y, batch):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(y), batch):
            correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return correct / len(y)


def lr_at(job, step, total, workers):
    """dtrain's learning_rate() (src/optim/optimizer.cpp) for global step `step` (from 0) of `total`:
    linear warm-up (lr * (step+1) / warmup-steps), then constant / step / cosine (over lr-decay-steps,
    default the steps after warm-up, to lr-min); --lr-scaling linear multiplies lr and lr-min by the
    number of sync workers (core/config.cpp effective_for_workers)."""
    scale = workers if job.get("lr-scaling", "none") == "linear" else 1  # (sync mode)
    lr, lr_min = float(job.get("lr", 0.05)) * scale, float(job.get("lr-min", 0.0)) * scale
    warm = int(job.get("warmup-steps", 0))
    if warm > 0 and step < warm:
        return lr * (step + 1) / warm
    t = step - warm
    sched = job.get("lr-schedule", "constant")
    if sched == "step":
        return lr * float(job.get("lr-gamma", 0.1)) ** (t // int(job.get("lr-step-size", 1000)))
    if sched == "cosine":
        span = int(job.get("lr-decay-steps", 0)) or total - warm
        frac = min(1.0, t / max(span, 1))
        return lr_min + 0.5 * (lr - lr_min) * (1 + math.cos(math.pi * frac))
    return lr


def augment(xb, crop, flip, zero, gen):
    """--random-crop PAD: pad PAD pixels on every side with a raw 0 pixel (black before normalization,
    as torchvision's RandomCrop(padding=PAD) before Normalize), take a random HxW window;
    --random-flip: mirror left-right with probability 1/2. Per sample."""
    if crop:
        n, c, h, w = xb.shape
        padded = zero.expand(n, c, h + 2 * crop, w + 2 * crop).clone()
        padded[:, :, crop:crop + h, crop:crop + w] = xb
        offs = torch.randint(0, 2 * crop + 1, (n, 2), generator=gen)
        xb = torch.stack([padded[i, :, dy:dy + h, dx:dx + w] for i, (dy, dx) in enumerate(offs.tolist())])
    if flip:
        mask = torch.rand(xb.shape[0], generator=gen) < 0.5
        xb = torch.where(mask.view(-1, 1, 1, 1).to(xb.device), xb.flip(3), xb)
    return xb


def make_optimizer(job, model):
    """--optimizer sgd | momentum | adam with coupled weight decay (g += wd * p on every parameter,
    batchnorm and biases included), as dtrain's optimizer_update."""
    lr, wd = float(job.get("lr", 0.05)), float(job.get("weight-decay", 0.0))
    name = job.get("optimizer", "momentum")
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd,
                                betas=(float(job.get("beta1", 0.9)), float(job.get("beta2", 0.999))),
                                eps=float(job.get("adam-epsilon", 1e-8)))
    return torch.optim.SGD(model.parameters(), lr=lr, weight_decay=wd,
                           momentum=float(job.get("momentum", 0.9)) if name == "momentum" else 0.0,
                           nesterov=job.get("nesterov", "false") in ("true", "1", "yes", "on"))


def train_like_dtrain(model, opt, job, x, y, xt, yt, zero, args, batch):
    """dtrain's sync mode with args.workers workers, in one process: each epoch a permutation cut into
    contiguous per-worker shards (io/dataset.cpp shard_size), step s takes batch s of every shard;
    each worker's batch runs forward/backward on its own (batchnorm statistics of that batch, its own
    running statistics), the gradients are summed and divided by the samples of the step; the
    running statistics are averaged over the workers before each evaluation (worker.cpp)."""
    workers, n = args.workers, len(y)
    sizes = [n // workers + (1 if w < n % workers else 0) for w in range(workers)]
    begins = [sum(sizes[:w]) for w in range(workers)]
    steps_per_epoch = (sizes[0] + batch - 1) // batch
    total = steps_per_epoch * args.train_epochs
    if args.max_steps:
        total = min(total, args.max_steps)
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    state = [[(m.running_mean.clone(), m.running_var.clone()) for m in bns] for _ in range(workers)]
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    g = torch.Generator(device="cpu").manual_seed(int(job.get("seed", 1)))
    t0, gstep, accs, times = time.perf_counter(), 0, [], []
    for epoch in range(args.train_epochs):
        perm = torch.randperm(n, generator=g).to(x.device)
        for s in range(steps_per_epoch):
            if gstep >= total:
                break
            for group in opt.param_groups:
                group["lr"] = lr_at(job, gstep, total, workers)
            opt.zero_grad(set_to_none=True)
            idxs = [perm[b + min(s * batch, m):b + min((s + 1) * batch, m)] for b, m in zip(begins, sizes)]
            count = sum(len(i) for i in idxs)
            for w, idx in enumerate(idxs):
                if len(idx) == 0:
                    continue
                for m, (rm, rv) in zip(bns, state[w]):
                    m.running_mean, m.running_var = rm, rv  # this worker's statistics
                xb = augment(x[idx], args.random_crop, args.random_flip, zero, g)
                (loss_fn(model(xb), y[idx]) / count).backward()
            opt.step()
            gstep += 1
        for i, m in enumerate(bns):  # average_model_state(): every worker continues from the mean
            m.running_mean = torch.stack([st[i][0] for st in state]).mean(0)
            m.running_var = torch.stack([st[i][1] for st in state]).mean(0)
            for st in state:
                st[i] = (m.running_mean.clone(), m.running_var.clone())
        accs.append(evaluate(model, xt, yt, 1000))  # a Python float: waits for the device
        times.append(time.perf_counter() - t0)
        print(f"# pytorch epoch {epoch + 1}: global step {gstep}, test accuracy {accs[-1]:.4f} "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
        if gstep >= total:
            break
    return {"framework": "pytorch", "torch": torch.__version__, "epochs": len(accs),
            "workers": workers, "batch_per_worker": batch, "global_batch": batch * workers,
            "global_step": gstep, "test_accuracy": accs[-1], "test_accuracy_per_epoch": accs,
            "seconds_per_epoch": times, "seconds": time.perf_counter() - t0,
            "seconds_to_target": next((t for a, t in zip(accs, times) if args.target and a >= args.target), None)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--steps", type=int, default=300, help="timed training steps")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=0, help="override the job's batch-size")
    ap.add_argument("--train-data")
    ap.add_argument("--test-data")
    ap.add_argument("--synthetic", help="CxHxW:classes (default: the job's `synthetic`; '' for files)")
    ap.add_argument("--param-count", action="store_true", help="print the parameter count, exit")
    ap.add_argument("--target", type=float, default=0.0,
                    help="also train whole epochs until this test accuracy; report the time")
    ap.add_argument("--max-epochs", type=int, default=10)
    ap.add_argument("--train-epochs", type=int, default=0,
                    help="accuracy mode: train this many epochs as dtrain's sync mode with --workers "
                         "workers does, report the test accuracy")
    ap.add_argument("--workers", type=int, default=1, help="sync workers the run stands for")
    ap.add_argument("--max-steps", type=int, default=0, help="accuracy mode: stop after this many "
                    "global steps (as dtrain's --max-steps: the schedule ends there too)")
    ap.add_argument("--random-crop", type=int, default=0, help="accuracy mode: pad, random crop")
    ap.add_argument("--random-flip", action="store_true", help="accuracy mode: random mirror")
    ap.add_argument("--math", choices=["fp32", "tf32"], default="fp32",
                    help="CUDA: tf32 sets torch.backends.cudnn.allow_tf32 and "
                         "torch.backends.cuda.matmul.allow_tf32 (dtrain --math tf32)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: forward and loss under torch.autocast(dtype=torch.bfloat16) "
                         "(dtrain --precision bf16: bf16 activations, fp32 master weights)")
    ap.add_argument("--profile-steps", default="",
                    help="CUDA: A:B runs steps [A, B) (warm-up steps counted from 0) between "
                         "cudaProfilerStart and cudaProfilerStop (dtrain --profile-steps)")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="CUDA: torch.backends.cudnn.benchmark = True (time every convolution "
                         "algorithm once per shape; dtrain --cudnn-benchmark)")
    ap.add_argument("--channels-last", action="store_true",
                    help="CUDA: model and inputs in torch.channels_last (NHWC) memory format")
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = args.math == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = args.math == "tf32"
    torch.backends.cudnn.benchmark = args.cudnn_benchmark

    job, layers = read_job(args.config)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(int(job.get("seed", 1)))
    dev = torch.device(args.device)
    synthetic = args.synthetic if args.synthetic is not None else job.get("synthetic", "")
    batch = args.batch_size or int(job.get("batch-size", 64))
    if synthetic:
        dims, _, k = synthetic.partition(":")
        c, h, w = (int(v) for v in dims.split("x"))
        classes = int(k)
    else:
        c, h, w, classes = data_shape(args.train_data or job["train-data"])
    model = build_model(layers, c, h, w, classes).to(dev)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    if args.param_count:
        print(sum(p.numel() for p in model.parameters()))
        return
    opt = make_optimizer(job, model)

    if args.train_epochs:
        if synthetic:
            sys.exit("pytorch_reference: --train-epochs needs a job with training and test files")
        x, y, zero = load(args.train_data or job["train-data"], dev)
        xt, yt, _ = load(args.test_data or job["test-data"], dev)
        print(json.dumps(train_like_dtrain(model, opt, job, x, y, xt, yt, zero, args, batch)))
        return

    if synthetic:  # one random batch, reused every step (tf_cnn_benchmarks / dtrain --synthetic)
        x = torch.randn(batch, c, h, w, device=dev)
        y = torch.randint(0, classes, (batch,), device=dev)
    else:
        x, y, _ = load(args.train_data or job["train-data"], dev)
    loss_fn = nn.CrossEntropyLoss()
    n = len(y)
    g = torch.Generator(device="cpu").manual_seed(1)

    window = range(0)
    if args.profile_steps:
        a, b = (int(v) for v in args.profile_steps.split(":"))
        window = range(a, b)
    done = 0

    def step(idx):
        nonlocal done
        if dev.type == "cuda" and len(window):
            if done == window.start:
                torch.cuda.profiler.start()
            elif done == window.stop:
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
        done += 1
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16,
                            enabled=args.precision == "bf16"):
            loss = loss_fn(model(x[idx].contiguous(memory_format=fmt)), y[idx])
        loss.backward()
        opt.step()
        return loss

    perm, pos = torch.randperm(n, generator=g).to(dev), 0

    def next_idx():
        nonlocal perm, pos
        if synthetic:
            return slice(0, batch)
        if pos + batch > n:
            perm, pos = torch.randperm(n, generator=g).to(dev), 0
        idx = perm[pos:pos + batch]
        pos += batch
        return idx

    for _ in range(args.warmup):
        step(next_idx())
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step(next_idx())
    loss_value = loss.item()  # waits for the device
    t = time.perf_counter() - t0
    out = {"framework": "pytorch", "torch": torch.__version__, "device": str(dev),
           "math": args.math, "channels_last": args.channels_last, "precision": args.precision,
           "cudnn_benchmark": args.cudnn_benchmark,
           "threads": torch.get_num_threads(), "steps": args.steps, "batch_size": batch,
           "synthetic": synthetic or None, "seconds": t, "samples_per_sec": args.steps * batch / t,
           "last_loss": loss_value,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}
    if dev.type == "cuda":
        out["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20

    if args.target > 0:
        xt, yt, _ = load(args.test_data or job["test-data"], dev)
        fresh = build_model(layers, c, h, w, classes).to(dev)
        model.load_state_dict(fresh.state_dict())
        opt.state.clear()
        t0, reached, acc = time.perf_counter(), None, 0.0
        for epoch in range(args.max_epochs):
            perm = torch.randperm(n, generator=g).to(dev)
            for i in range(0, n, batch):
                step(perm[i:i + batch])
            acc = evaluate(model, xt, yt, 1000)
            if acc >= args.target:
                reached = time.perf_counter() - t0
                break
        out.update({"target": args.target, "seconds_to_target": reached, "epochs_to_target":
                    epoch + 1 if reached else None, "final_test_accuracy": acc})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
