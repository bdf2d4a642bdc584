#!/usr/bin/env bash
# tests/cli/test_export_onnx.sh — `dtrain export --format onnx` (train/onnx_export.hpp,
# docs/checkpoints.md), judged by real clients: ONNX's own checker and ONNX Runtime.
#   1. refusals, each one error naming what is wrong, exit 2, nothing written: an existing --out
#      (left as it was), a --format that is none of the choices (listed), --dtype bf16 with onnx, a
#      file that is no checkpoint, a directory that does not exist, a checkpoint whose
#      configuration has no layer lines (export takes no --config: the message says so).
#   2-5 need a Python with onnx and onnxruntime ($DTRAIN_ONNX_PYTHON, or /opt/onnxcheck created
#      from PyPI on demand; exit 77 = skipped with the reason when neither can be had). Every model
#      passes onnx.checker.check_model(full_check=True); ONNX Runtime's logits on the network
#      input dtrain makes of the data (uint8 / 255, then (x - mean) / std: docs/data.md) equal
#      dtrain predict's probabilities' logits (l_i - l_max = log p_i - log p_max, ≤ 1e-4 relative
#      to the largest, torch_compare.py) and its probabilities predict's (≤ 1e-5); one image
#      alone gives the logits it had in the batch (dynamic batch axis).
#   2. a graph of every layer type (conv with and without bias, 1x3 windows, batchnorm on 4-d and
#      2-d values, relu, sigmoid, padded max and average pools, globalavgpool, zeropad on 4-d and
#      2-d values, concat, add of 2 and of 3, dropout, flatten, dense, a 2-d value added to a 4-d
#      one; layers named logits and probabilities, the outputs' names), 3 training steps: also
#      its operators and metadata.
#   3. the Fashion-MNIST CNN (jobs/fashion_mnist_cnn.ini) on uint8 28x28 data with mean/std, 3
#      steps.
#   4. ResNet-50 (jobs/resnet50_imagenet.ini with momentum=1 on every batchnorm, so that the
#      statistics are those of the 4 images it takes one step on: eval-mode logits of moderate
#      size, every one compared), 2 threads.
#   5. Inception-v3 (jobs/inception3_imagenet.ini) after one synthetic step: the checker, and
#      ONNX Runtime's probabilities on one image (1 x 1000, summing to 1).
set -euo pipefail
source "$(dirname "$0")/common.sh"
export PYTHONPATH=$SRC/tests/cli PYTHONDONTWRITEBYTECODE=1  # torch_compare.py, no __pycache__

make_data train 96 --seed 21 --template-seed 9
write_job "$SCRATCH/job.ini"
timeout 120 "$DTRAIN" --config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "" \
  --mode sync --num-ps 0 --threads 1 --max-steps 2 --run-dir "$SCRATCH/tiny" \
  >"$SCRATCH/tiny.log" 2>&1 ||
  { cat "$SCRATCH/tiny.log"; fail "tiny run"; }
tiny=$SCRATCH/tiny/ckpt-0000000002.h5

echo "== 1. refusals: one error, nothing written"
echo "not a model" >"$SCRATCH/keep.onnx"
cp "$SCRATCH/keep.onnx" "$SCRATCH/keep.copy"
refuse() {  # refuse OUT WORDS ARGS...: export --out OUT fails (exit 2) naming WORDS, writes nothing
  local out=$1 words=$2
  shift 2
  expect_error 0 "$words" export --checkpoint "$tiny" --out "$out" "$@"
  [[ $last_rc -eq 2 ]] || fail "exit $last_rc, expected 2: $*"
  [[ ! -e $out.tmp ]] || fail "$out.tmp was left behind"
}
refuse "$SCRATCH/keep.onnx" "--out|$SCRATCH/keep.onnx|already exists" --format onnx
cmp -s "$SCRATCH/keep.onnx" "$SCRATCH/keep.copy" || fail "export changed an existing --out"
refuse "$SCRATCH/a.onnx" "--format|invalid value 'tflite'|safetensors|onnx" --format tflite
refuse "$SCRATCH/b.onnx" "--dtype|bf16 applies to --format safetensors" --format onnx --dtype bf16
refuse "$SCRATCH/no_dir/c.onnx" "--out|$SCRATCH/no_dir/c.onnx|does not exist" --format onnx
expect_error 0 "$SCRATCH/train.h5|not a dtrain checkpoint" export --checkpoint "$SCRATCH/train.h5" \
  --format onnx --out "$SCRATCH/d.onnx"
