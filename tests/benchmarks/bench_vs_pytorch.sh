#!/usr/bin/env bash
# Benchmark: dtrain (one worker, sync) against PyTorch eager (the same graph built from the
# job file by tests/benchmarks/pytorch_reference.py: same layers, batch size, optimizer, precision),
# one after the other on this machine. Prints training samples/s of each (warm-up steps excluded),
# peak resident memory of each (dtrain: results.json's train_peak_rss_mb / peak_rss_mb, else
# /usr/bin/time's maximum RSS around mpirun; PyTorch: getrusage, including ~0.5 GB for importing
# torch) and the ratios dtrain / PyTorch.
#
# Usage: tests/benchmarks/bench_vs_pytorch.sh [JOB]     (default jobs/fashion_mnist_cnn.ini)
#   Works for any job file; a job with `synthetic = CxHxW:classes` (the ImageNet models) runs on
#   one random batch in both frameworks, a file-based job on the job's training set.
# Env:   STEPS (timed steps, default 300), WARMUP (default 20), THREADS (default: all cores),
#        BATCH (override the job's batch-size), DEVICE (cpu | cuda, default cpu),
#        MATH (tf32 | fp32: GPU convolution/matmul math of both, default tf32 on cuda — PyTorch's
#        cudnn.allow_tf32 and matmul.allow_tf32, dtrain's --math), CHANNELS_LAST=1 (both in
#        channels-last memory order: PyTorch's channels_last memory format, dtrain's --layout nhwc;
#        otherwise both NCHW, although dtrain's --layout auto default is nhwc on the CPU),
#        PRECISION (fp32 | bf16, default fp32: bf16 is dtrain's --precision bf16 against PyTorch's
#        forward and loss under torch.autocast(dtype=torch.bfloat16)),
#        CUDNN_BENCHMARK=1 (GPU: both time every convolution algorithm once per shape and run the
#        fastest — PyTorch's cudnn.benchmark = True, dtrain's --cudnn-benchmark; default: both use
#        cuDNN's heuristics), FUSE (dtrain's --fuse: auto, the default, | off),
#        CUDA_GRAPH (dtrain's --cuda-graph: auto, the default, | on | off; the run's "cuda graph"
#        log lines are printed under the table), CONV_API (dtrain's --conv-api: legacy, the
#        default, | graph; with graph the count of convolution directions on each path and the
#        first conv lines of the log are printed under the table),
#        On a GPU each framework's peak GPU memory is printed too (dtrain's results.json
#        gpu_peak_allocated_mb, PyTorch's torch.cuda.max_memory_allocated).
#        TORCH_PYTHON (an interpreter with torch, numpy, h5py; default /opt/torchbench/bin/python,
#        created with pip from PyPI if missing).
# Needs a built dtrain (tests/run_all.sh or .ci/build.sh) and, for file-based jobs, the converted
# data (jobs/run_fashion_mnist.sh converts it).
set -euo pipefail
cd "$(dirname "$0")/../.."
job=${1:-jobs/fashion_mnist_cnn.ini}
steps=${STEPS:-300}
warmup=${WARMUP:-20}
threads=${THREADS:-$(nproc)}
device=${DEVICE:-cpu}
math=${MATH:-$([ "$device" = cuda ] && echo tf32 || echo fp32)}
py=${TORCH_PYTHON:-/opt/torchbench/bin/python}
if ! "$py" -c "import torch, h5py, numpy" 2>/dev/null; then
  echo "# installing the PyTorch reference into /opt/torchbench (benchmark only)" >&2
  python3 -m venv /opt/torchbench && /opt/torchbench/bin/pip install -q torch torchvision numpy h5py
  py=/opt/torchbench/bin/python
