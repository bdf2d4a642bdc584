#!/usr/bin/env bash
# Benchmark: what bucketed gradient exchange overlapped with backward hides (sync allreduce, CPU).
# Trains JOB (default jobs/vgg16_imagenet.ini: 553 MB of gradients per step, synthetic data) with
# WORKERS (default 2) sync workers, twice in the same script:
#   after     --bucket-mb 0 --overlap false: one allreduce after backward (the pre-bucket path)
#   overlap   --bucket-mb $BUCKET_MB (default 25) with buckets starting during backward
# and prints, per run, the step anatomy (ms per step: data, compute, exposed communication,
# optimizer, averaged over workers), ms/step and samples/s, then the fraction of the exposed
# communication that the overlap hid: 1 − exposed(overlap) / exposed(after).
# Usage: tests/benchmarks/overlap.sh [JOB] [extra dtrain options...]; env STEPS (default 8),
# WORKERS, BATCH (default 4), BUCKET_MB, OUT (run dirs, default /tmp/dtrain-overlap).
set -euo pipefail
cd "$(dirname "$0")/../.."
job=${1:-jobs/vgg16_imagenet.ini}
shift || true
[ -x build/bin/dtrain ] || { echo "overlap: build dtrain first (.ci/build.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
out=${OUT:-/tmp/dtrain-overlap}
mkdir -p "$out"
steps=${STEPS:-8} workers=${WORKERS:-2} batch=${BATCH:-4}
run() {  # run NAME ARGS...
  local name=$1
  shift
  rm -rf "${out:?}/$name"
  mpirun --bind-to none --oversubscribe -np "$workers" build/bin/dtrain --config "$job" --mode sync \
    --num-ps 0 --batch-size "$batch" --max-steps "$steps" --log-every "$steps" --run-dir "$out/$name" \
    "$@" >"$out/$name.log" 2>&1 || { tail -20 "$out/$name.log"; exit 1; }
}
echo "# $job: $workers sync workers, batch $batch per worker, $steps steps, $(nproc) cores"
run after --bucket-mb 0 --overlap false "$@"
run overlap --bucket-mb "${BUCKET_MB:-25}" "$@"
/usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rows = {}
for name in ("after", "overlap"):
    r = json.load(open(f"{out}/{name}/results.json"))
    rows[name] = r
    step = 1e3 * r["train_seconds"] / r["global_step"]
    print(f"{name:8s} data {r['step_data_ms']:8.1f} | compute {r['step_compute_ms']:8.1f} | "
          f"exposed comm {r['step_exposed_comm_ms']:8.1f} | optimizer {r['step_optimizer_ms']:7.1f} "
          f"ms/step | step {step:8.1f} ms | {r['samples_per_sec']:.2f} samples/s")
a, o = rows["after"], rows["overlap"]
hidden = 1 - o["step_exposed_comm_ms"] / a["step_exposed_comm_ms"] if a["step_exposed_comm_ms"] > 0 else 0
print(f"hidden: {100 * hidden:.1f}% of the exposed communication; samples/s x"
      f"{o['samples_per_sec'] / a['samples_per_sec']:.3f}")
PY
