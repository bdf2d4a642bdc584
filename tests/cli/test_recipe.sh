#!/usr/bin/env bash
# tests/cli/test_recipe.sh — recipe options of issue 10, item 4, through the dtrain binary:
# - --no-weight-decay-on bias,bn: the async ps applies it on its own shard exactly as a sync worker on
#   the whole buffer (1 worker: async with 2 ps, cut through the tensors, with --async-momentum
#   as-given — DANA would answer with the look-ahead position — ends bit-identical to sync),
#   and it changes the result (not a no-op);
# - --label-smoothing: trains in both modes; the smoothed loss stays above the plain one (its floor
#   is the entropy of the smoothed target);
# - bad values: exit 2 naming the option.
set -euo pipefail
source "$(dirname "$0")/common.sh"

make_data train 512 --seed 21 --template-seed 9
make_data test 128 --seed 22 --template-seed 9
write_job "$SCRATCH/job.ini"
# --threads 1: oneDNN sums in an order that depends on the thread count (cores / ranks).
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --max-steps 20 --weight-decay 0.05
        --threads 1)
SYNC=(--mode sync --num-ps 0)

echo "== --no-weight-decay-on bias,bn: sync (1 worker) and async (2 ps + 1 worker) agree bit for bit"
run 1 "$SCRATCH/sync" "${SYNC[@]}" --no-weight-decay-on bias,bn
run 3 "$SCRATCH/async" --mode async --num-ps 2 --no-weight-decay-on bias,bn --async-momentum as-given
grep -q "ps 1" "$SCRATCH/async.log" || fail "no second ps in the shard table"
compare "$SCRATCH/sync" "$SCRATCH/async" 20
run 1 "$SCRATCH/decay-all" "${SYNC[@]}"
"$PY" - "$SCRATCH/sync" "$SCRATCH/decay-all" <<'PY' || fail "--no-weight-decay-on changed nothing"
import sys, h5py, numpy as np
a, b = (h5py.File(f"{d}/ckpt-0000000020.h5", "r")["params"][()] for d in sys.argv[1:])
assert not np.array_equal(a, b)
print("excluding biases and batchnorm parameters from decay changes the parameters")
PY

echo "== --label-smoothing 0.2: trains in both modes, loss above the plain one"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5")
run 2 "$SCRATCH/plain" "${SYNC[@]}"
run 2 "$SCRATCH/smooth" "${SYNC[@]}" --label-smoothing 0.2
run 3 "$SCRATCH/smooth-async" --mode async --num-ps 1 --label-smoothing 0.2
"$PY" - "$SCRATCH" <<'PY' || fail "label smoothing results"
import json, math, sys
r = {k: json.load(open(f"{sys.argv[1]}/{k}/results.json")) for k in ("plain", "smooth", "smooth-async")}
floor = -(0.85 * math.log(0.85) + 3 * 0.05 * math.log(0.05))  # entropy of q for K = 4, eps = 0.2
for k in ("smooth", "smooth-async"):
    assert r[k]["test_accuracy"] > 0.9, (k, r[k]["test_accuracy"])
    assert r[k]["test_loss"] >= floor - 1e-3, (k, r[k]["test_loss"], floor)
assert r["plain"]["test_loss"] < floor, r["plain"]["test_loss"]
print(f"test loss plain {r['plain']['test_loss']:.4f}, smoothed {r['smooth']['test_loss']:.4f} "
      f"(floor {floor:.4f}), async {r['smooth-async']['test_loss']:.4f}")
PY
grep -q "^label-smoothing = 0.2" "$SCRATCH/smooth/config.ini" || fail "config.ini lacks label-smoothing"

echo "== bad values"
bad() { expect_error "$@"; [[ $last_rc -eq 2 ]] || fail "exit $last_rc (want 2)"; }
bad 2 "--label-smoothing|[0, 1)" "${COMMON[@]}" "${SYNC[@]}" --run-dir "$SCRATCH/bad" --label-smoothing 1
bad 2 "--no-weight-decay-on|weights|bias, bn" "${COMMON[@]}" "${SYNC[@]}" --run-dir "$SCRATCH/bad" \
  --no-weight-decay-on bias,weights
echo "PASS"
