#!/usr/bin/env bash
# Benchmark on the lent GPU machine: several ranks sharing its one GPU (--allow-gpu-sharing; the
# sync allreduce with --allreduce mpi: NCCL needs a GPU per rank) and CPU-only ranks on its cores, the Fashion-MNIST CNN
# (jobs/fashion_mnist_cnn.ini, batch 64 per worker), sync and async. Prints one row per
# configuration: workers, ps, device, samples/s (results.json: the whole run's samples / train
# seconds), step p50 ms, exposed communication ms/step, and final test accuracy when EPOCHS is set.
# Usage: bash tests/benchmarks/gpu_share.sh        Env: STEPS (global steps per run, default 600)
set -uo pipefail
cd "$(dirname "$0")/../.."
steps=${STEPS:-600}
cores=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
printf "%-34s %8s %10s %10s %10s\n" configuration ranks samples/s p50_ms exposed_ms
run() {  # NAME NP ARGS...
  local name=$1 np=$2
  shift 2
  if ! mpirun --bind-to none -np "$np" build/bin/dtrain --config jobs/fashion_mnist_cnn.ini \
       --test-data "" --max-steps "$steps" --log-every 100 --run-dir "$tmp/$name" "$@" \
       >"$tmp/$name.log" 2>&1; then
    echo "$name: FAILED"; tail -15 "$tmp/$name.log"; return
  fi
  "${DTRAIN_PYTHON:-python3}" - "$tmp/$name/results.json" "$name" "$np" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<34} {sys.argv[3]:>8} {r['samples_per_sec']:>10.0f} {r['step_ms_p50']:>10.2f} "
      f"{r.get('step_exposed_comm_ms', 0):>10.2f}")
PY
}
gpu=(--device cuda --allow-gpu-sharing)
run gpu-sync-1w 1 --mode sync --num-ps 0 --device cuda
run gpu-sync-2w-shared 2 --mode sync --num-ps 0 "${gpu[@]}" --allreduce mpi
run gpu-sync-4w-shared 4 --mode sync --num-ps 0 "${gpu[@]}" --allreduce mpi
run gpu-async-1ps-3w-shared 4 --mode async --num-ps 1 "${gpu[@]}"
run gpu-async-1ps-7w-shared 8 --mode async --num-ps 1 "${gpu[@]}"
run gpu-syncps-1ps-3w-shared 4 --mode sync --num-ps 1 "${gpu[@]}"
for w in 1 4 8 $((cores - 1)); do
  run "cpu-sync-${w}w" "$w" --mode sync --num-ps 0 --device cpu --threads $((cores / w))
done
run cpu-async-1ps-7w 8 --mode async --num-ps 1 --device cpu --threads $((cores / 8))
run cpu-async-1ps-15w $cores --mode async --num-ps 1 --device cpu --threads 1
