#!/usr/bin/env bash
# Interleaved runs of two dtrain binaries (BEFORE, AFTER), the same command each time: ResNet-50,
# synthetic 3x224x224, sync allreduce, 2 workers, batch 4 per worker, --bucket-mb 25, one thread
# per rank, a timeline per run. Writes OUT/<before|after>-<round>/ and OUT/load.txt.
# Usage: BEFORE=bin1 AFTER=bin2 [OUT=dir ROUNDS=6 STEPS=10] run.sh   (from the repository root)
set -uo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
out=${OUT:-/tmp/dtrain-buckets}; rounds=${ROUNDS:-6}; steps=${STEPS:-10}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for which in before after; do
    if [ $which = before ]; then bin=$BEFORE; else bin=$AFTER; fi
    name=$which-$r
    rm -rf "${out:?}/$name"
    echo "$(date -u +%T) $name load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/load.txt"
    mpirun --bind-to none --oversubscribe -np 2 "$bin" --config jobs/resnet50_imagenet.ini \
      --synthetic 3x224x224:1000 --threads 1 --mode sync --num-ps 0 --bucket-mb 25 \
      --batch-size 4 --max-steps "$steps" --log-every "$steps" --summaries false --timeline \
      --run-dir "$out/$name" >"$out/$name.log" 2>&1 || tail -5 "$out/$name.log"
  done
done
echo "$(date -u +%T) end load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/load.txt"
