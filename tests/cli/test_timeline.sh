#!/usr/bin/env bash
# tests/cli/test_timeline.sh — --timeline writes <run_dir>/timeline.json, a Chrome trace:
#   valid JSON with traceEvents; one named process (pid) per world rank; on every thread track
#   (pid, tid) the spans are properly nested (each span lies inside the one that contains its
#   start, or starts after it ended); every worker has one forward, backward, data-wait and
#   exchange span per training step (allreduce in sync, push-pull in async), evaluation and
#   checkpoint spans; in sync every worker's communication track (tid 1, named) holds one
#   "allreduce bucket" span per bucket and step; the ps applies every push. Without --timeline no
#   file is written. A run that fails keeps, on each rank that saw the failure, that rank's spans
#   (timeline-failed-rank<R>.json).
set -euo pipefail
source "$(dirname "$0")/common.sh"
make_data train 480 --seed 21
make_data test 96 --seed 22
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5"
        --epochs 2 --checkpoint-every 10 --timeout 60)

check() {  # check DIR NP EXCHANGE_SPAN
  "$PY" - "$1/timeline.json" "$1/results.json" "$2" "$3" <<'PY'
import json, sys
from collections import Counter, defaultdict
path, results, np, exchange = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
trace = json.load(open(path))
ev = trace["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert sorted(names) == list(range(np)), f"tracks {sorted(names)}, want one per rank 0..{np - 1}"
spans, tracks = defaultdict(list), defaultdict(list)
for e in ev:
    if e["ph"] == "X":
        assert e["dur"] >= 0 and e["ts"] >= 0, e
        tracks[(e["pid"], e["tid"])].append(e)
        if e["tid"] == 0:
            spans[e["pid"]].append(e)
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
for (pid, tid) in tracks:
    assert tid == 0 or threads.get((pid, tid)) == "communication", f"rank {pid}: unnamed track {tid}"
for (pid, tid), lst in tracks.items():
    lst.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack = []
    for e in lst:
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3:
            stack.pop()
        if stack:
            top = stack[-1]
            assert e["ts"] + e["dur"] <= top["ts"] + top["dur"] + 1e-3, \
                f"rank {pid}: '{e['name']}' overlaps the end of '{top['name']}'"
        stack.append(e)
r = json.load(open(results))
steps = r["global_step"]
workers = [p for p, n in names.items() if "worker" in n]
total = Counter()
for w in workers:
    c = Counter(e["name"] for e in spans[w])
    total += c
    assert c["forward"] == c["backward"] == c["data wait"] == c[exchange] > 0, (names[w], c)
    assert c["evaluation"] >= 2, (names[w], c)
    assert c["backward"] > 0 and c["forward"] > 0
chief = [p for p, n in names.items() if "(chief)" in n]
assert len(chief) == 1 and Counter(e["name"] for e in spans[chief[0]])["checkpoint"] >= 1
if exchange == "allreduce":
    assert all(Counter(e["name"] for e in spans[w])["allreduce"] == steps for w in workers)
    for w in workers:  # this job's model is one bucket: one bucket span per step
        c = Counter(e["name"] for e in tracks[(w, 1)])
        assert c["allreduce bucket"] == steps, (names[w], c, steps)
else:
    assert total["push-pull"] == steps, (total["push-pull"], steps)
    ps = [p for p, n in names.items() if ": ps " in n]
    assert ps and Counter(e["name"] for e in spans[ps[0]])["apply"] == steps
print(f"   {len(ev)} events, {len(names)} tracks, nested; {steps} steps")
PY
}

echo "== sync, 2 workers"
"$MPIEXEC" -n 2 "$DTRAIN" "${COMMON[@]}" --mode sync --num-ps 0 --run-dir "$SCRATCH/sync" --timeline \
  >"$SCRATCH/sync.log" 2>&1 || { cat "$SCRATCH/sync.log"; fail "sync run"; }
check "$SCRATCH/sync" 2 allreduce
echo "== async, 1 ps + 2 workers"
"$MPIEXEC" -n 3 "$DTRAIN" "${COMMON[@]}" --mode async --num-ps 1 --run-dir "$SCRATCH/async" --timeline \
  >"$SCRATCH/async.log" 2>&1 || { cat "$SCRATCH/async.log"; fail "async run"; }
check "$SCRATCH/async" 3 push-pull
echo "== a failed run: each rank that saw the failure keeps its own spans"
# Worker 1 hangs at step 6 (test-only hook); worker 0 times out in the allreduce (exit 4, the
# watchdog's, after --timeout 5) and writes timeline-failed-rank0.json: what it did up to the failure.
set +e
DTRAIN_FAULT=hang@6:1 timeout 120 "$MPIEXEC" -n 2 -x DTRAIN_FAULT "$DTRAIN" "${COMMON[@]:0:10}" --timeout 5 \
  --mode sync --num-ps 0 --timeline --run-dir "$SCRATCH/failed" >"$SCRATCH/failed.log" 2>&1
rc=$?
set -e
[[ $rc -eq 4 ]] || { cat "$SCRATCH/failed.log"; fail "the stuck run: exit $rc, want 4"; }
[[ ! -e $SCRATCH/failed/timeline.json ]] || fail "a merged timeline.json from a failed run"
grep -qF "# timeline of this rank up to its failure: $SCRATCH/failed/timeline-failed-rank0.json" \
  "$SCRATCH/failed.log" || { cat "$SCRATCH/failed.log"; fail "rank 0 does not name its timeline"; }
"$PY" - "$SCRATCH/failed/timeline-failed-rank0.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
meta = [e for e in ev if e["ph"] == "M" and e["name"] == "process_name"]
assert len(meta) == 1 and meta[0]["pid"] == 0 and "(failed)" in meta[0]["args"]["name"], meta
fwd = [e for e in ev if e["ph"] == "X" and e["name"] == "forward"]
assert {e["pid"] for e in ev} == {0}, "spans of another rank"
assert len(fwd) >= 6, f"{len(fwd)} forward spans, want the 6 steps up to the hang"
print(f"   rank 0: {len(fwd)} forward spans up to the failure")
PY

echo "== off by default"
"$MPIEXEC" -n 2 "$DTRAIN" "${COMMON[@]}" --mode sync --num-ps 0 --run-dir "$SCRATCH/off" \
  >"$SCRATCH/off.log" 2>&1 || { cat "$SCRATCH/off.log"; fail "run without --timeline"; }
[[ ! -e $SCRATCH/off/timeline.json ]] || fail "timeline.json written without --timeline"
echo "PASS"
