#!/usr/bin/env bash
# tests/cli/test_allreduce_variants.sh — `--allreduce hierarchical` and `--wire-dtype` end to end
# (collectives/hierarchical.hpp, collectives/wire.hpp), the tiny CNN, sync allreduce:
#   1. 2 workers: hierarchical trains to checkpoints bit-identical to --allreduce mpi (every sum
#      is the same a + b);
#   2. 3 workers, and 4 workers as two "nodes" of 2 (DTRAIN_TEST_RANKS_PER_NODE=2: two leaders
#      summing over MPI): parameters within 1e-4 of --allreduce mpi's after 10 steps (another order
#      of additions, documented tolerance); the default (auto) is hierarchical on CPU, bit for bit,
#      and results.json names the algorithm each run used;
#   3. --wire-dtype bf16 / fp16, 3 workers: parameters within 2e-2 of fp32's after 10 steps
#      (gradients rounded to 16 bits: a documented tolerance, not bits), and the loss falls; the
#      default (auto: hierarchical, 16 bits in the node's shared memory) bit for bit the flat
#      16-bit sum (--allreduce mpi) on one node; two nodes of 2 in bf16 within 2e-2 of fp32;
#   4. ps pushes with --wire-dtype bf16, sync through the ps (2 workers + 1 ps): parameters within
#      2e-2 of fp32's, half the bytes a push (results.json push_bytes_per_step: 2 bytes a value
#      against 4); async fp16 through the shared ring: rounded in 4-byte slots, the loss falls;
#   5. --allreduce none (a benchmark: no sum, the workers in lock step): 2 workers train apart —
#      the chief's checkpoint is not the summed run's — and results.json says "none"; on data
#      whose samples are all the same, each worker steps as one worker does (bit for bit);
#   6. bad values are one error naming the option, on every rank, exit 2 (none with async or
#      pipeline stages among them, and none with --wire-dtype, --bucket-mb or --bucket-link).
set -euo pipefail
source "$(dirname "$0")/common.sh"
make_data train 320 --seed 41
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --mode sync --num-ps 0
        --max-steps 10 --checkpoint-every 10 --summaries false)

# close DIR_A DIR_B STEP TOL: params of both checkpoints agree to TOL (max abs difference over
# max abs value), and differ from the initial parameters (the runs trained).
close() {
  "$PY" - "$@" <<'PY'
import sys, h5py, numpy as np
a_dir, b_dir, step, tol = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
name = f"ckpt-{step:010d}.h5"
with h5py.File(f"{a_dir}/{name}", "r") as a, h5py.File(f"{b_dir}/{name}", "r") as b:
    x, y = a["params"][()].astype(np.float64), b["params"][()].astype(np.float64)
    rel = np.abs(x - y).max() / np.abs(x).max()
    print(f"   {b_dir.split('/')[-1]} vs {a_dir.split('/')[-1]}: max |diff| / max |param| = {rel:.2e}")
    assert rel <= tol, f"{rel} > {tol}"
PY
}

echo "== 1. 2 workers: hierarchical = mpi, bit for bit"
run 2 "$SCRATCH/mpi2" --allreduce mpi
run 2 "$SCRATCH/hier2" --allreduce hierarchical
compare "$SCRATCH/mpi2" "$SCRATCH/hier2" 10

echo "== 2. 3 workers on one node, 4 workers as two nodes of 2: within 1e-4 of mpi"
run 3 "$SCRATCH/mpi3" --allreduce mpi
run 3 "$SCRATCH/hier3" --allreduce hierarchical
close "$SCRATCH/mpi3" "$SCRATCH/hier3" 10 1e-4
run 3 "$SCRATCH/auto3"  # CPU's --allreduce auto is hierarchical: the same bits
compare "$SCRATCH/hier3" "$SCRATCH/auto3" 10
# results.json names the algorithm that ran (auto's choice).
for pair in mpi3:mpi hier3:hierarchical auto3:hierarchical; do
  got=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["allreduce"])' \
    "$SCRATCH/${pair%%:*}/results.json")
  [[ $got == "${pair#*:}" ]] || fail "${pair%%:*}: results.json allreduce is '$got', not ${pair#*:}"
