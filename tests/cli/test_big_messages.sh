#!/usr/bin/env bash
# tests/cli/test_big_messages.sh — parameter-server messages of any size: the ps protocol cuts every
# shard into chunks (ps/protocol.hpp), so a shard past 2 GiB travels as chunks of at most
# --ps-chunk-kb; a chunk above the MPI count limit goes through comm/big_message's derived
# datatype. Both are forced small here so the test stays small:
#  1. sync through the ps (1 ps + 2 workers, deterministic), 2 epochs of synthetic 1x28x28:10 data:
#     a run with --ps-chunk-kb 1 (256-float chunks: ~1,600 per part of the CNN's shard, the last
#     one partial) and a run with the test-only DTRAIN_TEST_MAX_MPI_COUNT=4096 (every 128 KiB+
#     chunk one derived datatype; one "# big messages" line per rank) end with exactly the
#     checkpoint (parameters, optimizer and model state) and test loss of a normal run.
#  2. async, 2 ps + 2 workers (two shards), 5 KiB chunks above the 4096-byte limit (each one a
#     derived datatype of a block and a remainder): completes with a finite loss,
#     every rank on the derived path.
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

# check_big_lines LOG RANKS: one "# big messages" line per rank, naming the lowered limit.
check_big_lines() {
  local log=$1 ranks=$2
  local n
  n=$(grep -c '^# big messages: ' "$log" || true)
  [[ $n -eq $ranks ]] || { cat "$log"; fail "$log: $n '# big messages' lines, want one per rank ($ranks)"; }
  grep '^# big messages: ' "$log" | grep -vq 'count limit 4096: a lowered test limit' &&
    { cat "$log"; fail "$log: a '# big messages' line does not name the 4096-byte test limit"; }
  echo "   $log: $n ranks on the derived-datatype path"
}

echo "== 1. sync through the ps: 1 KiB chunks and a 4096-byte count limit change no bit"
train sync 3 "" --mode sync --num-ps 1
train sync-chunks 3 "" --mode sync --num-ps 1 --ps-chunk-kb 1
train sync-low 3 4096 --mode sync --num-ps 1
! grep -q '^# big messages' "$SCRATCH/sync.log" || fail "the normal run used derived datatypes"
! grep -q '^# big messages' "$SCRATCH/sync-chunks.log" || fail "1 KiB chunks used derived datatypes"
P=$(params "$SCRATCH/sync.log")
[[ $P -gt 1024 && $((P % 256)) -ne 0 ]] ||
  fail "parameter count '$P' not found in the log, or not one that leaves a partial 1 KiB chunk"
check_big_lines "$SCRATCH/sync-low.log" 3
step=$(json_get "$SCRATCH/sync/results.json" global_step)
[[ $step -eq 8 ]] || fail "sync: global_step $step, want 8 (2 epochs x 4 steps)"
a=$(json_get "$SCRATCH/sync/results.json" test_loss)
for run in sync-chunks sync-low; do
  compare "$SCRATCH/sync" "$SCRATCH/$run" "$step"
  b=$(json_get "$SCRATCH/$run/results.json" test_loss)
  [[ $a == "$b" ]] || fail "test loss $a (normal) vs $b ($run)"
done
echo "   test loss $a in all three runs"

echo "== 2. async, 2 ps + 2 workers, 5 KiB chunks above a 4096-byte count limit"
train async-low 4 4096 --mode async --num-ps 2 --ps-chunk-kb 5
check_big_lines "$SCRATCH/async-low.log" 4
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
