#!/usr/bin/env bash
# docs/results/threads/oversubscribe.sh — the Fashion-MNIST CNN job (sync allreduce, no test set)
# with each rank's OpenMP threads at dtrain's default (--threads 0: the node's cores over its
# ranks) and at more threads than the node has cores, alternating REPEATS (default 3) times:
# 2 ranks with --threads 0 and 2 (and 2 again with OMP_WAIT_POLICY=passive: idle OpenMP threads
# sleep at once instead of spinning first), one rank with --threads 2 and 16. Prints one line a
# run with the run's samples/s (results.json). Run from the repository root after building.
set -euo pipefail
cd "$(dirname "$0")/../../.."
repeats=${REPEATS:-3}
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/dtrain-threads.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "# $(date -u +%FT%TZ) $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg), dtrain $(git describe --always --dirty)"
# run NP THREADS STEPS [POLICY]: one run (OMP_WAIT_POLICY=POLICY if given), its samples/s.
run() {
  rm -rf "$work/run"
  env ${4:+OMP_WAIT_POLICY=$4} mpirun --bind-to none ${4:+-x OMP_WAIT_POLICY} -np "$1" build/bin/dtrain --config jobs/fashion_mnist_cnn.ini --mode sync \
    --num-ps 0 --threads "$2" --max-steps "$3" --test-data "" --summaries false \
    --run-dir "$work/run" >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
  printf '%s ranks, --threads %s%s: %s samples/s\n' "$1" "$2" "${4:+, OMP_WAIT_POLICY=$4}" \
    "$(sed -n -E 's/.*"samples_per_sec": ([0-9.]+).*/\1/p' "$work/run/results.json")"
}
for ((r = 1; r <= repeats; ++r)); do
  run 2 0 200; run 2 2 200; run 2 2 200 passive; run 1 2 40; run 1 16 40
done