done
run 4 "$SCRATCH/mpi4" --allreduce mpi
DTRAIN_TEST_RANKS_PER_NODE=2 run 4 "$SCRATCH/hier4" --allreduce hierarchical
close "$SCRATCH/mpi4" "$SCRATCH/hier4" 10 1e-4

echo "== 3. --wire-dtype bf16 / fp16: within 2e-2 of fp32, the loss falls; 16-bit shared memory"
for w in bf16 fp16; do
  run 3 "$SCRATCH/$w" --wire-dtype "$w"  # auto: hierarchical, 16 bits in the node's slots
  close "$SCRATCH/mpi3" "$SCRATCH/$w" 10 2e-2
  grep -q "wire-dtype = $w" "$SCRATCH/$w/config.ini" || fail "config.ini lacks wire-dtype = $w"
  # One node: the same roundings in the same order as the flat 16-bit sum, so the same bits.
  run 3 "$SCRATCH/${w}_flat" --wire-dtype "$w" --allreduce mpi
  compare "$SCRATCH/${w}_flat" "$SCRATCH/$w" 10
done
# A sum beyond fp16's 65504 (lr 5000 blows the gradients up within steps): named as the wire's
# overflow, with the way out (it read as a plain non-finite gradient).
expect_error 3 "non-finite gradient|--wire-dtype fp16 the gradient is summed in fp16|bf16" \
  "${COMMON[@]}" --run-dir "$SCRATCH/fp16_overflow" --wire-dtype fp16 --lr 5000 --momentum 0
# Two nodes of 2: the node totals rounded once more; still within 2e-2 of fp32.
DTRAIN_TEST_RANKS_PER_NODE=2 run 4 "$SCRATCH/bf16_hier4" --allreduce hierarchical --wire-dtype bf16
close "$SCRATCH/mpi4" "$SCRATCH/bf16_hier4" 10 2e-2
"$PY" - "$SCRATCH/bf16/metrics.csv" <<'PY'
import csv, sys
loss = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "train"]
assert len(loss) >= 2 and loss[-1] < loss[0], loss
print(f"   bf16 loss {loss[0]:.3f} -> {loss[-1]:.3f}")
PY

echo "== 4. ps pushes in 16 bits: sync through the ps within 2e-2 of fp32, half the bytes"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --num-ps 1 --max-steps 10
        --checkpoint-every 10 --summaries false)
run 3 "$SCRATCH/ps_fp32" --mode sync
run 3 "$SCRATCH/ps_bf16" --mode sync --wire-dtype bf16
close "$SCRATCH/ps_fp32" "$SCRATCH/ps_bf16" 10 2e-2
# Async: the chief logs only the steps it makes itself (10 global steps can leave it one), so
# this run makes 30 and logs each.
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --num-ps 1 --max-steps 30
        --checkpoint-every 30 --summaries false)
run 3 "$SCRATCH/ps_fp16" --mode async --wire-dtype fp16 --log-every 1  # the shared ring
"$PY" - "$SCRATCH" <<'PY'
import csv, h5py, json, sys
d = sys.argv[1]
n = h5py.File(f"{d}/ps_fp32/ckpt-0000000010.h5", "r")["params"].size
for run, per_value in (("ps_fp32", 4), ("ps_bf16", 2), ("ps_fp16", 4)):
    r = json.load(open(f"{d}/{run}/results.json"))
    assert r["push_bytes_per_step"] == per_value * n, (run, r["push_bytes_per_step"], n)
    print(f"   {run}: {r['push_bytes_per_step']:.0f} bytes a push ({per_value} a value), "
          f"wire {r['wire_dtype']}")
loss = [float(r["loss"]) for r in csv.DictReader(open(f"{d}/ps_fp16/metrics.csv"))
        if r["kind"] == "train"]
