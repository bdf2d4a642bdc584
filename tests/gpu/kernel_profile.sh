#!/usr/bin/env bash
# tests/gpu/kernel_profile.sh — where the GPU time of one training step goes, dtrain against PyTorch
# on the same job: Nsight Compute (ncu) times every kernel of the same window of steady-state steps
# in both (gpu__time_duration.sum only: cheap to collect), and the per-kernel-name totals are
# printed, per step, largest first, with the sum. The window is exact in both: dtrain
# --profile-steps A:B and pytorch_reference.py --profile-steps A:B run those steps between
# cudaProfilerStart and cudaProfilerStop, and ncu records only there (--profile-from-start off).
# Host gaps between kernels are not in these numbers: compare the sum with the step time the
# benchmark reports to see launch/sync overhead.
# Usage (on the lent machine, after tests/gpu/device.sh set-up): bash tests/gpu/kernel_profile.sh
# Env: JOB (default jobs/fashion_mnist_cnn.ini; a job with `synthetic =`, e.g.
#      jobs/resnet50_imagenet.ini, runs on synthetic data in both), BATCH (default 512),
#      FIRST (first profiled step, default 60), STEPS_IN_WINDOW (default 4), MATH (tf32 | fp32,
#      default tf32), CHANNELS_LAST=1, PRECISION (fp32 | bf16), CUDNN_BENCHMARK=1, CONV_API (dtrain only) — as
#      tests/benchmarks/bench_vs_pytorch.sh, for both frameworks.
set -uo pipefail
cd "$(dirname "$0")/../.."
job=${JOB:-jobs/fashion_mnist_cnn.ini}
batch=${BATCH:-512}
first=${FIRST:-60}
n=${STEPS_IN_WINDOW:-4}
window="$first:$((first + n))"
total=$((first + n + 20))
py=${TORCH_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

source tests/benchmarks/framework_args.sh
framework_args "$job" "${MATH:-tf32}" $((total * batch))
dtrain_args=(--config "$job" --mode sync --num-ps 0 --device cuda --batch-size "$batch"
             --max-steps "$total" --run-dir "$tmp/run" --profile-steps "$window" "${DTRAIN_ARGS[@]}")
torch_args=(--config "$job" --device cuda --batch-size "$batch" --warmup "$total" --steps 1
            --profile-steps "$window" "${TORCH_ARGS[@]}")

ncu_args=(--metrics gpu__time_duration.sum --csv --target-processes all --profile-from-start off)
echo "# $job, batch $batch, steps [$window) of each, ${MATH:-tf32}, ${PRECISION:-fp32}$BENCH_LABEL"
mpirun -np 1 ncu "${ncu_args[@]}" build/bin/dtrain "${dtrain_args[@]}" >"$tmp/dtrain.csv" \
  2>"$tmp/dtrain.err" || tail -5 "$tmp/dtrain.err"
ncu "${ncu_args[@]}" "$py" tests/benchmarks/pytorch_reference.py "${torch_args[@]}" \
  >"$tmp/torch.csv" 2>"$tmp/torch.err" || tail -5 "$tmp/torch.err"
"$py" - "$tmp/dtrain.csv" "$tmp/torch.csv" "$n" <<'PY'
import csv, io, sys, collections
steps = int(sys.argv[3])
for path in sys.argv[1:3]:
    text = open(path, errors="replace").read()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
    tot = collections.Counter()
    cnt = collections.Counter()
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        v *= {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
        name = r["Kernel Name"][:90]
        tot[name] += v
        cnt[name] += 1
    print(f"== {path.split('/')[-1]}: {len(rows)} kernels, {len(rows) / steps:.0f} per step, "
          f"{sum(tot.values()) / steps:.1f} us of kernel time per step")
    for name, us in tot.most_common(25):
        print(f"  {us / steps:9.1f} us/step  {cnt[name] / steps:5.1f}x  {name}")
PY
