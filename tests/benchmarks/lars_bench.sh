#!/usr/bin/env bash
# Large-batch check: ResNet-20 (jobs/resnet20_cifar.ini) on Fashion-MNIST, sync allreduce over
# WORKERS workers, the same epochs for three runs, one after the other:
#   1. small batch: the job as written (64 per worker, --lr 0.05 per worker scaled linearly,
#      momentum 0.9, --warmup-steps 200, cosine to 0);
#   2. 4x batch, momentum: 256 per worker, --lr 0.2 (the linear scaling rule, Goyal et al. 2017),
#      warm-up over the same samples (WARMUP steps, default 50 = 200 × 128 / 512), cosine;
#   3. 4x batch, LARS (You et al. 2017): as 2 with --optimizer lars --lars-eta LARS_ETA.
# Prints one row per run (global batch, optimizer, steps, final test top-1 and top-5 accuracy,
# wall seconds) and each large-batch run's distance to the small batch in points.
#
# Usage: tests/benchmarks/lars_bench.sh [extra dtrain options for all three runs]
# Env:   EPOCHS (default: the job's), WORKERS (default 2), THREADS (per rank, default
#        cores / WORKERS), LARS_ETA (default 0.02), WARMUP (the 4x runs' warm-up steps, default
#        50: the job's warm-up in samples; 118 is one epoch), OUT (default runs/lars_bench),
#        DTRAIN (the binary, default build/bin/dtrain).
# Needs a built dtrain and the converted data (jobs/run_fashion_mnist.sh does both).
set -euo pipefail
cd "$(dirname "$0")/../.."
job=jobs/resnet20_cifar.ini
workers=${WORKERS:-2}
threads=${THREADS:-$(( $(nproc) / workers > 0 ? $(nproc) / workers : 1 ))}
eta=${LARS_ETA:-0.02}
out=${OUT:-runs/lars_bench}
epochs=${EPOCHS:-$(grep -E '^\s*epochs\s*=' "$job" | head -1 | sed 's/.*=\s*//')}
dtrain=${DTRAIN:-build/bin/dtrain}
[ -x "$dtrain" ] || { echo "lars_bench: build dtrain first" >&2; exit 1; }
[ -f data/fashion_mnist/train.h5 ] ||
  { echo "lars_bench: convert the data first (jobs/run_fashion_mnist.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"

# run NAME OPTIONS...: one sync allreduce run into $out/NAME (log: $out/NAME.log).
run() {
  local name=$1
  shift
  local t0
  t0=$(date +%s)
  echo "# $name: mpirun -np $workers $dtrain --config $job --mode sync --num-ps 0" \
    "--epochs $epochs $*" >&2
  rm -rf "${out:?}/$name"
  mpirun --bind-to none --oversubscribe -np "$workers" "$dtrain" --config "$job" \
    --mode sync --num-ps 0 --threads "$threads" --epochs "$epochs" --run-dir "$out/$name" "$@" \
    >"$out/$name.log" 2>&1 ||
    { tail -20 "$out/$name.log" >&2; echo "lars_bench: $name failed" >&2; exit 1; }
  echo $(( $(date +%s) - t0 )) >"$out/$name.seconds"
}

big=(--batch-size 256 --lr 0.2 --warmup-steps "${WARMUP:-50}")
run small "$@"
run momentum4x "${big[@]}" "$@"
run lars4x "${big[@]}" --optimizer lars --lars-eta "$eta" "$@"

/usr/bin/python3 - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
rows = []
for name in ("small", "momentum4x", "lars4x"):
    r = json.load(open(f"{out}/{name}/results.json"))
    secs = int(open(f"{out}/{name}.seconds").read())
    rows.append((name, r["global_batch_size"], r["global_step"], r["test_accuracy"],
                 r.get("test_top5"), secs))
base = rows[0][3]
print("| run | global batch | steps | test accuracy | test top-5 | vs small batch | wall s |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, gb, steps, acc, top5, secs in rows:
    diff = "" if name == "small" else f"{100 * (acc - base):+.2f} points"
    t5 = "" if top5 is None else f"{top5:.4f}"
    print(f"| {name} | {gb} | {steps} | {acc:.4f} | {t5} | {diff} | {secs} |")
EOF