[[ $last_rc -eq 2 ]] || fail "a non-checkpoint: exit $last_rc, expected 2"
# A checkpoint whose configuration has no layer lines: export takes no --config, so the message
# says what can be done instead of advising one. (The edit drops metadata_crc32 too, as a file of
# a dtrain before it was recorded: an edited attribute fails it, and the file reads as corrupt.)
cp "$tiny" "$SCRATCH/nolayers.h5"
"$PY" -c 'import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs["config"] = "# none\n"
    del f.attrs["metadata_crc32"]' "$SCRATCH/nolayers.h5"
expect_error 0 "$SCRATCH/nolayers.h5|no \`layer =\` lines|takes no --config|never to ONNX" export \
  --checkpoint "$SCRATCH/nolayers.h5" --format onnx --out "$SCRATCH/e.onnx"
[[ $last_rc -eq 2 ]] || fail "no layer lines: exit $last_rc, expected 2"
! grep -q "give --config" "$SCRATCH/case$((cases - 1)).log" || fail "export advised --config"
for f in a b d e; do [[ ! -e $SCRATCH/$f.onnx ]] || fail "$f.onnx was written"; done

pypi_python ONNX_PY "${DTRAIN_ONNX_PYTHON:-}" /opt/onnxcheck "onnx, onnxruntime, h5py" \
    onnx onnxruntime numpy h5py ||
  { echo "SKIPPED (case 1 passed): no Python with onnx and onnxruntime, and pip could not install" \
         "them from PyPI within 6 minutes (offline? slow?); set DTRAIN_ONNX_PYTHON to one"
    exit 77; }

# check_onnx TAG JOB CKPT DATA [THREADS]: export CKPT to TAG.onnx, dtrain predict DATA with it and
# with the job JOB, then the checker and ONNX Runtime against predict (see the top).
check_onnx() {
  local tag=$1 job=$2 ckpt=$3 data=$4
  THREADS=${5:-1}
  "$DTRAIN" export --checkpoint "$ckpt" --format onnx --out "$SCRATCH/$tag.onnx" \
    >"$SCRATCH/$tag.export.log" 2>&1 || { cat "$SCRATCH/$tag.export.log"; fail "$tag: export"; }
  grep -q "ONNX, opset 17" "$SCRATCH/$tag.export.log" ||
    fail "$tag: $(cat "$SCRATCH/$tag.export.log")"
  predict_into "$SCRATCH/$tag.pred.h5" --config "$job" --checkpoint "$ckpt" --data "$data"
  "$ONNX_PY" - "$SCRATCH/$tag.onnx" "$data" "$SCRATCH/$tag.pred.h5" "$THREADS" <<'PY' || fail "$tag"
import sys, h5py, numpy as np, onnx, onnxruntime as ort
from torch_compare import compare
model, data, pred, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with h5py.File(data, "r") as f:  # the network input dtrain's reader makes (docs/data.md)
    x = f["images"][()]
    if x.dtype == np.uint8:
        x = x.astype(np.float32) / np.float32(255)
    if "mean" in f.attrs:
        per_channel = lambda a: np.broadcast_to(a.astype(np.float32), x.shape[1:2])[:, None, None]
        x = (x - per_channel(f.attrs["mean"])) / per_channel(f.attrs["std"])
    x = np.ascontiguousarray(x, dtype=np.float32)
onnx.checker.check_model(model, full_check=True)
opts = ort.SessionOptions()
opts.intra_op_num_threads = threads
s = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
logits, probs = s.run(["logits", "probabilities"], {"input": x})
p = h5py.File(pred, "r")["probabilities"][()]
rel, used = compare(logits, p)
assert rel <= 1e-4, f"ONNX Runtime's logits differ from dtrain predict's by {rel:.3g} relative"
dp = np.abs(probs - p).max()
assert dp <= 1e-5, f"probabilities differ by {dp:.3g}"
one = s.run(["logits"], {"input": x[:1]})[0]
d1 = np.abs(one[0] - logits[0]).max() / np.abs(logits[0]).max()
assert one.shape == (1, p.shape[1]) and d1 <= 1e-5, f"batch of 1: {one.shape}, {d1:.3g}"
print(f"   checker passed; ONNX Runtime = dtrain predict: max |diff| / max |logit| = {rel:.2g} "
      f"({used} logits of {len(x)} images), probabilities within {dp:.2g}")
PY
}

