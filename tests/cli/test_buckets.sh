#!/usr/bin/env bash
# tests/cli/test_buckets.sh — the bucketed sync allreduce (collectives/bucketed.hpp) end to end,
# 2 workers:
#   1. one bucket after backward (--bucket-mb 0 --overlap false), the default buckets overlapped
#      with backward, and many small buckets (--bucket-mb 0.002: at most 524 floats, 20 at both
#      ends) train to bit-identical checkpoints (2 ranks: every element is the same a + b);
#   2. the step anatomy (data, compute, exposed communication, optimizer) is in the log and in
#      results.json, and adds up to no more than the step time; so does the same without each
#      process's first step (…_after_first_step), with samples/s over the steps after it;
#   3. the timeline shows one "allreduce bucket" span per bucket and step on the communication track;
#   4. a bad --bucket-mb or --bucket-link is refused naming the option;
#   5. --bucket-link (the latency-aware plan): 2 workers on HDR InfiniBand keep the default plan
#      (minimum 25,000 floats, below the 262,144 of the 1 MiB end buckets); a slow ring over
#      0.002 MiB buckets gets end buckets of its 1,000-float minimum and fewer buckets; both train
#      to the same bits; the plan is logged once and the timeline shows that many buckets; so
#      does --bucket-link probe (the ring measured at start, the chief's figures on both ranks).
set -euo pipefail
source "$(dirname "$0")/common.sh"
make_data train 320 --seed 31
make_data test 64 --seed 32
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5"
        --mode sync --num-ps 0 --epochs 1 --checkpoint-every 10)

echo "== 1. one bucket after backward = default buckets = small buckets overlapped"
run 2 "$SCRATCH/after" --bucket-mb 0 --overlap false
run 2 "$SCRATCH/default"
run 2 "$SCRATCH/small" --bucket-mb 0.002 --timeline
steps=$(json_get "$SCRATCH/after/results.json" global_step)
[[ $steps -eq 10 ]] || fail "expected 10 global steps, got $steps"
# --bucket-mb 0 is one bucket without a cap, logged so (it read "1 of <= 0 MiB": a bucket past
# its own cap).
grep -q "^# buckets: 1 uncapped (--bucket-mb 0), end bucket [0-9]* floats" "$SCRATCH/after.log" ||
  { grep "# buckets" "$SCRATCH/after.log"; fail "--bucket-mb 0: the plan is not logged as one uncapped bucket"; }
compare "$SCRATCH/after" "$SCRATCH/default" 10
compare "$SCRATCH/after" "$SCRATCH/small" 10

echo "== 2. step anatomy in the log and results.json"
grep -q "^# step anatomy ms/step per worker (data | compute | exposed comm | optimizer): w0 .* w1 " \
  "$SCRATCH/small.log" || { cat "$SCRATCH/small.log"; fail "no step anatomy line"; }
"$PY" - "$SCRATCH/small/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
parts = [r[k] for k in ("step_data_ms", "step_compute_ms", "step_exposed_comm_ms", "step_optimizer_ms")]
assert all(p >= 0 for p in parts), parts
assert r["step_compute_ms"] > 0 and r["step_optimizer_ms"] > 0, parts
per_step = 1e3 * r["train_seconds"] / r["global_step"]
assert sum(parts) <= per_step * 1.05 + 0.5, (parts, per_step)
print(f"   anatomy ms/step {parts} of {per_step:.2f}")
# The same without each process's first step: the steps after it only, so their sum is at most
# the run's whole anatomy times steps / (steps − 1); samples/s over the chief's steps after it.
after = [r[k + "_after_first_step"] for k in
         ("step_data_ms", "step_compute_ms", "step_exposed_comm_ms", "step_optimizer_ms")]
n = r["global_step"]
assert all(a >= 0 for a in after) and after[1] > 0, after
assert sum(after) * (n - 1) <= sum(parts) * n * 1.0001 + 1e-6, (after, parts)
# Σ over the workers of (its samples − its first step's) / (its train seconds − its first
# step's): about at least (n − 1) / n of the global rate over all steps (sync: every step the same
# global batch; the workers' train seconds differ a little from the chief's).
assert r["samples_per_sec_after_first_step"] >= r["samples_per_sec"] * (n - 1) / n * 0.95, r
print(f"   after the first step: anatomy ms/step {[round(a, 3) for a in after]}, "
      f"{r['samples_per_sec_after_first_step']:.1f} samples/s (all steps {r['samples_per_sec']:.1f})")
