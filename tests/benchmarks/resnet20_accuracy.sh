#!/usr/bin/env bash
# Accuracy check: ResNet-20 (jobs/resnet20_cifar.ini) on Fashion-MNIST trained by dtrain (sync,
# WORKERS workers, the job's epochs) and by the PyTorch reference (tests/benchmarks/
# pytorch_reference.py: the same graph, initialisation family, optimizer, learning-rate schedule
# and global batch, in one process) — prints both final test accuracies and the difference.
#
# Usage: tests/benchmarks/resnet20_accuracy.sh [extra dtrain options, e.g. --epochs 2]
# Env:   WORKERS (default 2), THREADS (per dtrain rank and for PyTorch; default cores/WORKERS),
#        TORCH_PYTHON (default /opt/torchbench/bin/python, see bench_vs_pytorch.sh),
#        OUT (folder for logs and results; default runs/resnet20_accuracy).
# Needs a built dtrain and the converted data (jobs/run_fashion_mnist.sh does both).
set -euo pipefail
cd "$(dirname "$0")/../.."
job=jobs/resnet20_cifar.ini
workers=${WORKERS:-2}
threads=${THREADS:-$(( $(nproc) / workers > 0 ? $(nproc) / workers : 1 ))}
py=${TORCH_PYTHON:-/opt/torchbench/bin/python}
out=${OUT:-runs/resnet20_accuracy}
"$py" -c "import torch, h5py" 2>/dev/null || { echo "resnet20_accuracy: no PyTorch at $py (run bench_vs_pytorch.sh once to install it)" >&2; exit 1; }
[ -x build/bin/dtrain ] || { echo "resnet20_accuracy: build dtrain first" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$out" && mkdir -p "$out"

epochs=$(grep -E '^\s*epochs\s*=' "$job" | head -1 | sed 's/.*=\s*//')
crop=0; flip=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --epochs) epochs=${args[i + 1]} ;;
    --random-crop) crop=${args[i + 1]} ;;
    --random-flip) flip=--random-flip ;;
  esac
done

mpirun --bind-to none --oversubscribe -np "$workers" build/bin/dtrain --config "$job" \
  --threads "$threads" --run-dir "$out/dtrain" "$@" > "$out/dtrain.log" 2>&1
d_acc=$(/usr/bin/python3 -c "import json; print(json.load(open('$out/dtrain/results.json'))['test_accuracy'])")

"$py" tests/benchmarks/pytorch_reference.py --config "$job" --train-epochs "$epochs" \
  --workers "$workers" --threads "$(( threads * workers ))" --random-crop "$crop" $flip \
  > "$out/pytorch.json" 2> "$out/pytorch.log"
t_acc=$(/usr/bin/python3 -c "import json; print(json.load(open('$out/pytorch.json'))['test_accuracy'])")

/usr/bin/python3 - "$d_acc" "$t_acc" "$epochs" "$workers" "$*" <<'PY'
import sys
d, t, epochs, workers, extra = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
print(f"# ResNet-20 on Fashion-MNIST, {epochs} epochs, sync {workers} workers {extra}".rstrip())
print(f"{'framework':<10}{'test accuracy':>15}")
print(f"{'dtrain':<10}{d:>15.4f}")
print(f"{'pytorch':<10}{t:>15.4f}")
print(f"difference: {100 * (d - t):+.2f} points")
PY
