#!/usr/bin/env bash
# tests/cli/test_fuzz_e2e.sh — end-to-end fuzz through the dtrain binary (`mpiexec -n 2`, sync):
# DTRAIN_FUZZ_RUNS runs (default 20), half with a seeded random mutation of a valid HDF5 dataset
# (byte flips, zeroed runs, truncation), half with a mutated job file (key/value edits, deletions,
# garbage lines). Each run must end within 60 s (no hang) with exit 0, or exit 2 and at least one
# "dtrain: error:" line — never a signal (exit >= 128 or mpirun's "exited on signal"), never another
# code. The bulk of the fuzzing is in-process: tests/unit/test_fuzz_inputs.cpp. More runs:
# tests/fuzz/fuzz.sh.
set -euo pipefail
source "$(dirname "$0")/common.sh"
RUNS=${DTRAIN_FUZZ_RUNS:-20}
SEED0=${DTRAIN_FUZZ_SEED:-0}

make_data good 96 --seed 3
make_data goodf 96 --seed 4 --dtype float32
write_job "$SCRATCH/job.ini"

mutate() {  # mutate KIND SEED IN OUT
  "$PY" - "$@" <<'PY'
import random, sys
kind, seed, src, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
r = random.Random(seed)
data = bytearray(open(src, "rb").read())
if kind == "data":
    how = r.randrange(4)
    if how == 0:
        for _ in range(r.randint(1, 16)):
            data[r.randrange(len(data))] ^= r.randint(1, 255)
    elif how == 1:
        for _ in range(r.randint(1, 4)):
            data[r.randrange(min(2048, len(data)))] ^= r.randint(1, 255)
    elif how == 2:
        at = r.randrange(len(data)); n = r.randint(1, 64)
        data[at:at + n] = bytes(min(n, len(data) - at))
    else:
        del data[r.randrange(len(data)):]
else:
    tokens = ["", "-1", "0", "1e999", "nan", "abc", "99999999999999999999", "=", "[", "true",
              "dense units=-3", "kernel=0", "rate=1.5", "stride=0", "\xff"]
    lines = data.decode("utf-8", "replace").split("\n")
    for _ in range(r.randint(1, 3)):
        i = r.randrange(len(lines)); l = lines[i]; how = r.randrange(6)
        if how == 0: del lines[i]
        elif how == 1: lines.insert(i, l)
        elif how == 2 and "=" in l: lines[i] = l.split("=")[0] + "= " + r.choice(tokens)
        elif how == 3 and "=" in l: lines[i] = r.choice(tokens) + " =" + l.split("=", 1)[1]
        elif how == 4: lines.insert(i, "".join(chr(r.randint(32, 126)) for _ in range(r.randint(0, 30))))
        else: lines[i] = l + " " + r.choice(tokens)
    data = bytearray("\n".join(lines).encode("utf-8", "replace"))
open(dst, "wb").write(data)
PY
}

declare -A outcome=()
for ((i = 0; i < RUNS; ++i)); do
  seed=$((SEED0 + i))
  data=$SCRATCH/good.h5
  job=$SCRATCH/job.ini
  if ((i % 2 == 0)); then
    base=$SCRATCH/good.h5
    ((i % 4 == 2)) && base=$SCRATCH/goodf.h5
    data=$SCRATCH/fuzz.h5
    mutate data "$seed" "$base" "$data"
    what="dataset seed $seed"
  else
    job=$SCRATCH/fuzz.ini
    mutate job "$seed" "$SCRATCH/job.ini" "$job"
    what="job file seed $seed"
  fi
  rm -rf "$SCRATCH/run"
  log=$SCRATCH/run$i.log
  set +e
  timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" --config "$job" --train-data "$data" --mode sync --num-ps 0 \
    --max-steps 6 --epochs 1 --run-dir "$SCRATCH/run" >"$log" 2>&1
  rc=$?
  set -e
  outcome[$rc]=$((${outcome[$rc]:-0} + 1))
  [[ $rc -ne 124 ]] || { cat "$log"; fail "$what: hang (timeout)"; }
  ! grep -q "exited on signal" "$log" || { cat "$log"; fail "$what: a rank died of a signal"; }
  if [[ $rc -eq 2 ]]; then
    grep -q "dtrain: error:" "$log" || { cat "$log"; fail "$what: exit 2 without a message"; }
  elif [[ $rc -ne 0 ]]; then
    cp "$data" "$SCRATCH/failing-$seed.h5" 2>/dev/null || true
    cp "$job" "$SCRATCH/failing-$seed.ini" 2>/dev/null || true
    cat "$log"
    fail "$what: exit $rc (want 0 or 2); inputs kept as $SCRATCH/failing-$seed.*"
  fi
done
summary=""
for rc in "${!outcome[@]}"; do summary+=" exit $rc: ${outcome[$rc]}"; done
# Still fuzzing: at 10 or more runs both outcomes occur (20 runs: about 13 rejected, 7 trained).
if ((RUNS >= 10)); then
  [[ ${outcome[2]:-0} -gt 0 ]] || fail "no mutated input was rejected ($summary)"
  [[ ${outcome[0]:-0} -gt 0 ]] || fail "no mutated input trained ($summary)"
fi
echo "PASS ($RUNS runs;$summary)"