echo "== 2. every layer type"
cat >"$SCRATCH/zoo.ini" <<'EOF'
[model]
layer = conv filters=4 kernel=3 pad=1 name=c1
layer = batchnorm eps=0.001
layer = relu name=r1
layer = conv filters=4 kernel=1x3 pad=0x1 bias=false name=c2
layer = sigmoid name=s2
layer = avgpool kernel=3 stride=1 pad=1 input=r1 name=a3
layer = add input=r1,s2,a3 name=sum3
layer = maxpool kernel=3 stride=2 pad=1 name=m4
layer = conv filters=6 kernel=3 stride=2 pad=1 name=c5
layer = zeropad channels=8 input=m4 name=z6
layer = maxpool kernel=2 name=m6
layer = concat input=c5,m6 name=cat7
layer = globalavgpool name=g8
layer = flatten input=cat7 name=f9
layer = dense units=14 name=d10
layer = batchnorm name=bn11
layer = relu name=probabilities
layer = add input=probabilities,g8 name=mix12
layer = dropout rate=0.3
layer = conv filters=8 kernel=1 name=c13
layer = concat input=c13,probabilities name=cat14
layer = dense units=5 name=d15
layer = zeropad channels=8 name=z16
layer = dense name=logits

[train]
batch-size = 16
seed = 5

[optimizer]
optimizer = momentum
lr = 0.05
EOF
make_data test 16 --seed 23 --template-seed 9
timeout 120 "$DTRAIN" --config "$SCRATCH/zoo.ini" --train-data "$SCRATCH/train.h5" --test-data "" \
  --mode sync --num-ps 0 --threads 1 --max-steps 3 --run-dir "$SCRATCH/zoo" \
  >"$SCRATCH/zoo.log" 2>&1 ||
  { cat "$SCRATCH/zoo.log"; fail "zoo run"; }
check_onnx zoo "$SCRATCH/zoo.ini" "$SCRATCH/zoo/ckpt-0000000003.h5" "$SCRATCH/test.h5"
"$ONNX_PY" - "$SCRATCH/zoo.onnx" <<'PY' || fail "zoo graph"
import sys, collections, onnx
m = onnx.load(sys.argv[1])
ops = collections.Counter(n.op_type for n in m.graph.node)
want = {"Conv": 4, "BatchNormalization": 2, "Relu": 2, "Sigmoid": 1, "AveragePool": 1, "MaxPool": 2,
        "Sum": 1, "Add": 1, "Pad": 2, "Concat": 2, "GlobalAveragePool": 1, "Flatten": 2, "Gemm": 3,
        "Unsqueeze": 2, "Softmax": 1, "Identity": 1}
assert ops == want, f"operators {dict(ops)}, expected {want}"
assert m.opset_import[0].version == 17
assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
meta = {p.key: p.value for p in m.metadata_props}
assert meta["dtrain.global_step"] == "3", meta
assert "layer = zeropad channels=8 name=z16" in meta["dtrain.job"], meta
assert meta["dtrain.checkpoint"].endswith("zoo/ckpt-0000000003.h5") and meta["dtrain.version"], meta
print(f"   {sum(ops.values())} nodes of {len(ops)} operators; metadata: job, step, checkpoint, "
      "version")
PY

echo "== 2b. names the model gives twice; a run dir whose name is not UTF-8"
# A name= equal to a generated "<index>.<type>" (clash) and one equal to a tensor's (tensor):
# ONNX values and nodes are made unique. The run dir's Latin-1 byte reaches the metadata
# (dtrain.checkpoint, dtrain.job's paths) as U+FFFD: protobuf's strings are UTF-8.
printf '[model]\nlayer = conv filters=3 kernel=3\nlayer = relu\nlayer = maxpool kernel=2 name=1.relu
layer = flatten\nlayer = dense name=fc\n' >"$SCRATCH/clash.ini"
printf '[model]\nlayer = conv filters=3 kernel=3 name=c\nlayer = relu name=c.weight
layer = flatten\nlayer = dense name=fc\n' >"$SCRATCH/tensor.ini"
for tag in clash tensor; do
  dir=$SCRATCH/$tag-$'\xe9'
  timeout 120 "$DTRAIN" --config "$SCRATCH/$tag.ini" --train-data "$SCRATCH/train.h5" \
    --test-data "" --mode sync --num-ps 0 --threads 1 --max-steps 2 --batch-size 16 \
    --run-dir "$dir" >"$SCRATCH/$tag.log" 2>&1 || { cat "$SCRATCH/$tag.log"; fail "$tag run"; }
  check_onnx "$tag" "$SCRATCH/$tag.ini" "$dir/ckpt-0000000002.h5" "$SCRATCH/test.h5"
