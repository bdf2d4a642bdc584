#!/usr/bin/env bash
# tests/cli/test_big_messages.sh — parameter-server messages through comm/big_message's derived-
# datatype path, forced with the test-only DTRAIN_TEST_MAX_MPI_COUNT=4096 (every ps message of the
# CNN, 1.6-5 MB, is then one derived datatype of ~400-1200 blocks plus a remainder):
#  1. sync through the ps (1 ps + 2 workers, deterministic), 2 epochs of synthetic 1x28x28:10 data:
#     the lowered-limit run ends with exactly the checkpoint (parameters, optimizer and model state)
#     and test loss of a normal run; the lowered run's log shows every rank took the derived path
#     (one "# big messages" line per rank, the ps's for the chief's LOAD-sized receive of
#     48 + 3 x 4 x P bytes), the normal run's shows none.
#  2. async, 2 ps + 2 workers (two shards), lowered limit: completes with a finite loss, every rank
#     on the derived path.
set -euo pipefail
source "$(dirname "$0")/common.sh"

CNN=${SRC:?set SRC to the repository root}/jobs/fashion_mnist_cnn.ini
COMMON=(--config "$CNN" --train-data "" --test-data "" --synthetic 1x28x28:10
        --synthetic-samples 512 --epochs 2 --timeout 60)

# train NAME NP LIMIT ARGS...: a run into $SCRATCH/NAME (log NAME.log) that must succeed; LIMIT is
# DTRAIN_TEST_MAX_MPI_COUNT ("" : unset).
train() {
  local name=$1 np=$2 limit=$3
  shift 3
  local env=()
  [[ -n $limit ]] && env=(-x DTRAIN_TEST_MAX_MPI_COUNT="$limit")
  timeout 300 "$MPIEXEC" -n "$np" "${env[@]}" "$DTRAIN" "${COMMON[@]}" --run-dir "$SCRATCH/$name" "$@" \
    >"$SCRATCH/$name.log" 2>&1 || { cat "$SCRATCH/$name.log"; fail "$name: dtrain failed"; }
}

# params LOG: the model's parameter count from the chief's model table.
params() {
  sed -n 's/^# model: .*classes, \([0-9]*\) parameters.*/\1/p' "$1"
}

# check_big_lines LOG RANKS PS_BYTES: one "# big messages" line per rank, naming the lowered limit,
# and one of them (a ps) for a receive of PS_BYTES bytes.
check_big_lines() {
  local log=$1 ranks=$2 ps_bytes=$3
  local n
  n=$(grep -c '^# big messages: ' "$log" || true)
  [[ $n -eq $ranks ]] || { cat "$log"; fail "$log: $n '# big messages' lines, want one per rank ($ranks)"; }
  grep '^# big messages: ' "$log" | grep -vq 'count limit 4096: a lowered test limit' &&
    { cat "$log"; fail "$log: a '# big messages' line does not name the 4096-byte test limit"; }
  grep -q "^# big messages: a receive of up to $ps_bytes bytes posted as one derived datatype" "$log" ||
    { cat "$log"; fail "$log: no ps line for a receive of $ps_bytes bytes (header + params, m, v)"; }
  echo "   $log: $n ranks on the derived-datatype path"
}

echo "== 1. sync through the ps: a 4096-byte count limit changes no bit"
train sync 3 "" --mode sync --num-ps 1
train sync-low 3 4096 --mode sync --num-ps 1
! grep -q '^# big messages' "$SCRATCH/sync.log" || fail "the normal run used derived datatypes"
P=$(params "$SCRATCH/sync.log")
[[ $P -gt 4096 ]] || fail "parameter count '$P' not found in the log (or too small to need blocks)"
check_big_lines "$SCRATCH/sync-low.log" 3 $((48 + 3 * 4 * P))
step=$(json_get "$SCRATCH/sync/results.json" global_step)
[[ $step -eq 8 ]] || fail "sync: global_step $step, want 8 (2 epochs x 4 steps)"
compare "$SCRATCH/sync" "$SCRATCH/sync-low" "$step"
a=$(json_get "$SCRATCH/sync/results.json" test_loss)
b=$(json_get "$SCRATCH/sync-low/results.json" test_loss)
[[ $a == "$b" ]] || fail "test loss $a (normal) vs $b (4096-byte limit)"
echo "   test loss $a in both runs"

echo "== 2. async, 2 ps + 2 workers, 4096-byte count limit"
train async-low 4 4096 --mode async --num-ps 2
# Two shards of P/2 floats (P is even here; sharding.hpp: sizes differ by at most one).
check_big_lines "$SCRATCH/async-low.log" 4 $((48 + 3 * 4 * ((P + 1) / 2)))
"$PY" - "$SCRATCH/async-low/results.json" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))
assert r["stopped_by"] == "completed" and r["epochs_completed"] == 2, r["stopped_by"]
assert r["num_ps"] == 2 and r["global_step"] == 16, (r["num_ps"], r["global_step"])  # 2 x 4 pushes x 2 epochs
for k in ("test_loss", "train_loss"):
    assert math.isfinite(r[k]), f"{k} = {r[k]}"
print(f"   {r['global_step']} pushes, test loss {r['test_loss']:.4f}, train loss {r['train_loss']:.4f}")
PY
echo "PASS"
