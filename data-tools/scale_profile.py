#!/usr/bin/python3
"""data-tools/scale_profile.py — a `dtrain plan` worker profile calibrated to another machine.

Usage: /usr/bin/python3 data-tools/scale_profile.py PROFILE.json --compute-ms MS --batch B
                                                    [--optimizer-ms MS] [--device NAME]
                                                    [--precision P] --out OUT.json [--force]

Keeps PROFILE's layers, their parameter ranges and the split of time between layers and between
forward and backward, and rescales every layer's times so that forward + backward at batch B take
MS milliseconds (the step time measured on the target: e.g. one worker's compute ms/step from its
results.json, or a GPU's samples/s as B / samples/s minus the optimizer). --optimizer-ms sets the
update's time (default: PROFILE's); --device and --precision the labels. OUT is refused if it
exists (unless --force) or is a directory; its missing folders are created; it is written under a
temporary name and renamed, so a failed run leaves nothing. A PROFILE that cannot be read, is not
a dtrain profile (format "dtrain-profile-1", a "layers" list whose forward_ms and backward_ms are
finite numbers >= 0 and <= 1e9, dtrain plan's limit, not all 0) or a --compute-ms, --optimizer-ms or --batch that dtrain plan
would refuse (not a finite number > 0; --optimizer-ms >= 0; a scaled layer's forward or backward
or the optimizer above dtrain's 1e9 ms; a batch above 2^31 - 1) is one error naming it, exit 1
(argparse's usage errors: 2).
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import outputs  # noqa: E402  (the output checks every writing tool shares)


# dtrain plan's limits (model/profile.cpp): a layer's pass or the update at most 1e9 ms, the batch
# an int.
MAX_MS = 1e9
MAX_BATCH = 2**31 - 1


class ProfileError(Exception):
    pass


def number(v):
    """v is a JSON number (not a boolean) that is finite."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read_profile(path):
    """PROFILE as a dict whose layers' times dtrain plan accepts. Raises ProfileError naming path."""
    try:
        with open(path, encoding="utf-8") as f:
            p = json.load(f)
    except OSError as e:
        raise ProfileError(f"cannot read {path}: {e.strerror or e}")
    except ValueError as e:  # not JSON (or not UTF-8)
        raise ProfileError(f"{path}: not valid JSON ({e})")
    if not isinstance(p, dict) or p.get("format") != "dtrain-profile-1":
        raise ProfileError(f"{path} is not a dtrain profile (expected a JSON object with "
                           '"format": "dtrain-profile-1")')
    layers = p.get("layers")
    if not isinstance(layers, list) or not layers:
        raise ProfileError(f"{path}: expected \"layers\", a non-empty list")
    for i, l in enumerate(layers):
        for key in ("forward_ms", "backward_ms"):
            v = l.get(key) if isinstance(l, dict) else None
            if not (number(v) and 0 <= v <= MAX_MS):  # dtrain plan's limit; a sum stays finite
                raise ProfileError(f"{path}: layer {i}: {key} = {json.dumps(v)}, expected a "
                                   f"finite number >= 0 and <= {MAX_MS:g}")
    if sum(l["forward_ms"] + l["backward_ms"] for l in layers) <= 0:
        raise ProfileError(f"{path}: every layer's forward_ms and backward_ms is 0: nothing to "
                           "rescale")
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--compute-ms", type=float, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--optimizer-ms", type=float)
    ap.add_argument("--device")
    ap.add_argument("--precision")
    ap.add_argument("--out", required=True)
    ap.add_argument("--force", action="store_true", help="replace an existing OUT")
    a = ap.parse_args()

    def body():
        if not (math.isfinite(a.compute_ms) and a.compute_ms > 0):
            raise ProfileError(f"--compute-ms {a.compute_ms}: expected a finite number > 0")
        if not 0 < a.batch <= MAX_BATCH:
            raise ProfileError(f"--batch {a.batch}: expected an integer > 0 and <= {MAX_BATCH}")
        if a.optimizer_ms is not None and not (math.isfinite(a.optimizer_ms)
                                               and 0 <= a.optimizer_ms <= MAX_MS):
            raise ProfileError(f"--optimizer-ms {a.optimizer_ms}: expected a finite number >= 0 "
                               "and <= 1e9 (dtrain plan's limit)")
        outputs.check_output(a.out, a.force, ProfileError)  # refuse before reading anything
        p = read_profile(a.profile)
        total = sum(l["forward_ms"] + l["backward_ms"] for l in p["layers"])
        k = a.compute_ms / total
        for l in p["layers"]:
            l["forward_ms"] *= k
            l["backward_ms"] *= k
        worst = max(max(l["forward_ms"], l["backward_ms"]) for l in p["layers"])
        if not worst <= MAX_MS:  # inf too
            raise ProfileError(f"--compute-ms {a.compute_ms}: {a.profile}'s layers scaled by {k:.4g} "
                               f"take up to {worst:.4g} ms a pass, above dtrain plan's 1e9 ms")
        p["step_ms"] = a.compute_ms
        p["batch"] = a.batch
        if a.optimizer_ms is not None:
            p["optimizer_ms"] = a.optimizer_ms
        if not (number(p.get("optimizer_ms")) and 0 <= p["optimizer_ms"] <= MAX_MS):
            raise ProfileError(f"{a.profile}: optimizer_ms = {json.dumps(p.get('optimizer_ms'))}, "
                               "expected a finite number >= 0 and <= 1e9 (or give --optimizer-ms)")
        if a.device:
            p["device"] = a.device
        if a.precision:
            p["precision"] = a.precision
        p["calibrated_from"] = f"{a.profile} scaled ×{k:.4f} to {a.compute_ms} ms at batch {a.batch}"
        tmp = outputs.temp_name(a.out)
        try:
            try:
                os.makedirs(os.path.dirname(tmp), exist_ok=True)
                with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as f:
                    json.dump(p, f, indent=1, allow_nan=False)
                    f.write("\n")
            except OSError as e:
                raise ProfileError(f"cannot write {a.out}: {e.strerror or e}")
            outputs.check_output(a.out, a.force, ProfileError)  # appeared while we were writing
            try:
                os.replace(tmp, a.out)
            except OSError as e:
                raise ProfileError(f"cannot write {a.out}: {e.strerror or e}")
        finally:
            outputs.remove_if_exists(tmp)
        print(f"{a.out}: layers ×{k:.4f}, forward + backward {a.compute_ms} ms at batch {a.batch}, "
              f"optimizer {p['optimizer_ms']} ms")
        return 0

    return outputs.run_tool("scale_profile.py", body, ProfileError)


if __name__ == "__main__":
    sys.exit(main())
