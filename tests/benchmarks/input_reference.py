"""PyTorch's side of tests/benchmarks/input_bench.sh: torchvision's ImageFolder over the same JPEG
files, the standard training transforms (RandomResizedCrop(S), RandomHorizontalFlip, ToTensor,
Normalize) and a DataLoader, as the ImageNet example (pytorch/examples imagenet/main.py) runs it.

    input_reference.py ROOT --workers W --samples N [--crop S] [--batch B]

W = 0 decodes in the main process (one core); W ≥ 1 uses W loader processes (torch threads 1 in
each). Prints one JSON line {"workers", "samples", "seconds", "samples_per_s", "per_core"}, timed
from the end of the first batch to the last, as dtrain_input_bench.
"""
import argparse
import json
import sys
import time

import torch
from torch.utils.data import DataLoader, RandomSampler
from torchvision import datasets, transforms


def _one_thread(_):
    torch.set_num_threads(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(args.crop),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    ds = datasets.ImageFolder(args.root, transform=tf)
    sampler = RandomSampler(ds, replacement=True, num_samples=args.samples + args.batch)
    loader = DataLoader(ds, batch_size=args.batch, sampler=sampler, num_workers=args.workers,
                        worker_init_fn=_one_thread if args.workers else None,
                        persistent_workers=False, prefetch_factor=2 if args.workers else None)
    it = iter(loader)
    next(it)  # warm-up batch (workers started)
    t0 = time.perf_counter()
    n = 0
    for x, _ in it:
        n += x.shape[0]
    secs = time.perf_counter() - t0
    cores = max(1, args.workers)
    print(json.dumps({"workers": args.workers, "samples": n, "seconds": round(secs, 4),
                      "samples_per_s": round(n / secs, 1), "per_core": round(n / secs / cores, 1),
                      "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
