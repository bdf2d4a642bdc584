#!/usr/bin/env bash
# docs/results/scaling/2026-11-27/vm-lockstep/ab_lockstep.sh [PAIRS] — ResNet-20 (synthetic
# 3x32x32), 2 workers, global batch 64, 60 steps: the sync run (--allreduce hierarchical) and the
# lock-step run (--allreduce none) alternated PAIRS times (default 3); per run the samples/s,
# compute and exposed communication ms/step after the first step (results.json).
set -euo pipefail
cd "$(dirname "$0")/../../../../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
for ((i = 1; i <= ${1:-3}; i++)); do
  for a in hierarchical none; do
    mpirun -np 2 --bind-to none build/bin/dtrain --config jobs/resnet20_cifar.ini \
      --synthetic 3x32x32:10 --mode sync --num-ps 0 --global-batch-size 64 --max-steps 60 \
      --threads 1 --allreduce "$a" --summaries false --run-dir "$out/$a-$i" >"$out/$a-$i.log" 2>&1
    /usr/bin/python3 - "$out/$a-$i/results.json" "$a" "$i" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"pair {sys.argv[3]} --allreduce {sys.argv[2]:12s} samples/s {r['samples_per_sec_after_first_step']:6.1f}"
      f"  compute ms/step {r['step_compute_ms_after_first_step']:6.1f}"
      f"  exposed comm ms/step {r['step_exposed_comm_ms_after_first_step']:5.1f}")
PY
  done
done
rm -rf "$out"
