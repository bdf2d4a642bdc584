#!/usr/bin/env python3
"""Sums oneDNN's per-primitive execution times (ONEDNN_VERBOSE=1 log of a dtrain run with
--log-every 1) over steps 2-4, by primitive kind and propagation: ms and calls per step.
Usage: vgg16_onednn_primitives.py LOG"""
import collections
import sys

on, tot, cnt = False, collections.Counter(), collections.Counter()
for line in open(sys.argv[1]):
    if line.startswith("step       1 |"):
        on = True
    elif line.startswith("step       4 |"):
        break
    elif on and line.startswith("onednn_verbose,exec"):
        p = line.rstrip().split(",")
        key = p[3] + " " + p[5]
        tot[key] += float(p[-1])
        cnt[key] += 1
print("total %.0f ms over 3 steps" % sum(tot.values()))
for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
    print("   %-40s %8.1f ms/step  %5.1f calls/step" % (k, v / 3, cnt[k] / 3))