fi
[ -x build/bin/dtrain ] || { echo "bench: build dtrain first (.ci/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

batch=${BATCH:-$(grep -E '^\s*batch-size\s*=' "$job" | head -1 | sed 's/.*=\s*//')}
source tests/benchmarks/framework_args.sh
framework_args "$job" "$math" $(( (warmup + steps) * batch ))

# dtrain: log every `warmup` steps; the first interval is the warm-up and is dropped.
timer=()
[ -x /usr/bin/time ] && timer=(/usr/bin/time -f %M -o "$tmp/time_kb")
"${timer[@]}" mpirun --bind-to none -np 1 build/bin/dtrain --config "$job" --mode sync --num-ps 0 \
  --device "$device" --max-steps $((warmup + steps)) --threads "$threads" --log-every "$warmup" \
  --batch-size "$batch" "${DTRAIN_ARGS[@]}" --fuse "${FUSE:-auto}" \
  --cuda-graph "${CUDA_GRAPH:-auto}" --run-dir "$tmp/dtrain" \
  > "$tmp/dtrain.log" 2>&1 || { cat "$tmp/dtrain.log"; exit 1; }
read -r dtrain_rate dtrain_rss dtrain_gpu <<<"$("${DTRAIN_PYTHON:-/usr/bin/python3}" - "$tmp/dtrain" "$warmup" "$batch" "$tmp/time_kb" <<'PY'
import csv, json, os, sys
run, warm, batch, time_kb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = [r for r in csv.DictReader(open(f"{run}/metrics.csv")) if r["kind"] == "train"]
first = next(r for r in rows if int(r["global_step"]) >= warm)
last = rows[-1]
steps = int(last["global_step"]) - int(first["global_step"])
secs = float(last["wall_seconds"]) - float(first["wall_seconds"])
res = json.load(open(f"{run}/results.json"))
rss = res.get("train_peak_rss_mb", res.get("peak_rss_mb"))
if rss is None:  # an older dtrain: the largest RSS of mpirun and the rank, from /usr/bin/time (KiB)
    rss = int(open(time_kb).read().split()[-1]) / 1024 if os.path.exists(time_kb) else 0
print(steps * batch / secs, rss, res.get("gpu_peak_allocated_mb", 0))
PY
)"

torch_args=(--config "$job" --steps "$steps" --warmup "$warmup" --threads "$threads"
            --device "$device" --batch-size "$batch" "${TORCH_ARGS[@]}")
torch_json=$("$py" tests/benchmarks/pytorch_reference.py "${torch_args[@]}")

"${DTRAIN_PYTHON:-/usr/bin/python3}" - "$job" "$batch" "$threads" "$device" "$steps" "$dtrain_rate" "$dtrain_rss" "$torch_json" "$math" "$dtrain_gpu" "${FUSE:-auto}" "${CUDA_GRAPH:-auto}" "${CONV_API:-legacy}" <<'PY'
import json, sys
job, batch, threads, device, steps = sys.argv[1:6]
d, d_rss, d_gpu = float(sys.argv[6]), float(sys.argv[7]), float(sys.argv[10])
t = json.loads(sys.argv[8])
gpu = device == "cuda"
layout = ", channels last (PyTorch channels_last, dtrain --layout nhwc)" if t.get("channels_last") else ""
if t.get("precision") == "bf16":
    layout += ", bf16 (PyTorch autocast, dtrain --precision bf16)"
if t.get("cudnn_benchmark"):
    layout += ", conv algorithms timed (cudnn.benchmark, dtrain --cudnn-benchmark)"
if sys.argv[11] != "auto":
    layout += f", dtrain --fuse {sys.argv[11]}"
if sys.argv[12] != "auto":
    layout += f", dtrain --cuda-graph {sys.argv[12]}"
if sys.argv[13] != "legacy":
    layout += f", dtrain --conv-api {sys.argv[13]}"
print(f"# {job}: batch {batch}, {sys.argv[9]} math, {threads} threads, device {device}, "
      f"{steps} timed steps{layout}")
t_gpu = t.get("peak_gpu_mb", 0.0)
print(f"{'framework':<24}{'samples/s':>12}{'peak RSS MiB':>15}" + (f"{'peak GPU MiB':>15}" if gpu else ""))
print(f"{'dtrain':<24}{d:>12.2f}{d_rss:>15.0f}" + (f"{d_gpu:>15.0f}" if gpu else ""))
print(f"{'pytorch ' + t['torch']:<24}{t['samples_per_sec']:>12.2f}{t['peak_rss_mb']:>15.0f}" +
      (f"{t_gpu:>15.0f}" if gpu else ""))
print(f"ratio dtrain/pytorch: samples/s {d / t['samples_per_sec']:.2f}, "
      f"peak RSS {d_rss / t['peak_rss_mb']:.2f}" +
      (f", peak GPU memory {d_gpu / t_gpu:.2f}" if gpu and t_gpu > 0 else ""))
PY
grep -h "cuda graph" "$tmp/dtrain.log" | sed 's/^# */# dtrain: /' || true
if [ "${CONV_API:-legacy}" = graph ]; then
  echo "# dtrain --conv-api graph: $(grep -o "fwd engine\|bwd-data engine\|bwd-filter engine" \
    "$tmp/dtrain.log" | wc -l) problem directions on graph-API engines, $(grep -o "\(fwd\|bwd-data\|bwd-filter\) legacy (" \
    "$tmp/dtrain.log" | wc -l) on the legacy calls"
  grep -h "cuDNN conv" "$tmp/dtrain.log" | head -3 | cut -c1-400 | sed 's/^/# /'
fi
