"""Exposed communication per step from the runs' timelines (run.sh's OUT).

A worker's "allreduce" span (track 0) is its wait after backward for the buckets' sums. The
worker that finishes backward last waits only for the communication still left then; the other
one also waits for it (skew). Per step, the smaller wait of the two is therefore the exposed
communication proper (what `dtrain plan` predicts); the mean of the two (results.json's
step_exposed_comm_ms) adds half the skew. Step 1 (warm-up) is left out.
Usage: python3 exposed.py OUT
"""
import glob
import json
import statistics as st
import sys

out = sys.argv[1]
res = {"before": [], "after": []}
for path in sorted(glob.glob(f"{out}/*-*/timeline.json")):
    name = path.split("/")[-2]
    events = json.load(open(path))["traceEvents"]
    waits = {}
    for pid in (0, 1):
        spans = sorted((e["ts"], e["dur"]) for e in events if e["ph"] == "X" and e["pid"] == pid
                       and e["name"] == "allreduce" and e.get("tid") == 0)
        waits[pid] = [dur / 1000 for _, dur in spans]
    n = min(len(waits[0]), len(waits[1]))
    low = [min(waits[0][i], waits[1][i]) for i in range(1, n)]
    mean = [(waits[0][i] + waits[1][i]) / 2 for i in range(1, n)]
    res[name.split("-")[0]].append((st.median(low), st.median(mean)))
    print(f"{name:9s} exposed ms per step, the smaller wait: median {st.median(low):6.1f} "
          f"(steps 2-{n}: {' '.join('%.0f' % x for x in low)}); mean of the two: median "
          f"{st.median(mean):6.1f}")
for k, v in res.items():
    if v:
        print(f"{k}: median over {len(v)} runs: smaller wait {st.median(x[0] for x in v):.1f} ms, "
              f"mean of the two {st.median(x[1] for x in v):.1f} ms")
