#!/usr/bin/env bash
# tests/cli/test_export_graphs.sh — the Fashion-MNIST CNN (jobs/fashion_mnist_cnn.ini) and ResNet-20
# (jobs/resnet20_cifar.ini) leave dtrain for PyTorch and come back, through the same graphs built
# by tests/benchmarks/pytorch_reference.py (its modules sit at dtrain's tensor names: "0.conv",
# "12.dense" of the unnamed CNN, torchvision's "layer1.0.conv1" of ResNet-20). For each job, on
# synthetic 1×28×28 images of 10 classes (uint8, normalised by their mean/std as dtrain does):
#   1. dtrain → PyTorch: 4 sync training steps (no warm-up: the weights and batchnorm statistics
#      move), `dtrain export`; the reference graph takes the file with load_state_dict(strict=True)
#      and its eval-mode logits on 64 images equal those dtrain predict's probabilities give
#      (torch_compare.py: ≤ 1e-4 relative).
#   2. PyTorch → dtrain: the reference graph seeded, batchnorm statistics of the 64 images, its
#      state_dict saved with safetensors; dtrain predict --init-from gives its logits (≤ 1e-4).
# Needs a Python with torch and safetensors (torch_python.sh: exit 77 = skipped with the reason).
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/torch_python.sh"

data() {  # data NAME N SEED: NAME.h5, N synthetic 1×28×28 uint8 images of 10 classes
  "$BIN/make_dataset" "$SCRATCH/$1.h5" --n "$2" --c 1 --h 28 --w 28 --classes 10 --seed "$3" \
    --template-seed 5 >/dev/null
}
data train 64 3
data images 64 4
# predict OUT ARGS...: one dtrain predict of images.h5 that must succeed.
predict() {
  local out=$1
  shift
  timeout 300 "$DTRAIN" predict --threads 2 --out "$out" --data "$SCRATCH/images.h5" "$@" \
    >"$out.log" 2>&1 || { cat "$out.log"; fail "predict into $out failed: $*"; }
}
# torch_side MODE JOB FILE [PRED]: the reference graph of JOB, in PyTorch.
#   MODE save: seeded, batchnorm statistics of images.h5 (train mode, cumulative average), its
#              state_dict into FILE (safetensors), its eval-mode logits into FILE.npy
#   MODE load: FILE loaded with strict=True (every batchnorm's statistics trained, not initial);
#              its eval-mode logits compared with the probabilities of predict output PRED
torch_side() {
  "$TORCH_PY" - "$@" <<'PY'
import os, sys, h5py, numpy as np, torch
from safetensors.torch import load_file, save_file
sys.path[:0] = [os.environ["SRC"] + "/tests/cli", os.environ["SRC"] + "/tests/benchmarks"]
from torch_compare import compare
import pytorch_reference as ref
mode, job, path = sys.argv[1:4]
torch.set_num_threads(2)
x, _, _ = ref.load(os.environ["SCRATCH"] + "/images.h5", "cpu")
torch.manual_seed(11)
model = ref.build_model(ref.read_job(job)[1], 1, 28, 28, 10)
bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
assert bns, "no batchnorm layer"
if mode == "save":
    for m in bns:
        m.momentum = None
        m.reset_running_stats()
    with torch.no_grad():
        model.train()(x)
    save_file(model.state_dict(), path)
    with torch.no_grad():
        np.save(path + ".npy", model.eval()(x).numpy())
    print(f"   {len(model.state_dict())} tensors saved")
    sys.exit(0)
model.load_state_dict(load_file(path), strict=True)
for m in bns:
    assert not torch.equal(m.running_var, torch.ones_like(m.running_var)), "untrained statistics"
with torch.no_grad():
    logits = model.eval()(x).double().numpy()
rel, used = compare(logits, h5py.File(sys.argv[4], "r")["probabilities"][()])
assert rel <= 1e-4, f"logits differ by {rel:.3g} relative"
print(f"   load_state_dict(strict=True); max |diff| / max |logit| = {rel:.2g} ({used} logits)")
PY
}
# torch_logits_match NPY PRED: PyTorch's saved logits against predict output PRED.
torch_logits_match() {
  "$TORCH_PY" - "$@" <<'PY'
import os, sys, h5py, numpy as np
sys.path.insert(0, os.environ["SRC"] + "/tests/cli")
from torch_compare import compare
rel, used = compare(np.load(sys.argv[1]), h5py.File(sys.argv[2], "r")["probabilities"][()])
assert rel <= 1e-4, f"logits differ by {rel:.3g} relative"
print(f"   max |diff| / max |logit| = {rel:.2g} ({used} logits)")
PY
}

for name in fashion_mnist_cnn resnet20_cifar; do
  job=$SRC/jobs/$name.ini
  echo "== $name: dtrain -> PyTorch"
  mkdir -p "$SCRATCH/$name"
  timeout 300 "$DTRAIN" --config "$job" --mode sync --num-ps 0 --train-data "$SCRATCH/train.h5" \
    --test-data "$SCRATCH/images.h5" --run-dir "$SCRATCH/$name" --batch-size 16 --max-steps 4 \
    --warmup-steps 0 --threads 2 --summaries false >"$SCRATCH/$name.log" 2>&1 ||
    { cat "$SCRATCH/$name.log"; fail "$name: training"; }
  ckpt=$SCRATCH/$name/ckpt-0000000004.h5
  "$DTRAIN" export --checkpoint "$ckpt" --out "$SCRATCH/$name.safetensors" >/dev/null
  predict "$SCRATCH/${name}_dtrain.h5" --config "$job" --checkpoint "$ckpt"
  torch_side load "$job" "$SCRATCH/$name.safetensors" "$SCRATCH/${name}_dtrain.h5" ||
    fail "$name: PyTorch's reference graph on dtrain's export"
  echo "== $name: PyTorch -> dtrain"
  torch_side save "$job" "$SCRATCH/${name}_torch.safetensors" || fail "$name: PyTorch save"
  predict "$SCRATCH/${name}_torch.h5" --config "$job" --init-from "$SCRATCH/${name}_torch.safetensors"
  torch_logits_match "$SCRATCH/${name}_torch.safetensors.npy" "$SCRATCH/${name}_torch.h5" ||
    fail "$name: dtrain predict --init-from PyTorch's state_dict"
done
echo "PASS"
