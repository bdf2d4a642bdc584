#!/usr/bin/env bash
# tests/benchmarks/pipeline_bench.sh — pipeline model parallelism measured (docs/pipeline.md):
#   memory    VGG-16 (jobs/vgg16_imagenet.ini, synthetic 3x224x224, batch 16): peak RSS of the
#             largest rank (results.json train_peak_rss_mb) at P = 1, 2, 4 (1F1B, M = 4) beside
#             the plan's activations per stage (--dry-run table), and GPipe against 1F1B at M = 8.
#   bubble    ResNet-20 (synthetic 1x28x28, batch 64): with --timeline, each stage's share of its
#             time spent waiting for a neighbour (pipeline-wait spans) against (P-1)/(M+P-1), and
#             samples/s of the pipeline against pure data parallelism (P = 1) on the same ranks.
#   ps        ResNet-20 as in bubble, P = 2, M = 4: the pipeline with a ps per stage (async, 2 ps)
#             against the allreduce pipeline on the same ranks, samples/s.
#   accuracy  ResNet-20 on Fashion-MNIST, EPOCHS epochs (default 2), seed 1: P = 1 against P = 2,
#             M = 4 (needs data/fashion_mnist/*.h5: jobs/run_fashion_mnist.sh).
# Needs GNU time (/usr/bin/time, Debian package time) for the per-stage peak RSS.
# More ranks than cores run oversubscribed (mpiexec --oversubscribe): the table says how many
# cores there were.
# Usage: tests/benchmarks/pipeline_bench.sh [memory] [bubble] [ps] [accuracy]   (default: all)
#   env: BUILD (default build), OUT (default docs/results/pipeline/<today>), EPOCHS.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
out=${OUT:-docs/results/pipeline/$(date +%F)}
parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(memory bubble ps accuracy)
py=/usr/bin/python3
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
echo "# $(nproc --all) cores; $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

