#!/usr/bin/env bash
# tests/cli/test_num_ps_auto.sh — `--num-ps auto` (train/ps_count.hpp) end to end:
#   1. --dry-run prints the chosen K and why under the role table, and the role table has K ps:
#      a CNN (compute-heavy per byte) gets 1 ps of 5 ranks, a wide MLP at batch 2
#      (gradient-heavy) several; K is recomputed here from the printed inputs by the closed form
#      K = clamp(ceil(N·rho / (1 + rho)), 1, N − 1);
#   2. a 16-bit push wire halves the push bytes the rule weighs (rho falls by a quarter);
#   3. a short async run with --num-ps auto trains with that K (results.json num_ps);
#   4. one rank cannot be split: one error naming the option.
set -euo pipefail
source "$(dirname "$0")/common.sh"
make_data train 256 --seed 61
write_job "$SCRATCH/tiny.ini"
# model_job FILE LAYER...: the tiny job with these layers.
model_job() {
  local file=$1 layers=""
  shift
  for l in "$@"; do layers+="\\nlayer = $l"; done
  sed -e '/^layer = /d' -e "s/^\\[model\\]/[model]$layers/" "$SCRATCH/tiny.ini" >"$file"
  grep -q "^layer = " "$file" || fail "$file: no layers"
}
# Convolutions: ~290 flops a parameter a sample; a wide dense layer: 6.
model_job "$SCRATCH/cnn.ini" "conv filters=32 kernel=3 pad=1" relu "conv filters=32 kernel=3 pad=1" \
  relu "maxpool kernel=2" flatten dense
model_job "$SCRATCH/mlp.ini" flatten "dense units=512" relu dense
grep -q "units=512" "$SCRATCH/mlp.ini" || fail "mlp.ini was not written"

# dry NAME NP ARGS...: a --dry-run with --num-ps auto into $SCRATCH/NAME.log.
dry() {
  local name=$1 np=$2
  shift 2
  timeout 120 "$MPIEXEC" -n "$np" "$DTRAIN" --train-data "$SCRATCH/train.h5" --num-ps auto --dry-run \
    "$@" >"$SCRATCH/$name.log" 2>&1 || { cat "$SCRATCH/$name.log"; fail "dry run $name failed"; }
}
# check NAME NP: the printed K is the closed form's of the printed inputs, and the role table's;
# prints K.
check() {
  "$PY" - "$SCRATCH/$1.log" "$2" <<'PY'
import math, re, sys
text, n = open(sys.argv[1]).read(), int(sys.argv[2])
m = re.search(r"--num-ps auto: (\d+) ps for (\d+) workers: .*push ([\d.e+]+) \+ reply ([\d.e+]+) "
              r"bytes\) / \(([\d.e+]+) flops/sample × batch ([\d.e+]+)\) = ([\d.e+-]+), beta "
              r"([\d.]+)", text)
assert m, text
k, w = int(m[1]), int(m[2])
push, reply, flops, batch, rho, beta = map(float, m.group(3, 4, 5, 6, 7, 8))
assert abs(rho - beta * (push + reply) / (flops * batch)) <= 1e-2 * rho, (rho, m[0])  # %.3g
want = min(max(math.ceil(n * rho / (1 + rho) - 1e-9), 1), n - 1)
assert (k, w) == (want, n - want), (k, w, want)
table = re.search(r"# (\d+) ranks on \d+ node\(s\): (\d+) ps, (\d+) workers", text)
assert table and (int(table[2]), int(table[3])) == (k, w), table and table[0]
print(k)
PY
}

echo "== 1. the CNN gets 1 ps of 5 ranks, a wide MLP at batch 2 more"
dry cnn 5 --config "$SCRATCH/cnn.ini"
[[ $(check cnn 5) == 1 ]] || fail "the tiny CNN did not get 1 ps"
dry mlp 5 --config "$SCRATCH/mlp.ini" --batch-size 2
k_mlp=$(check mlp 5)
[[ $k_mlp -ge 2 ]] || fail "the MLP at batch 2 got $k_mlp ps (expected several)"
echo "   CNN: 1 ps; MLP at batch 2: $k_mlp ps of 5 ranks"

echo "== 2. a bf16 push wire weighs half the push bytes"
dry mlp16 5 --config "$SCRATCH/mlp.ini" --batch-size 2 --wire-dtype bf16
check mlp16 5 >/dev/null
"$PY" - "$SCRATCH/mlp.log" "$SCRATCH/mlp16.log" <<'PY'
import re, sys
rho = [float(re.search(r"\) = ([\d.e+-]+), beta", open(p).read())[1]) for p in sys.argv[1:]]
assert abs(rho[1] / rho[0] - 0.75) < 1e-3, rho  # (2 + 4) / (4 + 4) bytes a parameter
print(f"   rho fp32 {rho[0]:.3g}, bf16 {rho[1]:.3g}")
PY

echo "== 3. an async run with --num-ps auto trains with that K"
timeout 120 "$MPIEXEC" -n 5 "$DTRAIN" --config "$SCRATCH/mlp.ini" --train-data "$SCRATCH/train.h5" \
  --batch-size 2 --num-ps auto --max-steps 12 --summaries false --run-dir "$SCRATCH/run" \
  >"$SCRATCH/run.log" 2>&1 || { cat "$SCRATCH/run.log"; fail "the run failed"; }
[[ $(json_get "$SCRATCH/run/results.json" num_ps) == "$k_mlp" ]] || fail "results.json num_ps is not $k_mlp"
grep -q -- "--num-ps auto: $k_mlp ps" "$SCRATCH/run.log" || fail "the run's log lacks the choice"
grep -q "^num-ps = auto" "$SCRATCH/run/config.ini" || fail "config.ini lacks num-ps = auto"

echo "== 4. one rank cannot be split"
expect_error 0 "--num-ps auto|2 MPI ranks" --config "$SCRATCH/cnn.ini" --train-data \
  "$SCRATCH/train.h5" --num-ps auto --dry-run
echo "test_num_ps_auto: OK"
