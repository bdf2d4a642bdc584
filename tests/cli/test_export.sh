#!/usr/bin/env bash
# tests/cli/test_export.sh — named tensors, `dtrain export --format safetensors`, --init-from
# (train/pretrained.hpp, io/safetensors.hpp, docs/checkpoints.md).
#   1. a checkpoint names its tensors: /tensors/<name> in PyTorch's shapes (h5py), together exactly
#      /params; /buffers/<name> one row per worker.
#   2. the format-1 checkpoint kept in tests/cli/fixtures (written by dtrain 8ac97ec, before named
#      tensors) still loads: predict gives the probabilities that dtrain wrote then (≤ 1e-6), and
#      it exports under the names its model gets.
#   3. export → predict --init-from scores exactly as predict --checkpoint; --dtype bf16 holds the
#      bf16 rounding of every float; --init-exclude re-initialises a head of another size and
#      training starts from the rest; --dry-run checks the file (names, shapes) and reports what it
#      loads, writing nothing; --resume from a checkpoint has priority over --init-from, and
#      without one starts from the file (saying so, not "from scratch").
#   4. bad input, each one error naming the file, exit 2, nothing written: a truncated file, JSON
#      that does not parse, a header over 100 MB, overlapping offsets, an unknown dtype, missing /
#      unexpected names and a shape mismatch (all listed in one message; --dry-run too; a training
#      run's, and a missing file's, make no run dir), an existing --out.
#   5. real clients (a Python with torch, torchvision and safetensors: torch_python.sh; exit 77 =
#      skipped with the reason when none can be had): a seeded torchvision ResNet-50 (batchnorm
#      statistics of the 4 test images) saved with safetensors loads with --init-from and dtrain
#      predict's probabilities give PyTorch's eval-mode logits (torch_compare.py: l_i - l_max =
#      log p_i - log p_max, ≤ 1e-4 relative to the largest; classes whose probability underflows
#      left out, ≥ 90 % compared); then one dtrain training step from it (synthetic data),
#      exported: torchvision.models.resnet50() loads it with load_state_dict(strict=True) and its
#      logits equal dtrain predict's the same way.
#      The CNN and ResNet-20 jobs: test_export_graphs.sh.
set -euo pipefail
source "$(dirname "$0")/common.sh"
FIX=$SRC/tests/cli/fixtures

make_data train 96 --seed 21 --template-seed 9
make_data test 40 --seed 23 --template-seed 9
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5"
        --threads 1)
THREADS=1  # predict_into's (common.sh)

echo "== 1. named tensors in a checkpoint"
run 2 "$SCRATCH/sync" --mode sync --num-ps 0 --epochs 2
ckpt=$SCRATCH/sync/ckpt-0000000006.h5
"$PY" - "$ckpt" <<'PY' || fail "named tensors"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["format_version"] == 2
    names = list(f.attrs["param_names"])
    assert names == ["0.conv.weight", "0.conv.bias", "1.batchnorm.weight", "1.batchnorm.bias",
                     "5.dense.weight", "5.dense.bias", "8.dense.weight", "8.dense.bias"], names
    shapes = {n: f["tensors"][n].shape for n in names}
    assert shapes["0.conv.weight"] == (6, 1, 3, 3) and shapes["5.dense.weight"] == (24, 216), shapes
    assert shapes["8.dense.bias"] == (4,), shapes
    flat = np.concatenate([f["tensors"][n][()].ravel() for n in names])
    assert np.array_equal(flat, f["params"][()]), "the named tensors are not /params"
    bn = f["buffers"]["1.batchnorm.running_var"][()]
    assert bn.shape == (2, 6) and np.array_equal(bn, f["model_state"][()][:, 6:12]), bn.shape
print("   /tensors: 8 parameters in PyTorch shapes = /params; /buffers: 2 workers x 6")
PY

echo "== 2. a format-1 checkpoint still loads"
predict_into "$SCRATCH/v1.h5" --config "$SCRATCH/job.ini" --checkpoint "$FIX/ckpt_v1_tiny_cnn.h5" \
  --data "$SCRATCH/test.h5"