PY

echo "== 3. the timeline: one bucket span per bucket and step"
"$PY" - "$SCRATCH/small/timeline.json" "$steps" <<'PY'
import json, sys
from collections import Counter
ev, steps = json.load(open(sys.argv[1]))["traceEvents"], int(sys.argv[2])
for pid in (0, 1):
    c = Counter(e["name"] for e in ev if e["ph"] == "X" and e["pid"] == pid and e["tid"] == 1)
    n = c["allreduce bucket"]
    assert n > 10 * steps and n % steps == 0, (pid, c)  # the job's ~4k parameters: > 10 buckets
    print(f"   rank {pid}: {n // steps} buckets per step")
PY

echo "== 4. bad --bucket-mb"
expect_error 0 "--bucket-mb|0 to 2047|-1" "${COMMON[@]}" --bucket-mb -1 --dry-run
expect_error 2 "option --bucket-link 'hdr'|unknown preset|hdr-ib" "${COMMON[@]}" \
  --run-dir "$SCRATCH/bad" --bucket-link hdr --dry-run
expect_error 2 "option --bucket-link 'alpha_us=2'|beta_gbps" "${COMMON[@]}" \
  --run-dir "$SCRATCH/bad2" --bucket-link alpha_us=2 --dry-run

echo "== 5. --bucket-link: buckets sized for the ring's latency"
run 2 "$SCRATCH/ib" --bucket-link hdr-ib
# 2 ranks × 1.9999 µs × 1 GB/s = 3,999.8 bytes: at least 1,000 floats a bucket.
run 2 "$SCRATCH/aware" --bucket-mb 0.002 --bucket-link alpha_us=1.9999,beta_gbps=8 --timeline
# probe: the ring measured at start, the chief's figures on both ranks (the same buckets).
run 2 "$SCRATCH/probe" --bucket-mb 0.002 --bucket-link probe --timeline
compare "$SCRATCH/after" "$SCRATCH/ib" 10
compare "$SCRATCH/after" "$SCRATCH/probe" 10
compare "$SCRATCH/after" "$SCRATCH/aware" 10
"$PY" - "$SCRATCH" "$steps" <<'PY'
import json, re, sys
from collections import Counter
d, steps = sys.argv[1], int(sys.argv[2])
def plan(name):
    lines = [l for l in open(f"{d}/{name}.log") if l.startswith("# buckets: ")]
    assert len(lines) == 1, (name, lines)  # once, by the chief
    m = re.match(r"# buckets: (\d+) of <= ([\d.]+) MiB, end bucket (\d+) floats", lines[0])
    assert m, lines[0]
    return int(m[1]), int(m[3]), lines[0]
(n_def, e_def, l_def), (n_ib, e_ib, l_ib) = plan("default"), plan("ib")
assert (n_ib, e_ib) == (n_def, e_def), (l_def, l_ib)
assert "--bucket-link off" in l_def and "at least 25000 floats" in l_ib, (l_def, l_ib)
(n_small, e_small, _), (n_aw, e_aw, l_aw) = plan("small"), plan("aware")
assert e_small == 20 and e_aw == 1000 and "at least 1000 floats" in l_aw, l_aw
assert 1 < n_aw < n_small, (n_aw, n_small)
ev = json.load(open(f"{d}/aware/timeline.json"))["traceEvents"]
for pid in (0, 1):
    c = Counter(e["name"] for e in ev if e["ph"] == "X" and e["pid"] == pid and e["tid"] == 1)
    assert c["allreduce bucket"] == n_aw * steps, (pid, c, n_aw)
n_pr, e_pr, l_pr = plan("probe")
assert "--bucket-link probe: p=2, " in l_pr and e_pr >= 20, l_pr
ev = json.load(open(f"{d}/probe/timeline.json"))["traceEvents"]
for pid in (0, 1):  # both ranks sum as many buckets as the chief planned
    c = Counter(e["name"] for e in ev if e["ph"] == "X" and e["pid"] == pid and e["tid"] == 1)
    assert c["allreduce bucket"] == n_pr * steps, (pid, c, n_pr)
print(f"   probe: {l_pr.strip()}")
print(f"   default {n_def} buckets (end {e_def} floats) = hdr-ib's; 0.002 MiB: {n_small} "
      f"buckets, latency-aware {n_aw} (end {e_aw} floats)")
PY
echo "test_buckets: OK"
