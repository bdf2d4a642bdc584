#!/usr/bin/env bash
# Benchmark: dtrain (one worker, sync, fp32, CPU/oneDNN) against PyTorch (CPU, eager) on the same
# model, batch size and optimizer, side by side in one run on this machine. Prints training samples/s
# of each (warm-up steps excluded) and the ratio dtrain / PyTorch.
#
# Usage: tests/benchmarks/bench_vs_pytorch.sh [JOB]     (default jobs/fashion_mnist_cnn.ini)
# Env:   STEPS (timed steps, default 300), WARMUP (default 20), THREADS (default: all cores),
#        DEVICE (cpu | cuda, default cpu), TORCH_PYTHON (an interpreter with torch, numpy, h5py;
#        default /opt/torchbench/bin/python, created with pip from PyPI if missing).
# Needs a built dtrain (tests/run_all.sh or .ci/build.sh) and the converted data
# (jobs/run_fashion_mnist.sh converts it).
set -euo pipefail
cd "$(dirname "$0")/../.."
job=${1:-jobs/fashion_mnist_cnn.ini}
steps=${STEPS:-300}
warmup=${WARMUP:-20}
threads=${THREADS:-$(nproc)}
device=${DEVICE:-cpu}
py=${TORCH_PYTHON:-/opt/torchbench/bin/python}
if ! "$py" -c "import torch, h5py, numpy" 2>/dev/null; then
  echo "# installing the PyTorch reference into /opt/torchbench (benchmark only)" >&2
  python3 -m venv /opt/torchbench && /opt/torchbench/bin/pip install -q torch numpy h5py
  py=/opt/torchbench/bin/python
fi
[ -x build/bin/dtrain ] || { echo "bench: build dtrain first (.ci/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# dtrain: log every `warmup` steps; the first interval is the warm-up and is dropped.
mpirun --bind-to none -np 1 build/bin/dtrain --config "$job" --mode sync --num-ps 0 --device "$device" \
  --max-steps $((warmup + steps)) --test-data "" --threads "$threads" --log-every "$warmup" \
  --run-dir "$tmp/dtrain" > "$tmp/dtrain.log"
dtrain_sps=$(/usr/bin/python3 - "$tmp/dtrain/metrics.csv" "$warmup" "$steps" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "train"]
warm, steps = int(sys.argv[2]), int(sys.argv[3])
first = next(r for r in rows if int(r["global_step"]) >= warm)
last = rows[-1]
batch = None
done = int(last["global_step"]) - int(first["global_step"])
print(done, float(last["wall_seconds"]) - float(first["wall_seconds"]))
PY
)
read -r dtrain_steps dtrain_secs <<<"$dtrain_sps"
batch=$(grep -E '^\s*batch-size' "$job" | head -1 | sed 's/.*=\s*//')
dtrain_rate=$(/usr/bin/python3 -c "print($dtrain_steps*$batch/$dtrain_secs)")

torch_json=$("$py" tests/benchmarks/pytorch_reference.py --config "$job" --steps "$steps" \
  --warmup "$warmup" --threads "$threads" --device "$device")
torch_rate=$(/usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])['samples_per_sec'])" "$torch_json")
torch_ver=$(/usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])['torch'])" "$torch_json")

/usr/bin/python3 - "$job" "$batch" "$threads" "$device" "$dtrain_rate" "$torch_rate" "$torch_ver" "$steps" <<'PY'
import sys
job, batch, threads, device, d, t, ver, steps = sys.argv[1:]
d, t = float(d), float(t)
print(f"# {job}: batch {batch}, fp32, {threads} threads, device {device}, {steps} timed steps")
print(f"{'framework':<22}{'samples/s':>12}")
print(f"{'dtrain':<22}{d:>12.1f}")
print(f"{'pytorch ' + ver:<22}{t:>12.1f}")
print(f"ratio dtrain/pytorch: {d / t:.2f}")
PY