"$PY" - "$SCRATCH/v1.h5" "$FIX/ckpt_v1_tiny_cnn.probabilities.txt" <<'PY' || fail "format 1"
import sys, h5py, numpy as np
got = h5py.File(sys.argv[1], "r")["probabilities"][()]
want = np.loadtxt(sys.argv[2])
assert got.shape == want.shape and np.abs(got - want).max() <= 1e-6, np.abs(got - want).max()
print(f"   probabilities = format-1 dtrain's (max |diff| {np.abs(got - want).max():.2g})")
PY
"$DTRAIN" export --checkpoint "$FIX/ckpt_v1_tiny_cnn.h5" --out "$SCRATCH/v1.safetensors" \
  >"$SCRATCH/export_v1.log" 2>&1 || { cat "$SCRATCH/export_v1.log"; fail "export of format 1"; }
grep -q "11 tensors" "$SCRATCH/export_v1.log" || { cat "$SCRATCH/export_v1.log"; fail "export_v1"; }

echo "== 3. export, --init-from, --init-exclude, --dtype bf16, --resume first"
"$DTRAIN" export --checkpoint "$ckpt" --out "$SCRATCH/m.safetensors" >/dev/null
"$DTRAIN" export --checkpoint "$ckpt" --out "$SCRATCH/m16.safetensors" --dtype bf16 >/dev/null
predict_into "$SCRATCH/p_ckpt.h5" --config "$SCRATCH/job.ini" --checkpoint "$ckpt" \
  --data "$SCRATCH/test.h5"
predict_into "$SCRATCH/p_init.h5" --config "$SCRATCH/job.ini" --init-from "$SCRATCH/m.safetensors" \
  --data "$SCRATCH/test.h5"
# The summary names the parameters' source as tensors, not as a checkpoint of step 0.
grep -q "| tensors $SCRATCH/m.safetensors |" "$SCRATCH/p_init.h5.log" ||
  { cat "$SCRATCH/p_init.h5.log"; fail "predict --init-from's summary line"; }
"$PY" - "$SCRATCH" "$ckpt" <<'PY' || fail "export round trip"
import sys, json, struct, h5py, numpy as np
s, ckpt = sys.argv[1], sys.argv[2]
a = h5py.File(f"{s}/p_ckpt.h5", "r")["probabilities"][()]
b = h5py.File(f"{s}/p_init.h5", "r")["probabilities"][()]
assert np.array_equal(a, b), "predict --init-from differs from predict --checkpoint"
def load(path):  # the format by hand: 8-byte length, JSON header, data
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    return h, raw[8 + n:]
h, data = load(f"{s}/m.safetensors")
h16, data16 = load(f"{s}/m16.safetensors")
meta = h.pop("__metadata__")
h16.pop("__metadata__")
assert meta["format"] == "pt" and meta["dtrain.global_step"] == "6" and "layer = conv" in meta["dtrain.job"]
assert list(h)[-1] == "1.batchnorm.num_batches_tracked" and h[list(h)[-1]]["dtype"] == "I64"
with h5py.File(ckpt, "r") as f:
    for n in f.attrs["param_names"]:
        e, e16 = h[n], h16[n]
        x = np.frombuffer(data[e["data_offsets"][0]:e["data_offsets"][1]], "<f4").reshape(e["shape"])
        assert np.array_equal(x, f["tensors"][n][()]), n
        y = np.frombuffer(data16[e16["data_offsets"][0]:e16["data_offsets"][1]], "<u2")
        assert e16["dtype"] == "BF16"
        u = x.ravel().view(np.uint32).astype(np.uint64)  # round to nearest even
        want = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        assert np.array_equal(y, want), f"{n}: bf16 values"
    mean = f["buffers"]["1.batchnorm.running_mean"][()].astype(np.float64).mean(0).astype(np.float32)
    e = h["1.batchnorm.running_mean"]
    got = np.frombuffer(data[e["data_offsets"][0]:e["data_offsets"][1]], "<f4")
    assert np.array_equal(got, mean), "running_mean is not the workers' mean"
print("   predict --init-from = predict --checkpoint; F32 and BF16 values, metadata, num_batches_tracked")
PY
sed 's/^layer = dense units=24$/layer = dense units=20/' "$SCRATCH/job.ini" >"$SCRATCH/job20.ini"
mkdir -p "$SCRATCH/ft"
timeout 120 "$MPIEXEC" -n 2 "$DTRAIN" --config "$SCRATCH/job20.ini" --train-data "$SCRATCH/train.h5" \
  --test-data "$SCRATCH/test.h5" --threads 1 --mode sync --num-ps 0 --epochs 1 --run-dir "$SCRATCH/ft" \
  --init-from "$SCRATCH/m.safetensors" --init-exclude 5.dense,8.dense >"$SCRATCH/ft.log" 2>&1 ||
  { cat "$SCRATCH/ft.log"; fail "training with --init-from --init-exclude"; }