# train NP NAME ARGS...: one run into $runs/NAME (log beside it); each rank's peak RSS (GNU time)
# in the log as "rank R peak-rss-kib K". The mode is MODE's (default: allreduce).
MODE=(--mode sync --num-ps 0)
train() {
  local np=$1 name=$2
  shift 2
  mpiexec --oversubscribe -n "$np" bash -c \
    'exec /usr/bin/time -f "rank $OMPI_COMM_WORLD_RANK peak-rss-kib %M" "$0" "$@"' \
    "$build/bin/dtrain" train --threads 1 "${MODE[@]}" --run-dir "$runs/$name" "$@" \
    >"$runs/$name.log" 2>&1 || { tail -20 "$runs/$name.log"; exit 1; }
}
# stage_rss LOG P: each stage's peak RSS in MiB, "s0/s1/..." (worker w runs stage P-1-w%P).
stage_rss() {
  "$py" - "$1" "$2" <<'PY'
import re, sys
P = int(sys.argv[2])
rss = {}
for m in re.finditer(r"rank (\d+) peak-rss-kib (\d+)", open(sys.argv[1]).read()):
    s = P - 1 - int(m.group(1)) % P
    rss[s] = max(rss.get(s, 0), int(m.group(2)) / 1024)
print("/".join(f"{rss[s]:.0f}" for s in sorted(rss)))
PY
}
get() { "$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

memory() {
  local vgg=(--config jobs/vgg16_imagenet.ini --synthetic 3x224x224:1000 --train-data ""
             --test-data "" --batch-size 16 --max-steps 2 --epochs 1 --log-every 1)
  echo "== memory: VGG-16, batch 16, peak RSS of the largest rank after 2 steps"
  echo "| P | M | schedule | ranks | peak RSS MiB per stage (whole run) | train peak RSS MiB (largest rank) | plan: activations held per stage MiB |"
  echo "|---:|---:|---|---:|---|---:|---|"
  for cfg in "1 4 1f1b" "2 4 1f1b" "4 4 1f1b" "2 8 gpipe" "2 8 1f1b"; do
    read -r P M s <<<"$cfg"
    train "$P" "vgg-$P-$M-$s" "${vgg[@]}" --pipeline-stages "$P" --micro-batches "$M" --schedule "$s"
    local held
    held=$(grep -E "^#  +[0-9]+  +[0-9]+-" "$runs/vgg-$P-$M-$s.log" | awk '{print $(NF-4)}' |
           paste -sd/ -)
    echo "| $P | $M | $s | $P | $(stage_rss "$runs/vgg-$P-$M-$s.log" "$P") |" \
      "$(get "$runs/vgg-$P-$M-$s/results.json" train_peak_rss_mb) | ${held:-whole model} |"
  done | tee "$out/memory.md"
}

bubble() {
  local res=(--config jobs/resnet20_cifar.ini --synthetic 1x28x28:10 --train-data "" --test-data ""
             --batch-size 64 --max-steps 12 --epochs 1 --log-every 4 --timeline)
  echo "== bubble: ResNet-20, batch 64 per replica, 12 steps"
  echo "| ranks | P | D | M | schedule | bubble (P-1)/(M+P-1) | measured wait share per stage | samples/s | samples/s P = 1 on the same ranks |"
  echo "|---:|---:|---:|---:|---|---:|---|---:|---:|"
  for ranks in 2 4; do
    train "$ranks" "dp-$ranks" "${res[@]}"
    local dp
    dp=$(get "$runs/dp-$ranks/results.json" samples_per_sec)
    for cfg in "2 4 1f1b" "2 8 1f1b" "2 8 gpipe" "4 8 1f1b"; do
      read -r P M s <<<"$cfg"
      ((ranks % P == 0)) || continue
      local name="rn-$ranks-$P-$M-$s"
      train "$ranks" "$name" "${res[@]}" --pipeline-stages "$P" --micro-batches "$M" --schedule "$s"
      local share
      share=$("$py" - "$runs/$name/timeline.json" "$P" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
P = int(sys.argv[2])
busy, wait = {}, {}
for e in ev:
    if e.get("ph") != "X": continue
    if e["name"] in ("forward", "backward"): busy[e["pid"]] = busy.get(e["pid"], 0) + e["dur"]
    if e["name"] == "pipeline-wait": wait[e["pid"]] = wait.get(e["pid"], 0) + e["dur"]
# worker w runs stage P-1-(w % P); pid = world rank = worker index (no ps)
by_stage = {}
for pid in busy:
    s = P - 1 - pid % P
    by_stage.setdefault(s, []).append(wait.get(pid, 0) / (busy[pid] + wait.get(pid, 0)))
print(" / ".join(f"{sum(v) / len(v):.2f}" for s, v in sorted(by_stage.items())))
PY
)
      printf '| %d | %d | %d | %d | %s | %.3f | %s | %s | %s |\n' "$ranks" "$P" $((ranks / P)) "$M" \
        "$s" "$("$py" -c "print(($P-1)/($M+$P-1))")" "$share" \
        "$(get "$runs/$name/results.json" samples_per_sec)" "$dp"
    done
  done | tee "$out/bubble.md"
}

ps() {
  local res=(--config jobs/resnet20_cifar.ini --synthetic 1x28x28:10 --train-data "" --test-data ""
             --batch-size 64 --max-steps 12 --epochs 1 --log-every 4 --pipeline-stages 2
             --micro-batches 4)
  echo "== ps: ResNet-20, batch 64 per replica, 12 steps, P = 2, M = 4, 1F1B"
  echo "| ranks | exchange | ps | D | samples/s |"
  echo "|---:|---|---:|---:|---:|"
  for ranks in 4 6; do
    MODE=(--mode sync --num-ps 0)
    train "$ranks" "ar-$ranks" "${res[@]}"
    MODE=(--mode async --num-ps 2)
    train "$ranks" "ps-$ranks" "${res[@]}"
    MODE=(--mode sync --num-ps 0)
    echo "| $ranks | allreduce | 0 | $((ranks / 2)) | $(get "$runs/ar-$ranks/results.json" samples_per_sec) |"
    echo "| $ranks | async, a ps per stage | 2 | $(((ranks - 2) / 2)) | $(get "$runs/ps-$ranks/results.json" samples_per_sec) |"
  done | tee "$out/ps.md"
}

accuracy() {
  local epochs=${EPOCHS:-2}
  local acc=(--config jobs/resnet20_cifar.ini --train-data data/fashion_mnist/train.h5
             --test-data data/fashion_mnist/test.h5 --epochs "$epochs" --seed 1 --log-every 200)
  echo "== accuracy: ResNet-20 on Fashion-MNIST, $epochs epochs, seed 1"
  echo "| run | ranks | test accuracy | samples/s |"
  echo "|---|---:|---:|---:|"
  train 1 acc-p1 "${acc[@]}"
  train 2 acc-p2 "${acc[@]}" --pipeline-stages 2 --micro-batches 4
  for r in "acc-p1 1 P = 1" "acc-p2 2 P = 2, M = 4, 1F1B"; do
    read -r name ranks label <<<"$r"
    echo "| $label | $ranks | $(get "$runs/$name/results.json" test_accuracy) | $(get "$runs/$name/results.json" samples_per_sec) |"
  done | tee "$out/accuracy.md"
}

for p in "${parts[@]}"; do "$p"; done
