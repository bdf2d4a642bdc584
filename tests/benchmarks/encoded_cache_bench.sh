#!/usr/bin/env bash
# tests/benchmarks/encoded_cache_bench.sh — what --cache-mb saves on encoded images: the batch
# reader alone (build/bin/dtrain_input_bench --epochs, one BatchReader per epoch sharing one
# EncodedCache, as a training worker), two whole epochs of RandomResizedCrop + flip, without the
# cache and with it, REPEATS times in alternating order. Per epoch it prints ms per batch — the
# data wait of a training step whose compute takes no time — and samples/s; the first epoch with
# the cache includes loading it.
#
# Usage: tests/benchmarks/encoded_cache_bench.sh [FILE]
#   FILE: an encoded-image file (default: Fashion-MNIST's 60,000 training images as JPEG quality
#         95, made by encoded_accuracy.sh in its DATA folder).
#   env: CROP (default 28), BATCH (64), THREADS (decode threads, 1), CACHE_MB (1024), REPEATS (3),
#        BUILD (build), OUT (raw lines; default runs/encoded_cache_bench.txt).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
crop=${CROP:-28}
batch=${BATCH:-64}
threads=${THREADS:-1}
cache_mb=${CACHE_MB:-1024}
repeats=${REPEATS:-3}
out=${OUT:-runs/encoded_cache_bench.txt}
bench=$build/bin/dtrain_input_bench
[[ -x $bench ]] || { echo "encoded_cache_bench.sh: build $bench first" >&2; exit 1; }
file=${1:-}
if [[ -z $file ]]; then
  OUT= bash tests/benchmarks/encoded_accuracy.sh data
  file=${DATA:-/tmp/dtrain-encoded-accuracy}/enc_train.h5
fi
mkdir -p "$(dirname "$out")"
{
  echo "# encoded_cache_bench.sh $file  (CROP=$crop BATCH=$batch THREADS=$threads CACHE_MB=$cache_mb REPEATS=$repeats)"
  echo "# $(date -u +%FT%TZ) $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out"
for ((r = 0; r < repeats; ++r)); do
  order=(0 "$cache_mb")
  (( r % 2 )) && order=("$cache_mb" 0)
  for mb in "${order[@]}"; do
    "$bench" "$file" --epochs 2 --cache-mb "$mb" --crop "$crop" --batch "$batch" \
      --threads "$threads" >>"$out"
  done
done
echo "# done, load average: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"

/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(open(sys.argv[1]).readline().rstrip())
print(f"{'cache MiB':>9}{'epoch':>7}{'ms/batch (median)':>19}{'min':>8}{'max':>8}"
      f"{'samples/s':>11}{'rows held':>11}{'hits':>9}")
for mb in sorted({r["cache_mb"] for r in rows}):
    for ep in (1, 2):
        sel = [r for r in rows if r["cache_mb"] == mb and r["epoch"] == ep]
        ms = [r["ms_per_batch"] for r in sel]
        med = statistics.median(ms)
        sps = statistics.median(r["samples_per_s"] for r in sel)
        print(f"{mb:>9}{ep:>7}{med:>19.3f}{min(ms):>8.3f}{max(ms):>8.3f}{sps:>11.0f}"
              f"{sel[0]['cache_rows']:>11}{sel[0]['cache_hits']:>9}")
sums = {r["checksum"] for r in rows if r["epoch"] == 2}
print("epoch-2 batches identical with and without the cache (checksum):", len(sums) == 1)
PY
