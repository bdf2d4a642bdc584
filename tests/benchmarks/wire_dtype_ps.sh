#!/usr/bin/env bash
# Benchmark: `--wire-dtype` on ps pushes — jobs/fashion_mnist_cnn.ini in async mode, 1 ps + 2
# workers, the same seed, --wire-dtype fp32, bf16 and fp16 one after another. Prints one line per
# run: wire | test accuracy | test loss | samples/s | push bytes a step (results.json
# push_bytes_per_step: the chief's gradient bytes a push, all ps together) | global steps.
# Pushes travel as MPI messages (--ps-shm false; 16-bit on the wire) unless PS_SHM=true (a shared
# ring slot holds the rounded values in 32 bits). Async runs are not bit-reproducible (pushes
# interleave as they arrive), so the accuracies differ by that noise as well as by the wire.
# Env: WIRES (default "fp32 bf16 fp16"), EPOCHS (default: the job's 6), PS_SHM (default false),
#      OUT (run dirs, default /tmp/dtrain-wire-ps), DTRAIN (default build/bin/dtrain). Needs a
#      built dtrain and the converted data (jobs/run_fashion_mnist.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
dtrain=${DTRAIN:-build/bin/dtrain}
[ -x "$dtrain" ] || { echo "wire_dtype_ps: build dtrain first (.ci/build.sh)" >&2; exit 1; }
[ -f data/fashion_mnist/train.h5 ] ||
  { echo "wire_dtype_ps: convert the data first (jobs/run_fashion_mnist.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
out=${OUT:-/tmp/dtrain-wire-ps}
mkdir -p "$out"
epochs=()
[ -n "${EPOCHS:-}" ] && epochs=(--epochs "$EPOCHS")
for w in ${WIRES:-fp32 bf16 fp16}; do
  dir=$out/run-$w
  rm -rf "$dir"
  cmd=(mpirun --bind-to none --oversubscribe -np 3 "$dtrain" --config jobs/fashion_mnist_cnn.ini
       --mode async --num-ps 1 --ps-shm "${PS_SHM:-false}" --wire-dtype "$w" --run-dir "$dir"
       "${epochs[@]}")
  echo "## $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): ${cmd[*]}"
  "${cmd[@]}" >"$dir.log" 2>&1 || { tail -20 "$dir.log"; exit 1; }
  /usr/bin/python3 - "$w" "$dir/results.json" <<'PY'
import json, sys
w, path = sys.argv[1:]
r = json.load(open(path))
print(f"{w} | test accuracy {r['test_accuracy']:.4f} | test loss {r['test_loss']:.4f} | "
      f"{r['samples_per_sec']:.0f} samples/s | {r['push_bytes_per_step']:.0f} push bytes a step | "
      f"{r['global_step']} global steps")
PY
done
