#!/usr/bin/env bash
# Benchmark: what a gradient exchange overlapped with backward hides (CPU).
# Trains JOB (default jobs/vgg16_imagenet.ini: 553 MB of gradients per step, synthetic data) with
# WORKERS (default 2) workers, twice in the same script. MODE=sync (default, allreduce):
#   after     --bucket-mb 0 --overlap false: one allreduce after backward (the pre-bucket path)
#   overlap   --bucket-mb $BUCKET_MB (default 25) with buckets starting during backward
# MODE=async or MODE=sync-ps (1 ps + WORKERS workers: --mode async / sync --num-ps 1):
#   after     --overlap false: the push-pull after backward
#   overlap   --overlap true: each push chunk leaves as soon as backward has made it
# and prints, per run, the step anatomy (ms per step: data, compute, exposed communication,
# optimizer, averaged over workers), ms/step and samples/s, then the fraction of the exposed
# communication that the overlap hid: 1 − exposed(overlap) / exposed(after).
# Usage: tests/benchmarks/overlap.sh [JOB] [extra dtrain options...]; env STEPS (default 8),
# WORKERS, BATCH (default 4), BUCKET_MB, OUT (run dirs, default /tmp/dtrain-overlap), DTRAIN (the
# binary, default build/bin/dtrain).
set -euo pipefail
cd "$(dirname "$0")/../.."
job=${1:-jobs/vgg16_imagenet.ini}
shift || true
dtrain=${DTRAIN:-build/bin/dtrain}
[ -x "$dtrain" ] || { echo "overlap: build dtrain first (.ci/build.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
out=${OUT:-/tmp/dtrain-overlap}
mkdir -p "$out"
steps=${STEPS:-8} workers=${WORKERS:-2} batch=${BATCH:-4} mode=${MODE:-sync}
case $mode in
  sync) np=$workers ps="" cluster=(--mode sync --num-ps 0) ;;
  async) np=$((workers + 1)) ps=" + 1 ps" cluster=(--mode async --num-ps 1) ;;
  sync-ps) np=$((workers + 1)) ps=" + 1 ps" cluster=(--mode sync --num-ps 1) ;;
  *) echo "overlap: MODE must be sync, async or sync-ps, got '$mode'" >&2; exit 2 ;;
esac
run() {  # run NAME ARGS...
  local name=$1
  shift
  rm -rf "${out:?}/$name"
  mpirun --bind-to none --oversubscribe -np "$np" "$dtrain" --config "$job" "${cluster[@]}" \
    --batch-size "$batch" --max-steps "$steps" --log-every "$steps" --run-dir "$out/$name" \
    "$@" >"$out/$name.log" 2>&1 || { tail -20 "$out/$name.log"; exit 1; }
}
echo "# $job: $mode, $workers workers$ps, batch $batch per worker, $steps steps, $(nproc) cores"
if [ "$mode" = sync ]; then
  run after --bucket-mb 0 --overlap false "$@"
  run overlap --bucket-mb "${BUCKET_MB:-25}" "$@"
else
  run after --overlap false "$@"
  run overlap --overlap true "$@"
fi
/usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rows = {}
for name in ("after", "overlap"):
    r = json.load(open(f"{out}/{name}/results.json"))
    rows[name] = r
    step = r["step_ms_p50"]  # a worker's step (async: global steps count every worker's)
    print(f"{name:8s} data {r['step_data_ms']:8.1f} | compute {r['step_compute_ms']:8.1f} | "
          f"exposed comm {r['step_exposed_comm_ms']:8.1f} | optimizer {r['step_optimizer_ms']:7.1f} "
          f"ms/step | step p50 {step:8.1f} ms | {r['samples_per_sec']:.2f} samples/s")
a, o = rows["after"], rows["overlap"]
hidden = 1 - o["step_exposed_comm_ms"] / a["step_exposed_comm_ms"] if a["step_exposed_comm_ms"] > 0 else 0
print(f"hidden: {100 * hidden:.1f}% of the exposed communication; samples/s x"
      f"{o['samples_per_sec'] / a['samples_per_sec']:.3f}")
PY