done
"$ONNX_PY" - "$SCRATCH/clash.onnx" "$SCRATCH/tensor.onnx" <<'PY' || fail "names, metadata"
import sys, collections, onnx, onnxruntime as ort
for path in sys.argv[1:]:
    m = onnx.load(path)
    values = [t.name for t in m.graph.initializer] + [o for n in m.graph.node for o in n.output]
    nodes = [n.name for n in m.graph.node]
    for what, names in (("values", values), ("nodes", nodes)):
        twice = [k for k, c in collections.Counter(names).items() if c > 1]
        assert not twice, f"{path}: {what} named twice: {twice}"
    meta = {p.key: p.value for p in m.metadata_props}
    assert all(isinstance(v, str) for v in meta.values()), meta
    assert meta["dtrain.checkpoint"].endswith("-\ufffd/ckpt-0000000002.h5"), meta["dtrain.checkpoint"]
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert s.get_modelmeta().custom_metadata_map["dtrain.checkpoint"] == meta["dtrain.checkpoint"]
init = {t.name for t in onnx.load(sys.argv[2]).graph.initializer}
assert {"c.weight", "c.bias", "fc.weight", "fc.bias"} <= init, init  # the tensors keep their names
print("   values and nodes named once; metadata UTF-8 (U+FFFD for the Latin-1 byte), read by ORT")
PY

echo "== 3. the Fashion-MNIST CNN"
for split in "train 64 3" "test 16 4"; do
  read -r name n seed <<<"$split"
  "$BIN/make_dataset" "$SCRATCH/fm_$name.h5" --n "$n" --c 1 --h 28 --w 28 --classes 10 \
    --seed "$seed" >/dev/null
done
CNN=$SRC/jobs/fashion_mnist_cnn.ini
timeout 120 "$DTRAIN" --config "$CNN" --train-data "$SCRATCH/fm_train.h5" --test-data "" \
  --mode sync --num-ps 0 --threads 1 --max-steps 3 --batch-size 32 --run-dir "$SCRATCH/cnn" \
  >"$SCRATCH/cnn.log" 2>&1 || { cat "$SCRATCH/cnn.log"; fail "CNN run"; }
check_onnx cnn "$CNN" "$SCRATCH/cnn/ckpt-0000000003.h5" "$SCRATCH/fm_test.h5"

echo "== 4. ResNet-50"
sed 's/^\(layer = batchnorm.*\)$/\1 momentum=1/' "$SRC/jobs/resnet50_imagenet.ini" \
  >"$SCRATCH/r50.ini"
"$PY" - "$SCRATCH/r50_images.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["images"] = np.random.default_rng(5).standard_normal((4, 3, 224, 224)).astype(np.float32)
    f["labels"] = np.array([1, 2, 3, 4], np.int32)
    f.attrs["num_classes"] = 1000
PY
timeout 600 "$DTRAIN" --config "$SCRATCH/r50.ini" --synthetic "" --test-data "" \
  --train-data "$SCRATCH/r50_images.h5" --max-steps 1 --batch-size 4 --lr 0.001 --threads 2 \
  --summaries false --run-dir "$SCRATCH/r50" >"$SCRATCH/r50.log" 2>&1 ||
  { cat "$SCRATCH/r50.log"; fail "ResNet-50 step"; }
check_onnx r50 "$SCRATCH/r50.ini" "$SCRATCH/r50/ckpt-0000000001.h5" "$SCRATCH/r50_images.h5" 2

echo "== 5. Inception-v3: the checker and one image through ONNX Runtime"
timeout 600 "$DTRAIN" --config "$SRC/jobs/inception3_imagenet.ini" --max-steps 1 --batch-size 1 \
  --synthetic-samples 1 --threads 2 --summaries false --run-dir "$SCRATCH/inc" \
  >"$SCRATCH/inc.log" 2>&1 || { cat "$SCRATCH/inc.log"; fail "Inception-v3 step"; }
"$DTRAIN" export --checkpoint "$SCRATCH/inc/ckpt-0000000001.h5" --format onnx \
  --out "$SCRATCH/inc.onnx" >/dev/null
"$ONNX_PY" - "$SCRATCH/inc.onnx" <<'PY' || fail "Inception-v3"
import sys, numpy as np, onnx, onnxruntime as ort
onnx.checker.check_model(sys.argv[1], full_check=True)
opts = ort.SessionOptions()
opts.intra_op_num_threads = 2
s = ort.InferenceSession(sys.argv[1], opts, providers=["CPUExecutionProvider"])
x = np.random.default_rng(1).standard_normal((1, 3, 299, 299)).astype(np.float32)
(p,) = s.run(["probabilities"], {"input": x})
assert p.shape == (1, 1000) and np.isfinite(p).all() and abs(p.sum() - 1) < 1e-4, (p.shape, p.sum())
print("   checker passed; ONNX Runtime: 1 x 1000 probabilities")
PY
echo "PASS"
