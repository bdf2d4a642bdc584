#!/usr/bin/python3
"""data-tools/scale_profile.py — a `dtrain plan` worker profile calibrated to another machine.

Usage: /usr/bin/python3 data-tools/scale_profile.py PROFILE.json --compute-ms MS --batch B
                                                    [--optimizer-ms MS] [--device NAME]
                                                    [--precision P] --out OUT.json

Keeps PROFILE's layers, their parameter ranges and the split of time between layers and between
forward and backward, and rescales every layer's times so that forward + backward at batch B take
MS milliseconds (the step time measured on the target: e.g. one worker's compute ms/step from its
results.json, or a GPU's samples/s as B / samples/s minus the optimizer). --optimizer-ms sets the
update's time (default: PROFILE's); --device and --precision the labels. OUT is refused if it exists.
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--compute-ms", type=float, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--optimizer-ms", type=float)
    ap.add_argument("--device")
    ap.add_argument("--precision")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.compute_ms <= 0 or a.batch <= 0:
        sys.exit("scale_profile.py: --compute-ms and --batch must be > 0")
    if os.path.exists(a.out):
        sys.exit(f"scale_profile.py: --out {a.out} exists; refusing to replace it")
    p = json.load(open(a.profile))
    if p.get("format") != "dtrain-profile-1":
        sys.exit(f"scale_profile.py: {a.profile} is not a dtrain profile")
    total = sum(l["forward_ms"] + l["backward_ms"] for l in p["layers"])
    k = a.compute_ms / total
    for l in p["layers"]:
        l["forward_ms"] *= k
        l["backward_ms"] *= k
    p["step_ms"] = a.compute_ms
    p["batch"] = a.batch
    if a.optimizer_ms is not None:
        p["optimizer_ms"] = a.optimizer_ms
    if a.device:
        p["device"] = a.device
    if a.precision:
        p["precision"] = a.precision
    p["calibrated_from"] = f"{a.profile} scaled ×{k:.4f} to {a.compute_ms} ms at batch {a.batch}"
    with open(a.out, "w") as f:
        json.dump(p, f, indent=1)
        f.write("\n")
    print(f"{a.out}: layers ×{k:.4f}, forward + backward {a.compute_ms} ms at batch {a.batch}, "
          f"optimizer {p['optimizer_ms']} ms")


if __name__ == "__main__":
    main()