grep -q "init-from .*: 6 tensors loaded, 4 excluded" "$SCRATCH/ft.log" || { cat "$SCRATCH/ft.log"; fail "ft"; }
"$PY" - "$SCRATCH/m.safetensors" "$SCRATCH/ft/ckpt-0000000003.h5" <<'PY' || fail "fine-tuning start"
import sys, json, struct, h5py, numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h, data = json.loads(raw[8:8 + n]), raw[8 + n:]
with h5py.File(sys.argv[2], "r") as f:
    assert f["tensors"]["5.dense.weight"].shape == (20, 216)
    e = h["0.conv.weight"]
    w0 = np.frombuffer(data[e["data_offsets"][0]:e["data_offsets"][1]], "<f4")
    moved = np.abs(f["tensors"]["0.conv.weight"][()].ravel() - w0).max()
    assert 0 < moved < 0.5, f"conv1 moved {moved} from the loaded weights in 3 steps"
print(f"   fine-tuned from the file (conv weights within {moved:.3g} of it after 3 steps), new head 20 units")
PY
echo "-- --dry-run checks the --init-from file, trains nothing"
timeout 60 "$MPIEXEC" -n 2 "$DTRAIN" --config "$SCRATCH/job20.ini" --train-data "$SCRATCH/train.h5" \
  --test-data "$SCRATCH/test.h5" --threads 1 --mode sync --num-ps 0 --run-dir "$SCRATCH/dry" \
  --init-from "$SCRATCH/m16.safetensors" --init-exclude 5.dense,8.dense --dry-run \
  >"$SCRATCH/dry.log" 2>&1 || { cat "$SCRATCH/dry.log"; fail "--dry-run --init-from"; }
grep -q "^# --init-from $SCRATCH/m16.safetensors: fits the model (names and shapes): 6 tensors to load, 4 excluded" \
  "$SCRATCH/dry.log" || { cat "$SCRATCH/dry.log"; fail "--dry-run did not report the --init-from file"; }
[[ ! -e $SCRATCH/dry ]] || fail "--dry-run --init-from wrote $SCRATCH/dry"
! grep -q "global_step" "$SCRATCH/dry.log" || { cat "$SCRATCH/dry.log"; fail "--dry-run trained"; }
run 2 "$SCRATCH/sync" --mode sync --num-ps 0 --epochs 3 --resume --init-from "$SCRATCH/m16.safetensors"
grep -q "init-from .* not used: resuming from a checkpoint" "$SCRATCH/sync.log" ||
  { cat "$SCRATCH/sync.log"; fail "--resume did not take priority over --init-from"; }
grep -q "resuming from global_step 6" "$SCRATCH/sync.log" || fail "no resume at 6"
# Nothing to resume: the run starts from the file, and says so (not "from scratch" as well).
run 1 "$SCRATCH/fresh" --mode sync --num-ps 0 --max-steps 1 --resume \
  --init-from "$SCRATCH/m16.safetensors"
grep -q "no checkpoint in '$SCRATCH/fresh', starting from --init-from $SCRATCH/m16.safetensors" \
  "$SCRATCH/fresh.log" && grep -q "^# --init-from $SCRATCH/m16.safetensors: 10 tensors loaded" \
  "$SCRATCH/fresh.log" && ! grep -q "from scratch" "$SCRATCH/fresh.log" ||
  { cat "$SCRATCH/fresh.log"; fail "--resume --init-from with no checkpoint"; }

