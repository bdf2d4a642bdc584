#!/usr/bin/env bash
# tests/cli/test_pin_threads.sh — `--pin-threads` (comm/affinity.hpp, train/pinning.cpp) end to end
# on a node of at least 2 CPUs, launched unbound (--bind-to none):
#   1. 2 workers, sync allreduce: the role table's CPUs of the two ranks — every thread's
#      Cpus_allowed_list as each rank reads it back from /proc — are non-empty and disjoint;
#   2. 1 worker: the node's CPUs its block, the communication thread (dtrain-comm) alone on the
#      last of them (cores' second SMT siblings last), the compute threads on the others;
#   3. async, 1 ps + 1 worker: disjoint too;
#   4. launched bound (--bind-to hwthread): disjoint, and the chief's line says the launcher bound
#      the ranks (its CPUs, not the node's, split among 1 of the node's 2 ranks);
#   5. off by default: no CPU column.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cpus=$("$PY" -c 'import os; print(len(os.sched_getaffinity(0)))')  # nproc obeys OMP_NUM_THREADS
[[ $cpus -ge 2 ]] || { echo "SKIP: $cpus CPU(s), --pin-threads needs 2"; exit 77; }
make_data train 256 --seed 71
write_job "$SCRATCH/job.ini"
# pinned NAME NP ARGS...: a short run with --pin-threads, unbound, into $SCRATCH/NAME.
pinned() {
  local name=$1 np=$2
  shift 2
  timeout 120 "$MPIEXEC" --bind-to none -n "$np" "$DTRAIN" --config "$SCRATCH/job.ini" \
    --train-data "$SCRATCH/train.h5" --max-steps 6 --summaries false --pin-threads \
    --run-dir "$SCRATCH/$name" "$@" >"$SCRATCH/$name.log" 2>&1 || { cat "$SCRATCH/$name.log"; fail "run $name failed"; }
}
# disjoint LOG NP: the role table lists NP ranks' CPUs, pairwise disjoint.
disjoint() {
  "$PY" - "$1" "$2" <<'PY'
import re, sys
text, n = open(sys.argv[1]).read(), int(sys.argv[2])
def cpus(s):
    out = set()
    for item in s.split(","):
        lo, _, hi = item.partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out
rows = re.findall(r"^# +(\d+) +\d+ .*  cpus ([\d,-]+)", text, re.M)
assert len(rows) == n, rows
sets = [cpus(c) for _, c in rows]
for i in range(n):
    assert sets[i], rows
    for j in range(i):
        assert not sets[i] & sets[j], f"ranks {rows[j][0]} and {rows[i][0]} share CPUs: {rows}"
print("   " + ", ".join(f"rank {r}: cpus {c}" for r, c in rows))
PY
}

echo "== 1. 2 workers, sync allreduce: disjoint CPUs"
pinned sync2 2 --mode sync --num-ps 0
disjoint "$SCRATCH/sync2.log" 2
# With every CPU in a block (2 ranks on 2 CPUs) the communication thread shares its rank's CPU,
# and the chief's line says so.
if [[ $cpus -eq 2 ]]; then
  grep -q "its communication thread sharing them (a block of 1 CPU, and no CPU outside" \
    "$SCRATCH/sync2.log" || { cat "$SCRATCH/sync2.log"; fail "the log misplaces the comm thread"; }
fi

echo "== 2. 1 worker: the communication thread alone on the block's last CPU"
pinned sync1 1 --mode sync --num-ps 0
line=$(grep -- "--pin-threads, the chief's threads:" "$SCRATCH/sync1.log") ||
  { cat "$SCRATCH/sync1.log"; fail "no thread line"; }
echo "   ${line#\# }"
# The block of the one rank is every core; its communication thread gets the last CPU of them
# in the order one hardware thread of every core first, then every core's second (SMT
# siblings from sysfs), and its first compute CPU is the first core's first CPU.
read -r first second < <("$PY" - <<'PY'
import os
cpus = sorted(os.sched_getaffinity(0))
cores = {}
for c in cpus:
    try:
        text = open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list").read().strip()
        sib = set()
        for item in text.split(","):
            lo, _, hi = item.partition("-")
            sib |= set(range(int(lo), int(hi or lo) + 1))
    except OSError:
        sib = {c}
    core = tuple(sorted((sib | {c}) & set(cpus)))
    cores.setdefault(core[0], core)
order = [core[t] for t in range(max(map(len, cores.values())))
         for _, core in sorted(cores.items()) if t < len(core)]
print(order[0], order[-1])
PY
)
grep -q "dtrain-comm on $second\b" <<<"$line" || fail "the communication thread is not on CPU $second"
grep -q "dtrain on $first\b" <<<"$line" || fail "no compute thread on CPU $first"
grep -q "  cpus [0-9]" "$SCRATCH/sync1.log" || fail "the role table lacks the CPUs"

echo "== 3. async, 1 ps + 1 worker: disjoint CPUs"
pinned async2 2 --mode async --num-ps 1
disjoint "$SCRATCH/async2.log" 2

echo "== 4. launched bound (--bind-to hwthread): each rank keeps its CPU, and the line says so"
timeout 120 "$MPIEXEC" --bind-to hwthread -n 2 "$DTRAIN" --config "$SCRATCH/job.ini" --train-data \
  "$SCRATCH/train.h5" --max-steps 2 --summaries false --pin-threads --mode sync --num-ps 0 \
  --run-dir "$SCRATCH/bound" >"$SCRATCH/bound.log" 2>&1 ||
  { cat "$SCRATCH/bound.log"; fail "the bound run failed"; }
disjoint "$SCRATCH/bound.log" 2
grep -q "the launcher bound the ranks: the chief's 1 CPUs on 1 cores, split among 1 of the node's 2 ranks" \
  "$SCRATCH/bound.log" || { cat "$SCRATCH/bound.log"; fail "the line does not say the launcher bound the ranks"; }
grep -q "sharing them (a block of 1 CPU within the launcher's binding)" "$SCRATCH/bound.log" ||
  { cat "$SCRATCH/bound.log"; fail "the line misplaces the communication thread"; }

echo "== 5. off by default"
timeout 120 "$MPIEXEC" --bind-to none -n 2 "$DTRAIN" --config "$SCRATCH/job.ini" --train-data \
  "$SCRATCH/train.h5" --max-steps 2 --summaries false --run-dir "$SCRATCH/off" >"$SCRATCH/off.log" 2>&1 ||
  { cat "$SCRATCH/off.log"; fail "the unpinned run failed"; }
! grep -q "  cpus \|pin-threads" "$SCRATCH/off.log" || fail "an unpinned run shows CPUs"
echo "test_pin_threads: OK"
