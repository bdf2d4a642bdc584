#!/usr/bin/env bash
# Accuracy check: ResNet-20 (jobs/resnet20_cifar.ini) on Fashion-MNIST trained by dtrain (sync,
# WORKERS workers, --num-ps 0, the job's epochs) and by the PyTorch reference
# (tests/benchmarks/pytorch_reference.py --train-epochs: the same graph and initialisation family,
# the same hyperparameters — per-worker batch, global batch = WORKERS x batch, lr x WORKERS
# (--lr-scaling linear), warm-up then cosine over the same number of global steps, momentum, coupled
# weight decay — and dtrain's sync structure: per-worker shards and batchnorm batches, batchnorm
# statistics averaged before each evaluation), one after the other. Prints both final test
# accuracies, the epochs, and the difference in points.
#
# Usage: tests/benchmarks/resnet20_accuracy.sh [extra dtrain options]
#   e.g. --random-crop 4 --random-flip (augmentation; the reference mirrors it: pad 4 pixels of raw
#   value 0, random 28x28 crop, random horizontal flip), --lr 0.1, --epochs 2.
#   --epochs, --max-steps, --batch-size, --lr, --lr-min, --warmup-steps, --lr-schedule,
#   --lr-decay-steps, --weight-decay, --momentum, --lr-scaling and --seed are passed to both.
# Env:   EPOCHS (override the job's epochs), MAX_STEPS (stop both after this many global steps, for
#        a quick end-to-end check: the cosine schedule ends there, as dtrain's --max-steps),
#        WORKERS (default 2), THREADS (per dtrain rank; PyTorch gets WORKERS x THREADS; default
#        cores/WORKERS), TORCH_PYTHON (default /opt/torchbench/bin/python, see bench_vs_pytorch.sh),
#        OUT (logs and results; default runs/resnet20_accuracy).
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

epochs=${EPOCHS:-$(grep -E '^\s*epochs\s*=' "$job" | head -1 | sed 's/.*=\s*//')}
dtrain_args=()
[[ " $* " == *" --epochs "* ]] || dtrain_args+=(--epochs "$epochs")
[[ -z ${MAX_STEPS:-} || " $* " == *" --max-steps "* ]] || dtrain_args+=(--max-steps "$MAX_STEPS")
dtrain_args+=("$@")
# The reference reads the job file; options given here override its keys in a copy of it.
ref_job=$out/job.ini
cp "$job" "$ref_job"
torch_args=()
args=("${dtrain_args[@]}")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --epochs) epochs=${args[i + 1]} ;;
    --max-steps) torch_args+=(--max-steps "${args[i + 1]}") ;;
    --random-crop) torch_args+=(--random-crop "${args[i + 1]}") ;;
    --random-flip) torch_args+=(--random-flip) ;;
    --batch-size|--lr|--lr-min|--warmup-steps|--lr-schedule|--lr-decay-steps|--weight-decay|--momentum|--lr-scaling|--seed)
      echo "${args[i]#--} = ${args[i + 1]}" >>"$ref_job" ;;  # the last value of a key wins
  esac
done

echo "# dtrain: mpirun -np $workers ... --mode sync --num-ps 0 ${dtrain_args[*]} (log: $out/dtrain.log)" >&2
t0=$(date +%s)
mpirun --bind-to none --oversubscribe -np "$workers" build/bin/dtrain --config "$job" \
  --mode sync --num-ps 0 --threads "$threads" --run-dir "$out/dtrain" "${dtrain_args[@]}" \
  > "$out/dtrain.log" 2>&1 || { tail -20 "$out/dtrain.log" >&2; echo "resnet20_accuracy: dtrain failed" >&2; exit 1; }
d_secs=$(( $(date +%s) - t0 ))

echo "# pytorch: pytorch_reference.py --train-epochs $epochs --workers $workers ${torch_args[*]} (log: $out/pytorch.log)" >&2
t0=$(date +%s)
"$py" tests/benchmarks/pytorch_reference.py --config "$ref_job" --train-epochs "$epochs" \
  --workers "$workers" --threads "$(( threads * workers ))" "${torch_args[@]}" \
  > "$out/pytorch.json" 2> "$out/pytorch.log" || { tail -20 "$out/pytorch.log" >&2; echo "resnet20_accuracy: PyTorch reference failed" >&2; exit 1; }
t_secs=$(( $(date +%s) - t0 ))

/usr/bin/python3 - "$out/dtrain/results.json" "$out/pytorch.json" "$epochs" "$workers" "$d_secs" "$t_secs" "$*" <<'PY'
import json, sys
d, t = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
epochs, workers, d_secs, t_secs, extra = sys.argv[3:8]
print(f"# ResNet-20 on Fashion-MNIST, {epochs} epochs, sync {workers} workers {extra}".rstrip())
print(f"{'framework':<10}{'test accuracy':>15}{'global steps':>14}{'wall s':>8}")
print(f"{'dtrain':<10}{d['test_accuracy']:>15.4f}{d['global_step']:>14}{d_secs:>8}")
print(f"{'pytorch':<10}{t['test_accuracy']:>15.4f}{t['global_step']:>14}{t_secs:>8}")
print(f"difference dtrain - pytorch: {100 * (d['test_accuracy'] - t['test_accuracy']):+.2f} points")
if d["global_step"] != t["global_step"]:
    print(f"WARNING: different numbers of global steps", file=sys.stderr)
PY
