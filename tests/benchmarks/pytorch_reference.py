#!/usr/bin/env python3
"""PyTorch reference for dtrain benchmarks (a benchmark reference only, never a dtrain dependency).

Builds the torch.nn equivalent of a dtrain job file's `layer =` lines (same layers, same
initialisation family, same optimizer, batch size and fp32), trains it on the job's HDF5 training
set for a fixed number of steps on one process, and prints one JSON line:
  {"framework": "pytorch", "samples_per_sec": ..., "steps": ..., "batch_size": ..., ...}
Optionally evaluates on the test set (--eval) and reports the time to reach --target accuracy.

Usage: pytorch_reference.py --config jobs/fashion_mnist_cnn.ini --steps 300 [--threads 2]
       [--device cpu|cuda] [--epochs-to-target 0.91]
"""
import argparse
import configparser
import json
import math
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


def build_model(layers, c, h, w, classes):
    mods, shape = [], (c, h, w)
    flat = False
    for line in layers:
        parts = line.split()
        kind, args = parts[0], dict(p.split("=", 1) for p in parts[1:])
        if kind == "conv":
            k, s, p = int(args.get("kernel", 3)), int(args.get("stride", 1)), int(args.get("pad", 0))
            f = int(args["filters"])
            mods.append(nn.Conv2d(shape[0], f, k, s, p))
            shape = (f, (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1)
        elif kind in ("maxpool", "avgpool"):
            k = int(args.get("kernel", 2))
            s = int(args.get("stride", k))
            p = int(args.get("pad", 0))
            mods.append(nn.MaxPool2d(k, s, p) if kind == "maxpool"
                        else nn.AvgPool2d(k, s, p, count_include_pad=False))
            shape = (shape[0], (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1)
        elif kind == "relu":
            mods.append(nn.ReLU())
        elif kind == "sigmoid":
            mods.append(nn.Sigmoid())
        elif kind == "batchnorm":
            mods.append(nn.BatchNorm1d(shape[0]) if flat else nn.BatchNorm2d(shape[0]))
        elif kind == "dropout":
            mods.append(nn.Dropout(float(args.get("rate", 0.5))))
        elif kind == "flatten":
            mods.append(nn.Flatten())
            shape, flat = (shape[0] * shape[1] * shape[2], 1, 1), True
        elif kind == "dense":
            units = int(args.get("units", classes))
            if not flat:
                mods.append(nn.Flatten())
                flat = True
            mods.append(nn.Linear(shape[0] * shape[1] * shape[2], units))
            shape = (units, 1, 1)
        else:
            sys.exit(f"pytorch_reference: unknown layer '{line}'")
    model = nn.Sequential(*mods)
    for m in model.modules():  # He-normal weights, zero biases, as dtrain
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return model


def load(path, device):
    """Images normalized exactly as dtrain does (docs/data.md): /255 for uint8, then (v-mean)/std."""
    with h5py.File(path, "r") as f:
        raw = f["images"][...]
        y = f["labels"][...].astype(np.int64)
        mean = np.asarray(f.attrs.get("mean", [0.0]), dtype=np.float32).reshape(-1)
        std = np.asarray(f.attrs.get("std", [1.0]), dtype=np.float32).reshape(-1)
    x = raw.astype(np.float32)
    if raw.dtype == np.uint8:
        x /= 255.0
    x = (x - mean.reshape(1, -1, 1, 1)) / std.reshape(1, -1, 1, 1)
    return torch.from_numpy(np.ascontiguousarray(x)).to(device), torch.from_numpy(y).to(device)


def evaluate(model, x, y, batch):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(y), batch):
            correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return correct / len(y)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--steps", type=int, default=300, help="timed training steps")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--train-data")
    ap.add_argument("--test-data")
    ap.add_argument("--target", type=float, default=0.0,
                    help="also train whole epochs until this test accuracy; report the time")
    ap.add_argument("--max-epochs", type=int, default=10)
    args = ap.parse_args()

    job, layers = read_job(args.config)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(int(job.get("seed", 1)))
    dev = torch.device(args.device)
    x, y = load(args.train_data or job["train-data"], dev)
    classes = int(y.max().item()) + 1
    model = build_model(layers, x.shape[1], x.shape[2], x.shape[3], classes).to(dev)
    batch = int(job.get("batch-size", 64))
    lr = float(job.get("lr", 0.05))
    wd = float(job.get("weight-decay", 0.0))
    opt_name = job.get("optimizer", "momentum")
    if opt_name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, weight_decay=wd,
                              momentum=float(job.get("momentum", 0.9)) if opt_name == "momentum" else 0.0,
                              nesterov=job.get("nesterov", "false") == "true")
    loss_fn = nn.CrossEntropyLoss()
    n = len(y)
    g = torch.Generator(device="cpu").manual_seed(1)

    def step(idx):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        return loss

    perm = torch.randperm(n, generator=g).to(dev)
    pos = 0
    def next_idx():
        nonlocal perm, pos
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
    loss_value = loss.item()
    t = time.perf_counter() - t0
    out = {"framework": "pytorch", "torch": torch.__version__, "device": str(dev),
           "threads": torch.get_num_threads(), "steps": args.steps, "batch_size": batch,
           "seconds": t, "samples_per_sec": args.steps * batch / t, "last_loss": loss_value}

    if args.target > 0:
        xt, yt = load(args.test_data or job["test-data"], dev)
        fresh = build_model(layers, x.shape[1], x.shape[2], x.shape[3], classes).to(dev)
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