echo "== 4. bad input: one error naming the file, nothing written"
"$PY" - "$SCRATCH/m.safetensors" "$SCRATCH" <<'PY'
import sys, json, struct
src, d = sys.argv[1], sys.argv[2]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h, data = json.loads(raw[8:8 + n]), raw[8 + n:]
def write(name, header, body=data, length=None):
    text = json.dumps(header).encode() if isinstance(header, dict) else header
    with open(f"{d}/{name}.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text) if length is None else length) + text + body)
open(f"{d}/truncated.safetensors", "wb").write(raw[:len(raw) - 100])
write("notjson", b'{"0.conv.weight": {"dtype": "F32", "shape": [6, 1, 3, 3], "data_off')
write("huge", b"{}", b"", length=200_000_000)
over = json.loads(json.dumps(h))
b = over["0.conv.bias"]["data_offsets"]
over["0.conv.bias"]["data_offsets"] = [b[0] - 8, b[1] - 8]
write("overlap", over)
dt = json.loads(json.dumps(h))
dt["0.conv.bias"]["dtype"] = "F33"
write("dtype", dt)
names = json.loads(json.dumps(h))
names["conv1.bias"] = names.pop("0.conv.bias")
names["5.dense.weight"]["shape"] = [216, 24]
write("names", names)
PY
bad() {  # bad CASE WORDS: predict --init-from CASE.safetensors fails naming the file and WORDS
  local f=$SCRATCH/$1.safetensors
  expect_error 0 "$f|$2" predict --config "$SCRATCH/job.ini" --init-from "$f" --data "$SCRATCH/test.h5" \
    --out "$SCRATCH/bad_$1.h5" --threads 1
  [[ $last_rc -eq 2 ]] || fail "$1: exit $last_rc, expected 2"
  [[ ! -e $SCRATCH/bad_$1.h5 && ! -e $SCRATCH/bad_$1.h5.tmp ]] || fail "$1: an output was written"
}
bad truncated "truncated"
bad notjson "not valid JSON"
bad huge "more than the 100 MB"
bad overlap "overlap"
bad dtype "unknown dtype 'F33'"
bad names "missing 1: 0.conv.bias|unexpected 1: conv1.bias|shape mismatch 1: 5.dense.weight (file [216, 24], model [24, 216])"
# The file is read before the run dir is made: a refused one leaves no directory behind.
expect_error 2 "$SCRATCH/names.safetensors|missing 1: 0.conv.bias" "${COMMON[@]}" \
  --run-dir "$SCRATCH/badrun/a/b" --init-from "$SCRATCH/names.safetensors"
[[ ! -e $SCRATCH/badrun ]] || fail "a refused --init-from run made its run dir"
expect_error 2 "option --init-from: safetensors file '$SCRATCH/absent.safetensors' does not exist" "${COMMON[@]}" \
  --run-dir "$SCRATCH/badrun/a/b" --init-from "$SCRATCH/absent.safetensors"
[[ ! -e $SCRATCH/badrun ]] || fail "a missing --init-from file: the run dir was made"
expect_error 2 "$SCRATCH/names.safetensors|missing 1: 0.conv.bias|unexpected 1: conv1.bias" \
  "${COMMON[@]}" --run-dir "$SCRATCH/baddry" --init-from "$SCRATCH/names.safetensors" --dry-run
[[ $last_rc -eq 2 && ! -e $SCRATCH/baddry ]] || fail "--dry-run of a bad --init-from: exit $last_rc"
# The model is the checkpoint's: a job file (even another model's), --layer or --data were
# accepted and ignored without a word.
expect_error 0 "dtrain export|--config, --layer, --data and --init-from are not used" export \
  --checkpoint "$ckpt" --config "$SCRATCH/job.ini" --out "$SCRATCH/cfg.safetensors"
expect_error 0 "dtrain export|are not used" export --checkpoint "$ckpt" --layer dense \
  --out "$SCRATCH/layer.safetensors"
[[ ! -e $SCRATCH/cfg.safetensors && ! -e $SCRATCH/layer.safetensors ]] || fail "a refused export wrote"
cp "$SCRATCH/m16.safetensors" "$SCRATCH/keep.safetensors"
expect_error 0 "$SCRATCH/keep.safetensors|already exists" export --checkpoint "$ckpt" \
  --out "$SCRATCH/keep.safetensors"
cmp -s "$SCRATCH/keep.safetensors" "$SCRATCH/m16.safetensors" || fail "export overwrote an existing file"
cp "$SCRATCH/m16.safetensors" "$SCRATCH/t.safetensors.tmp"
expect_error 0 "$SCRATCH/t.safetensors.tmp|already exists|did not finish" export \
  --checkpoint "$ckpt" --out "$SCRATCH/t.safetensors"
[[ $last_rc -eq 2 && ! -e $SCRATCH/t.safetensors ]] || fail "an existing <out>.tmp: exit $last_rc"
cmp -s "$SCRATCH/t.safetensors.tmp" "$SCRATCH/m16.safetensors" ||
  fail "export overwrote or removed an existing <out>.tmp"
rm "$SCRATCH/t.safetensors.tmp"
expect_error 0 "$SCRATCH/test.h5|not a dtrain checkpoint" export --checkpoint "$SCRATCH/test.h5" \
  --out "$SCRATCH/x.safetensors"
[[ ! -e $SCRATCH/x.safetensors ]] || fail "export of a non-checkpoint wrote its output"

echo "== 5. PyTorch: torchvision loads dtrain's ResNet-50, dtrain loads torchvision's"
TORCH_SKIP_NOTE="cases 1-4 passed"
source "$(dirname "$0")/torch_python.sh"
R50=$SRC/jobs/resnet50_imagenet.ini
THREADS=2
# Torchvision's ResNet-50, seeded, with batchnorm statistics of the 4 test images (train mode,
# cumulative average: eval-mode logits of a moderate range, so that nearly every probability is
# far from underflow and every logit is compared), saved with safetensors; its logits.
"$TORCH_PY" - "$SCRATCH" <<'PY'
import sys, h5py, numpy as np, torch, torchvision
from safetensors.torch import save_file
s = sys.argv[1]
torch.set_num_threads(2)
x = np.random.default_rng(5).standard_normal((4, 3, 224, 224)).astype(np.float32)
with h5py.File(f"{s}/images.h5", "w") as f:
    f["images"] = x
torch.manual_seed(7)
t = torchvision.models.resnet50()
for mod in t.modules():
    if isinstance(mod, torch.nn.BatchNorm2d):
        mod.momentum = None
        mod.reset_running_stats()
with torch.no_grad():
    t.train()(torch.from_numpy(x))
    t.eval()
    np.save(f"{s}/torch_logits.npy", t(torch.from_numpy(x)).numpy())
save_file(t.state_dict(), f"{s}/torch_r50.safetensors")
PY
echo "-- torchvision state_dict -> dtrain predict --init-from"
predict_into "$SCRATCH/torch_pred.h5" --config "$R50" \
  --init-from "$SCRATCH/torch_r50.safetensors" \
  --data "$SCRATCH/images.h5"
"$TORCH_PY" - "$SCRATCH" <<'PY'
import os, sys, h5py, numpy as np
sys.path.insert(0, os.environ["SRC"] + "/tests/cli")
from torch_compare import compare
s = sys.argv[1]
rel, used = compare(np.load(f"{s}/torch_logits.npy").astype(np.float64),
                    h5py.File(f"{s}/torch_pred.h5", "r")["probabilities"][()])
assert rel <= 1e-4, f"torchvision -> dtrain: logits differ by {rel:.3g} relative"
print(f"   max |diff| / max |logit| = {rel:.2g} ({used} logits of 4 images)")
PY
echo "-- dtrain: one training step from it, export; torchvision load_state_dict(strict=True)"
timeout 600 "$DTRAIN" --config "$R50" --run-dir "$SCRATCH/r50" --max-steps 1 --batch-size 2 \
  --synthetic-samples 2 --threads 2 --summaries false --init-from "$SCRATCH/torch_r50.safetensors" \
  >"$SCRATCH/r50.log" 2>&1 || { cat "$SCRATCH/r50.log"; fail "ResNet-50 step"; }
r50=$(ls "$SCRATCH"/r50/ckpt-*.h5 | tail -1)
"$DTRAIN" export --checkpoint "$r50" --out "$SCRATCH/r50.safetensors" >/dev/null
predict_into "$SCRATCH/r50_pred.h5" --config "$R50" --checkpoint "$r50" --data "$SCRATCH/images.h5"
"$TORCH_PY" - "$SCRATCH" <<'PY'
import os, sys, h5py, numpy as np
sys.path.insert(0, os.environ["SRC"] + "/tests/cli")
from torch_compare import compare
import torch, torchvision
from safetensors.torch import load_file
s = sys.argv[1]
torch.set_num_threads(2)
x = torch.from_numpy(h5py.File(f"{s}/images.h5", "r")["images"][()])
m = torchvision.models.resnet50()
m.load_state_dict(load_file(f"{s}/r50.safetensors"), strict=True)
before = load_file(f"{s}/torch_r50.safetensors")
moved = max((m.state_dict()[k].float() - v.float()).abs().max().item() for k, v in before.items())
assert moved > 0, "the training step changed nothing"
with torch.no_grad():
    rel, used = compare(m.eval()(x).double().numpy(),
                        h5py.File(f"{s}/r50_pred.h5", "r")["probabilities"][()])
assert rel <= 1e-4, f"dtrain -> torchvision: logits differ by {rel:.3g} relative"
print(f"   max |diff| / max |logit| = {rel:.2g} ({used} logits of 4 images)")
PY
echo "PASS"
