#!/usr/bin/env bash
# tests/gpu/kernel_profile.sh — where the GPU time of one training step goes, dtrain against PyTorch
# on the same job: Nsight Compute (ncu) times every kernel of a window of steady-state launches
# (gpu__time_duration.sum only: cheap to collect) and the per-kernel-name totals are printed, per
# step, largest first, with the sum. Host gaps between kernels are not in these numbers: compare
# the sum with the step time the benchmark reports to see launch/sync overhead.
# Usage (on the lent machine, after tests/gpu/device.sh set-up): bash tests/gpu/kernel_profile.sh
# Env: JOB (default jobs/fashion_mnist_cnn.ini), BATCH (512), STEPS_IN_WINDOW (4),
#      DTRAIN_KPS / TORCH_KPS (kernels per step of each, to size the window; defaults for the CNN).
# The window starts after 60 steps' worth of launches: both runs are long enough (dtrain 100 steps,
# PyTorch 200) that it never starts past the end (the first PyTorch try, 70 steps, profiled nothing).
set -uo pipefail
cd "$(dirname "$0")/../.."
job=${JOB:-jobs/fashion_mnist_cnn.ini}
batch=${BATCH:-512}
n=${STEPS_IN_WINDOW:-4}
dk=${DTRAIN_KPS:-40}
tk=${TORCH_KPS:-70}
py=${TORCH_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ncu_args=(--metrics gpu__time_duration.sum --csv --target-processes all)
mpirun -np 1 ncu "${ncu_args[@]}" --launch-skip $((60 * dk)) --launch-count $((n * dk)) \
  build/bin/dtrain --config "$job" --mode sync --num-ps 0 --device cuda --batch-size "$batch" \
  --max-steps 100 --test-data "" --run-dir "$tmp/run" >"$tmp/dtrain.csv" 2>"$tmp/dtrain.err" ||
  tail -5 "$tmp/dtrain.err"
ncu "${ncu_args[@]}" --launch-skip $((60 * tk)) --launch-count $((n * tk)) \
  "$py" tests/benchmarks/pytorch_reference.py --config "$job" --device cuda --math tf32 \
  --batch-size "$batch" --steps 100 --warmup 100 >"$tmp/torch.csv" 2>"$tmp/torch.err" ||
  tail -5 "$tmp/torch.err"
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
    print(f"== {path.split('/')[-1]}: {len(rows)} kernels, {sum(tot.values()) / steps:.1f} us of kernel time per step")
    for name, us in tot.most_common(18):
        print(f"  {us / steps:9.1f} us/step  {cnt[name] / steps:5.1f}x  {name}")
PY
