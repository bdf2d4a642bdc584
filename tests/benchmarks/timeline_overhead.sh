#!/usr/bin/env bash
# Benchmark: what --timeline costs. Trains JOB (default jobs/fashion_mnist_cnn.ini, real
# Fashion-MNIST) sync with 2 workers for STEPS (default 300) global steps, PAIRS times (default 6)
# with and without --timeline, alternating which goes first, and prints each pair's samples/s and
# ratio, the median ratio (on/off: 1.00 = free) and the spans recorded per step.
# Usage: tests/benchmarks/timeline_overhead.sh [JOB]; env PAIRS, STEPS, OUT (default
# /tmp/dtrain-timeline). Needs the converted data (jobs/run_fashion_mnist.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
job=${1:-jobs/fashion_mnist_cnn.ini}
[ -x build/bin/dtrain ] || { echo "timeline_overhead: build dtrain first (.ci/build.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
out=${OUT:-/tmp/dtrain-timeline}
mkdir -p "$out"
pairs=${PAIRS:-6} steps=${STEPS:-300}
sps() {  # sps NAME ARGS...: one run, prints its samples/s
  local name=$1
  shift
  rm -rf "${out:?}/$name"
  mpirun --bind-to none -np 2 build/bin/dtrain --config "$job" --mode sync --num-ps 0 \
    --max-steps "$steps" --run-dir "$out/$name" "$@" >"$out/$name.log" 2>&1 || { tail "$out/$name.log"; exit 1; }
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["samples_per_sec"])' "$out/$name/results.json"
}
ratios=()
for i in $(seq "$pairs"); do
  if (( i % 2 )); then on=$(sps on$i --timeline); off=$(sps off$i); else off=$(sps off$i); on=$(sps on$i --timeline); fi
  r=$(/usr/bin/python3 -c "print(f'{$on / $off:.4f}')")
  ratios+=("$r")
  echo "pair $i: on $on off $off samples/s, on/off $r"
done
/usr/bin/python3 - "$out/on1/timeline.json" "$steps" "${ratios[@]}" <<'PY'
import json, statistics, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
steps, ratios = int(sys.argv[2]), [float(x) for x in sys.argv[3:]]
spans = sum(1 for e in ev if e["ph"] == "X")
print(f"median on/off {statistics.median(ratios):.4f} (min {min(ratios):.4f}, max {max(ratios):.4f}, "
      f"{len(ratios)} pairs); {spans / steps / 2:.1f} spans per worker and step")
PY
