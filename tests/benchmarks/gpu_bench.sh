#!/usr/bin/env bash
# Benchmark on a GPU: dtrain against PyTorch eager on the same card, in the same call.
# Throughput rows go through tests/benchmarks/bench_vs_pytorch.sh with DEVICE=cuda (one worker,
# sync; samples/s of each over the timed steps, warm-up excluded, and the ratio dtrain / PyTorch):
#   cnn64, cnn512       the Fashion-MNIST CNN (jobs/fashion_mnist_cnn.ini) at batch 64 and 512, TF32
#   cnn64cl, cnn512cl   the same with both in channels-last order
#   resnet50            ResNet-50 on synthetic 3x224x224 data, batch 128, TF32, PyTorch NCHW
#   resnet50cl          the same with both in channels-last order (PyTorch channels_last, dtrain
#                       --layout nhwc: the layout tensor-core convolutions read)
#   resnet50bf16        ResNet-50, batch 128, bf16 mixed precision in both (dtrain --precision bf16,
#                       PyTorch torch.autocast(bfloat16)), both channels-last
#   resnet50fp32        ResNet-50, batch 128, full fp32 math in both
#   resnet50bf16b256    resnet50bf16 at batch 256
#   resnet50bf16nofuse  resnet50bf16 with dtrain's --fuse off (what fusion gives, same call)
#   inception3bf16      Inception-v3 (3x299x299), batch 128, bf16, channels last in both
#   vgg16bf16           VGG-16, batch 128, bf16, channels last in both
#   vgg16bf16nofuse     vgg16bf16 with dtrain's --fuse off (its 13 conv -> relu pairs unfused; not
#                       in the default list: ROWS="vgg16bf16 vgg16bf16nofuse")
#   resnet50bf16nograph resnet50bf16 with dtrain's --cuda-graph off (every kernel launched by the
#                       host; the default rows run --cuda-graph auto: the step's forward, loss and
#                       backward replayed as one CUDA graph). Not in the default list:
#                       ROWS="resnet50bf16 resnet50bf16nograph"
#   vgg16bf16graph, resnet50bf16graph, inception3bf16graph, resnet50graph
#                       the same rows with dtrain's --conv-api graph (convolutions through cuDNN's
#                       graph API, engines from its heuristics, as PyTorch's; with --fuse auto a
#                       conv's bias and relu run in the convolution's graph); not in the default
#                       list: ROWS="vgg16bf16 vgg16bf16graph"
#   vgg16bf16graphnofuse vgg16bf16graph with --fuse off (graph-API convolutions, bias and relu
#                       in passes of their own): what the fused epilogue gives
#   tta                 time to 0.91 test accuracy on Fashion-MNIST: the CNN job's recipe (6 epochs,
#                       cosine, batch 64, one worker, evaluation after each epoch) in both
#                       frameworks — dtrain's results.json time_to_accuracy_seconds, PyTorch's
#                       pytorch_reference.py --train-epochs 6 --target 0.91 (data preloaded on the GPU)
# Usage: bash tests/benchmarks/gpu_bench.sh     (on the lent machine: bash tests/gpu/device.sh bench)
# Env: ROWS (default: all of the above), CUDNN_BENCHMARK=1 (the throughput rows with both
#      frameworks timing every convolution algorithm once per shape: PyTorch's cudnn.benchmark,
#      dtrain's --cudnn-benchmark; default: cuDNN's heuristics in both), TORCH_PYTHON /
#      DTRAIN_PYTHON as bench_vs_pytorch.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${TORCH_PYTHON:-python3}
bench() { DEVICE=cuda bash tests/benchmarks/bench_vs_pytorch.sh "$@" || echo "row failed: $*"; }
tta() {
  local tmp
  tmp=$(mktemp -d)
  [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  mpirun -np 1 build/bin/dtrain --config jobs/fashion_mnist_cnn.ini --mode sync --num-ps 0 \
    --device cuda --target-accuracy 0.91 --run-dir "$tmp/d" >"$tmp/d.log" 2>&1 || { tail "$tmp/d.log"; return; }
  "$py" tests/benchmarks/pytorch_reference.py --config jobs/fashion_mnist_cnn.ini --device cuda \
    --math tf32 --train-epochs 6 --workers 1 --target 0.91 >"$tmp/t.json" 2>"$tmp/t.log" ||
    { tail "$tmp/t.log"; return; }
  "$py" - "$tmp/d/results.json" "$tmp/t.json" <<'PY'
import json, sys
d, t = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
dt, tt = d.get("time_to_accuracy_seconds"), t.get("seconds_to_target")
print("# time to 0.91 test accuracy, Fashion-MNIST CNN, 6-epoch cosine recipe, batch 64, 1 GPU")
print(f"{'framework':<24}{'seconds':>10}{'final acc':>11}{'wall s':>9}")
print(f"{'dtrain':<24}{dt if dt is not None else float('nan'):>10.2f}{d['test_accuracy']:>11.4f}"
      f"{d['wall_seconds']:>9.1f}")
print(f"{'pytorch ' + t['torch']:<24}{tt if tt is not None else float('nan'):>10.2f}"
      f"{t['test_accuracy']:>11.4f}{t['seconds']:>9.1f}")
if dt and tt:
    print(f"ratio pytorch/dtrain time to accuracy: {tt / dt:.2f} (>1: dtrain faster)")
PY
  rm -rf "$tmp"
}
for row in ${ROWS:-cnn64 cnn512 resnet50 resnet50cl resnet50bf16 resnet50fp32 resnet50bf16b256 resnet50bf16nofuse inception3bf16 vgg16bf16 tta}; do
  case $row in
    cnn64) BATCH=64 STEPS=600 WARMUP=50 bench jobs/fashion_mnist_cnn.ini ;;
    cnn512) BATCH=512 STEPS=300 WARMUP=30 bench jobs/fashion_mnist_cnn.ini ;;
    cnn64cl) BATCH=64 STEPS=600 WARMUP=50 CHANNELS_LAST=1 bench jobs/fashion_mnist_cnn.ini ;;
    cnn512cl) BATCH=512 STEPS=300 WARMUP=30 CHANNELS_LAST=1 bench jobs/fashion_mnist_cnn.ini ;;
    resnet50) BATCH=128 STEPS=40 WARMUP=10 bench jobs/resnet50_imagenet.ini ;;
    resnet50cl) BATCH=128 STEPS=40 WARMUP=10 CHANNELS_LAST=1 bench jobs/resnet50_imagenet.ini ;;
    resnet50bf16) BATCH=128 STEPS=40 WARMUP=10 CHANNELS_LAST=1 PRECISION=bf16 bench jobs/resnet50_imagenet.ini ;;
    resnet50fp32) BATCH=128 STEPS=30 WARMUP=10 MATH=fp32 bench jobs/resnet50_imagenet.ini ;;
    resnet50bf16b256) BATCH=256 STEPS=30 WARMUP=10 CHANNELS_LAST=1 PRECISION=bf16 bench jobs/resnet50_imagenet.ini ;;
    resnet50bf16nofuse) BATCH=128 STEPS=40 WARMUP=10 CHANNELS_LAST=1 PRECISION=bf16 FUSE=off bench jobs/resnet50_imagenet.ini ;;
    inception3bf16) BATCH=128 STEPS=30 WARMUP=10 CHANNELS_LAST=1 PRECISION=bf16 bench jobs/inception3_imagenet.ini ;;
    vgg16bf16) BATCH=128 STEPS=30 WARMUP=10 CHANNELS_LAST=1 PRECISION=bf16 bench jobs/vgg16_imagenet.ini ;;
    vgg16bf16nofuse) BATCH=128 STEPS=30 WARMUP=10 CHANNELS_LAST=1 PRECISION=bf16 FUSE=off bench jobs/vgg16_imagenet.ini ;;
    resnet50bf16graph) BATCH=128 STEPS=40 WARMUP=10 CHANNELS_LAST=1 PRECISION=bf16 CONV_API=graph bench jobs/resnet50_imagenet.ini ;;
    resnet50graph) BATCH=128 STEPS=40 WARMUP=10 CONV_API=graph bench jobs/resnet50_imagenet.ini ;;
    inception3bf16graph) BATCH=128 STEPS=30 WARMUP=10 CHANNELS_LAST=1 PRECISION=bf16 CONV_API=graph bench jobs/inception3_imagenet.ini ;;
    vgg16bf16graph) BATCH=128 STEPS=30 WARMUP=10 CHANNELS_LAST=1 PRECISION=bf16 CONV_API=graph bench jobs/vgg16_imagenet.ini ;;
    vgg16bf16graphnofuse) BATCH=128 STEPS=30 WARMUP=10 CHANNELS_LAST=1 PRECISION=bf16 CONV_API=graph FUSE=off bench jobs/vgg16_imagenet.ini ;;
    resnet50bf16nograph) BATCH=128 STEPS=40 WARMUP=10 CHANNELS_LAST=1 PRECISION=bf16 CUDA_GRAPH=off bench jobs/resnet50_imagenet.ini ;;
    tta) tta ;;
    *) echo "gpu_bench: unknown row $row" >&2; exit 2 ;;
  esac
done
