#!/usr/bin/env bash
# tests/benchmarks/strong_scaling_models.sh — the strong-scaling sweep of issue 12 on the models
# people scale: ResNet-50 and VGG-16 (jobs/*_imagenet.ini, synthetic 3×224×224 ImageNet-shaped
# data: compute and communication without storage), sync (bucketed allreduce) and async (1 ps),
# a fixed global batch split over 1, 2, 4 ... workers, one OpenMP thread per rank (one core per
# worker), every run training on the same STEPS × GLOBAL_BATCH samples. Each model's table, CSV
# and plot (speedup, efficiency, step anatomy) go to docs/results/scaling/<date>/<model>/ via
# data-tools/run_strong_scaling.sh and data-tools/scaling_report.py.
#
# Usage: tests/benchmarks/strong_scaling_models.sh [MODELS]   (default: "resnet50 vgg16")
# Environment: WORKERS (default "1 2 4"), GLOBAL_BATCH (default 8), STEPS (default 6),
#   OUT (default runs/scaling-models), DOCS (default docs/results/scaling/<today>), MODES (default
#   "sync async"), CEILING=1 (also the host's ceiling: run_strong_scaling.sh --ceiling, and the
#   report's efficiency against it), LOCKSTEP=1 (also each N's sync run with --allreduce none:
#   run_strong_scaling.sh --lockstep, the report's efficiency against lock step), PYTHON (default /usr/bin/python3: the report's interpreter;
#   without matplotlib it writes the table and CSV only), PIN_THREADS=1 (the runs with
#   --pin-threads; the ceiling runs stay unpinned), ARGS (more dtrain options for every run,
#   e.g. ARGS="--wire-dtype bf16": the exchange's 16-bit wire; named in the report's title),
#   KEEP_RUNS=1 (every run's log, results.json and launcher.json into the docs folder as runs.tgz,
#   refreshed after every run).
# On the 2-core development VM, 4 workers (5 ranks with the ps) share 2 cores: those rows measure
# sharing, not scaling. On a 16-core machine: WORKERS="1 2 4 8 12" GLOBAL_BATCH=24
# (the global batch must split evenly over every worker count).
set -euo pipefail
cd "$(dirname "$0")/../.."
models=${1:-"resnet50 vgg16"}
ceiling=() pin=() args=() keep=()
read -r -a args <<<"${ARGS:-}"
[ "${CEILING:-0}" = 1 ] && ceiling=(--ceiling)
[ "${LOCKSTEP:-0}" = 1 ] && ceiling+=(--lockstep)
[ "${PIN_THREADS:-0}" = 1 ] && pin=(--pin-threads)
for m in $models; do
  job=jobs/${m}_imagenet.ini
  [ -f "$job" ] || { echo "strong_scaling_models.sh: no job file $job" >&2; exit 2; }
  out=${OUT:-runs/scaling-models}/$m
  docs=${DOCS:-docs/results/scaling/$(date +%F)}/$m
  mkdir -p "$docs"
  # Every run's log (per-worker step times and anatomy: skew against bandwidth), results.json and
  # launcher.json, the ceiling runs' too, rewritten after every run (a sweep cut short keeps what
  # it finished): unpacked into one folder, sweeps of other worker counts (WORKERS="1 2 4", then
  # "8 12") make one report (scaling_report.py FOLDER), and unpacked into OUT/MODEL a sweep
  # continues where it stopped.
  [ "${KEEP_RUNS:-0}" = 1 ] && keep=(--keep-runs "$docs/runs.tgz")
  bash data-tools/run_strong_scaling.sh --job "$job" --workers "${WORKERS:-1 2 4}" \
    --modes "${MODES:-sync async}" --ps 1 --global-batch "${GLOBAL_BATCH:-8}" --steps "${STEPS:-6}" \
    --out "$out" --no-report "${ceiling[@]}" "${keep[@]}" -- --log-every 1 --summaries false "${pin[@]}" "${args[@]}"
  "${PYTHON:-/usr/bin/python3}" data-tools/scaling_report.py "$out" --out "$docs/strong_scaling" --force \
    --title "dtrain strong scaling: $m, synthetic 3x224x224, global batch ${GLOBAL_BATCH:-8}, $(nproc --all) cores${pin:+, --pin-threads}${ARGS:+, $ARGS}"
  cp "$out/sweep.log" "$docs/sweep.log"
done