assert len(loss) >= 2 and loss[-1] < loss[0], loss
PY
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --mode sync --num-ps 0
        --max-steps 10 --checkpoint-every 10 --summaries false)

echo "== 5. --allreduce none: no sum, the workers still in step"
run 2 "$SCRATCH/none2" --allreduce none
[[ $(json_get "$SCRATCH/none2/results.json" allreduce) == none ]] || fail "results.json does not say none"
[[ $(json_get "$SCRATCH/none2/results.json" global_step) == 10 ]] || fail "the lock-step run did not take 10 steps"
"$PY" - "$SCRATCH/mpi2" "$SCRATCH/none2" <<'PY' || fail "--allreduce none summed the gradients"
import sys, h5py, numpy as np
name = "ckpt-0000000010.h5"
with h5py.File(f"{sys.argv[1]}/{name}", "r") as a, h5py.File(f"{sys.argv[2]}/{name}", "r") as b:
    rel = np.abs(a["params"][()] - b["params"][()]).max() / np.abs(a["params"][()]).max()
    print(f"   the chief's parameters, none against mpi: max |diff| / max |param| = {rel:.2e}")
    assert rel > 1e-4, rel
PY

# Each worker applies its own gradient, at its own batch's scale: on data whose every sample is the
# same, each worker's step is the one worker's (it applied 1/W of it: lr / W).
"$PY" - "$SCRATCH/train.h5" "$SCRATCH/same.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "w") as g:
    for k, v in f.attrs.items():
        g.attrs[k] = v
    for k in f:
        g[k] = np.repeat(f[k][:1], f[k].shape[0], axis=0)
PY
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/same.h5" --mode sync --num-ps 0
        --max-steps 10 --checkpoint-every 10 --summaries false)
run 1 "$SCRATCH/same1" --allreduce mpi
run 2 "$SCRATCH/same_none2" --allreduce none
close "$SCRATCH/same1" "$SCRATCH/same_none2" 10 1e-6
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --mode sync --num-ps 0
        --max-steps 10 --checkpoint-every 10 --summaries false)

echo "== 6. bad values"
cases=0
expect_error 2 "--wire-dtype|int8" "${COMMON[@]}" --run-dir "$SCRATCH/bad1" --wire-dtype int8
[[ $last_rc -eq 2 ]] || fail "exit $last_rc, expected 2"
expect_error 2 "--allreduce|nccl needs GPU" "${COMMON[@]}" --run-dir "$SCRATCH/bad3" --device cpu \
  --allreduce nccl
expect_error 2 "--allreduce|ring" "${COMMON[@]}" --run-dir "$SCRATCH/bad4" --allreduce ring
expect_error 2 "--allreduce|none|--mode sync --num-ps 0" --config "$SCRATCH/job.ini" --train-data \
  "$SCRATCH/train.h5" --mode async --num-ps 1 --max-steps 4 --run-dir "$SCRATCH/bad5" --allreduce none
expect_error 2 "--allreduce|none|--pipeline-stages" "${COMMON[@]}" --run-dir "$SCRATCH/bad6" \
  --allreduce none --pipeline-stages 2
# none sums nothing: a wire, buckets or a link for its sum are refused, not silently ignored (and
# results.json recorded --wire-dtype bf16 though nothing was sent). Their defaults train (5.).
for opt in "--wire-dtype bf16" "--bucket-mb 1" "--bucket-link hdr-ib"; do
  read -ra given <<<"$opt"
  expect_error 2 "option ${given[0]}:|--allreduce none sums nothing" "${COMMON[@]}" \
    --run-dir "$SCRATCH/bad7" --allreduce none "${given[@]}"
  [[ $last_rc -eq 2 ]] || fail "$opt with --allreduce none: exit $last_rc, expected 2"
done
[[ ! -e $SCRATCH/bad7 ]] || fail "a refused --allreduce none run created its run dir"
echo "test_allreduce_variants: OK"
