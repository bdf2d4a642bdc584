#!/usr/bin/env bash
# A/B of two dtrain builds on the same sync job, alternating: ResNet-50, synthetic 3x224x224, 2 CPU
# workers (global batch 8, 4 per worker), --allreduce hierarchical, STEPS (default 12) steps; prints each run's
# figures without its first step. Usage: ab_training.sh BUILD_A BUILD_B PAIRS OUT_DIR
set -euo pipefail
a=$1 b=$2 pairs=$3 out=$4
mkdir -p "$out"
run() {  # run BIN DIR
  mpirun --oversubscribe --bind-to none -np 2 "$1" --config jobs/resnet50_imagenet.ini \
    --synthetic 3x224x224:1000 --mode sync --num-ps 0 --allreduce hierarchical --threads 1 \
    --global-batch-size 8 --max-steps "${STEPS:-12}" --summaries false --checkpoint-every 0 \
    --run-dir "$2" >"$2.log" 2>&1
  /usr/bin/python3 - "$2/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
w = r["step_compute_ms_per_worker_after_first_step"]
print(f"samples/s {r['samples_per_sec_after_first_step']:.3f}  compute ms/step "
      f"{r['step_compute_ms_after_first_step']:.1f} (workers {', '.join(f'{x:.1f}' for x in w)})  "
      f"exposed comm ms/step {r['step_exposed_comm_ms_after_first_step']:.1f}  "
      f"optimizer ms/step {r['step_optimizer_ms_after_first_step']:.1f}")
PY
}
for ((i = 1; i <= pairs; i++)); do
  for side in a b; do
    bin=$a; [[ $side == b ]] && bin=$b
    echo -n "pair $i $side: "
    run "$bin" "$out/$side$i"
  done
done
