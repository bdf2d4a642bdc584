#!/usr/bin/env bash
# tests/benchmarks/input_bench.sh — the input pipeline against PyTorch's, both in this one run on the
# same files: decode + RandomResizedCrop(224) + flip + normalize, samples/s per core.
#   dtrain:  build/bin/dtrain_input_bench on the files converted with images_to_h5.py --store
#            encoded (the JPEG bytes kept as they are): HDF5 read, libjpeg-turbo decode of the
#            crop's region (DCT scaling where the crop allows), Pillow-exact bilinear resize,
#            flip, normalization to float32, over --data-threads N;
#   PyTorch: torchvision ImageFolder over the same JPEG files, RandomResizedCrop(224),
#            RandomHorizontalFlip, ToTensor, Normalize, DataLoader with N worker processes
#            (0 for one core: decoding in the main process), torch threads 1.
# The images are made here: Fashion-MNIST pictures upscaled to about ImageNet's typical 500×375
# (sides 400-500 × 300-375, a third portrait), coloured and with mild sensor-like noise, saved as
# JPEG quality 90 (about the size of an ImageNet JPEG).
#
# Beside each thread count N > 1, the host's ceiling: N independent one-thread dtrain_input_bench
# processes started together (no shared process, no batch to finish together), their samples/s
# summed — what N cores of this host decode when nothing is shared but the hardware (caches,
# memory, SMT siblings, clocks). dtrain's "busy threads" (CPU seconds / wall seconds of the timed
# interval) tells the rest: near N, each thread is slower; below N, threads wait. The last
# column is dtrain's rate with uint8 batches (--uint8: a GPU worker's reader, which leaves the
# normalization to the device): the CPU's part of feeding a GPU.
#
# Usage: tests/benchmarks/input_bench.sh [THREADS...]      (default "1 2")
#   env: IMAGES (default 600), SAMPLES per measurement (default 1536), BUILD (default build),
#        TORCH_PYTHON (interpreter with torch + torchvision; default /opt/torchbench/bin/python,
#        created with pip from PyPI if missing), OUT (results folder; default
#        docs/results/input/<today>), REPEATS (default 3: the best of each is reported),
#        PYTHON (interpreter with numpy, Pillow and h5py that makes the files and the table;
#        default /usr/bin/python3), FASHION_MNIST (folder of Fashion-MNIST's idx .gz files;
#        default /usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist), CEILING
#        (default 1; 0 skips the ceiling runs), MAX_SIDE (default 0: the JPEGs as made; S: converted
#        with images_to_h5.py --max-side S, shorter side S as docs/imagenet.md stores ImageNet,
#        and PyTorch reads those same stored files).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
threads=("$@")
[[ ${#threads[@]} -gt 0 ]] || threads=(1 2)
images=${IMAGES:-600}
samples=${SAMPLES:-1536}
repeats=${REPEATS:-3}
out=${OUT:-docs/results/input/$(date +%F)}
py=${TORCH_PYTHON:-/opt/torchbench/bin/python}
tools=${PYTHON:-/usr/bin/python3}
fmnist=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
ceiling=${CEILING:-1}
max_side=${MAX_SIDE:-0}
if ! "$py" -c "import torch, torchvision" 2>/dev/null; then
  echo "# installing the PyTorch reference into /opt/torchbench (benchmark only)" >&2
  python3 -m venv /opt/torchbench && /opt/torchbench/bin/pip install -q torch torchvision numpy h5py
  py=/opt/torchbench/bin/python
fi
[[ -x $build/bin/dtrain_input_bench ]] || { echo "input_bench.sh: build $build/bin/dtrain_input_bench first" >&2; exit 1; }
work=$(mktemp -d /tmp/dtrain-input-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

"$tools" tests/benchmarks/make_jpegs.py "$work/jpeg" "$images" "$fmnist"
"$tools" data-tools/images_to_h5.py "$work/jpeg" --store encoded --max-side "$max_side" --out "$work/enc.h5" --quiet
jpegs=$work/jpeg
if [[ $max_side != 0 ]]; then  # PyTorch reads the files as stored (re-encoded at shorter side S)
  "$tools" - "$work/enc.h5" "$work/stored" <<'PY'
import os, sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    for i, (data, label) in enumerate(zip(f["images"], f["labels"])):
        os.makedirs(f"{sys.argv[2]}/c{label}", exist_ok=True)
        with open(f"{sys.argv[2]}/c{label}/{i:05d}.jpg", "wb") as out:
            out.write(data.tobytes())
PY
  jpegs=$work/stored
fi

mkdir -p "$out"
log=$out/input_bench.txt
{
  echo "# tests/benchmarks/input_bench.sh ${threads[*]}  (IMAGES=$images SAMPLES=$samples REPEATS=$repeats BUILD=$build MAX_SIDE=$max_side)"
  echo "# $(date -u +%FT%TZ) host $(hostname) $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# dtrain $(git describe --always --dirty 2>/dev/null)"
  # The topology the ceiling depends on: SMT siblings per core, sockets, caches.
  lscpu 2>/dev/null | grep -E "^(Thread|Core|Socket|NUMA node\(s\)|L[23] cache)" | sed 's/^/# /'
} | tee "$log"
best() {  # best of REPEATS runs of a command printing one JSON line: the line with the top samples_per_s
  local lines=()
  for ((r = 0; r < repeats; ++r)); do lines+=("$("$@")"); done
  printf '%s\n' "${lines[@]}" | "$tools" -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
print(json.dumps(max(rows, key=lambda r: r["samples_per_s"])))'
}
together() {  # N one-thread processes started together: one JSON line, their samples/s summed
  local n=$1 k
  for ((k = 0; k < n; ++k)); do
    "$build/bin/dtrain_input_bench" "$work/enc.h5" --threads 1 --samples "$samples" >"$work/ceiling.$k" &
  done
  wait
  cat "$work"/ceiling.* | "$tools" -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
print(json.dumps({"processes": len(rows), "samples_per_s": round(sum(r["samples_per_s"] for r in rows), 1),
                  "each": [r["samples_per_s"] for r in rows]}))'
  rm -f "$work"/ceiling.*
}
for t in "${threads[@]}"; do
  d=$(best "$build/bin/dtrain_input_bench" "$work/enc.h5" --threads "$t" --samples "$samples")
  u=$(best "$build/bin/dtrain_input_bench" "$work/enc.h5" --threads "$t" --samples "$samples" --uint8)
  c=$d
  [[ $t -gt 1 && $ceiling != 0 ]] && c=$(best together "$t")
  w=$((t == 1 ? 0 : t))
  p=$(best "$py" tests/benchmarks/input_reference.py "$jpegs" --workers "$w" --samples "$samples")
  echo "dtrain  threads $t: $d" | tee -a "$log"
  echo "dtrain  threads $t, uint8 batches: $u" | tee -a "$log"
  [[ $t -gt 1 && $ceiling != 0 ]] && echo "ceiling $t x 1 thread: $c" | tee -a "$log"
  echo "pytorch workers $w: $p" | tee -a "$log"
  "$tools" - "$t" "$d" "$p" "$c" "$ceiling" "$u" <<'PY' | tee -a "$log"
import json, sys
t, d, p, c = int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
u = json.loads(sys.argv[6])
dc, pc, cc = d["samples_per_s"] / t, p["samples_per_s"] / t, c["samples_per_s"] / t
busy = f"{d['busy_threads']:.1f}" if "busy_threads" in d else "-"
ceil = f"{cc:.0f} | {dc / cc:.2f}" if t == 1 or sys.argv[5] != "0" else "- | -"
print(f"| {t} | {d['samples_per_s']:.0f} | {dc:.0f} | {p['samples_per_s']:.0f} | {pc:.0f} | ×{dc / pc:.2f} | {busy} | {ceil} | {u['samples_per_s'] / t:.0f} |")
PY
done
echo "# rows: | threads (cores) | dtrain samples/s | dtrain per core | PyTorch samples/s | PyTorch per core | dtrain / PyTorch | dtrain busy threads | host ceiling per core | dtrain / ceiling | dtrain uint8 per core |" | tee -a "$log"
echo "input_bench.sh: wrote $log"
