#!/usr/bin/env bash
# Interleaved VGG-16 training runs (batch 2, 12 steps), --fuse auto vs off, the same binary: the
# load average before each run, step-time p50/p90/max, step anatomy, CPU seconds (/usr/bin/time).
# THREADS (default 2), RUNS (default "1 2 3 4"; the 2-thread table used 1..8).
cd "$(dirname "$0")/../../../.."
for i in ${RUNS:-1 2 3 4}; do
  for f in auto off; do
    load=$(uptime | sed 's/.*load average: //')
    out=$( { /usr/bin/time -f "cpu %U user %S sys" build/bin/dtrain \
      --config jobs/vgg16_imagenet.ini --mode sync --num-ps 0 --threads "${THREADS:-2}" \
      --test-data "" --synthetic 3x224x224:1000 --batch-size 2 --synthetic-samples 32 \
      --max-steps 12 --log-every 1 --fuse $f --run-dir /tmp/fuse_runs/$f$i; } 2>&1)
    rm -rf /tmp/fuse_runs/$f$i
    p50=$(echo "$out" | grep "step time ms p50" | sed 's/.*w0 //')
    anat=$(echo "$out" | grep "step anatomy" | sed 's/.*w0 //')
    cpu=$(echo "$out" | grep "^cpu ")
    echo "run $i fuse=$f | load $load | p50/p90/max ms $p50 | anatomy $anat | $cpu"
  done
done
