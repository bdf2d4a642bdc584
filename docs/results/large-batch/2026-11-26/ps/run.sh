#!/usr/bin/env bash
# LARS with its update on the workers (sync allreduce) and on 2 parameter servers (sync through
# the ps, each ps holding whole tensors), the same job, seed and global batch:
# jobs/fashion_mnist_cnn.ini on Fashion-MNIST, 2 workers, EPOCHS epochs (default 6, the job's).
# Prints each run's test accuracy per epoch and how far the two final checkpoints' parameters and
# momentum lie apart.
# Usage (from the repository root, data converted as jobs/run_fashion_mnist.sh does):
#   bash docs/results/large-batch/2026-11-26/ps/run.sh [OUT]
set -euo pipefail
out=${1:-runs/lars_ps}
epochs=${EPOCHS:-6}
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
lars=(--config jobs/fashion_mnist_cnn.ini --optimizer lars --lr 0.2 --lars-eta 0.02 --threads 1
      --epochs "$epochs" --seed 1 --log-every 200)
mkdir -p "$out"
for run in allreduce ps; do
  np=2 mode=(--mode sync --num-ps 0)
  [ $run = ps ] && np=4 mode=(--mode sync --num-ps 2)
  rm -rf "${out:?}/$run"
  echo "# $run: mpirun -np $np build/bin/dtrain ${lars[*]} ${mode[*]}"
  /usr/bin/time -f "%e s" mpirun --bind-to none --oversubscribe -x OMPI_MCA_mpi_yield_when_idle=1 \
    -np $np build/bin/dtrain "${lars[@]}" "${mode[@]}" --run-dir "$out/$run" >"$out/$run.log" 2>&1
  tail -1 "$out/$run.log"
done
/usr/bin/python3 - "$out" <<'PY'
import csv, json, sys
out = sys.argv[1]
for run in ("allreduce", "ps"):
    r = json.load(open(f"{out}/{run}/results.json"))
    acc = [float(x["accuracy"]) for x in csv.DictReader(open(f"{out}/{run}/metrics.csv"))
           if x["kind"] == "test"]
    print(f"{run:9s} steps {r['global_step']} test accuracy per epoch "
          + " ".join(f"{a:.4f}" for a in acc) + f" final {r['test_accuracy']:.4f} "
          f"top-5 {r['test_top5']:.4f}")
import glob, h5py, numpy as np
a, b = (h5py.File(sorted(glob.glob(f"{out}/{run}/ckpt-*.h5"))[-1], "r")
        for run in ("allreduce", "ps"))
for k in ("params", "optimizer/m", "model_state"):
    x, y = a[k][()].astype(np.float64), b[k][()].astype(np.float64)
    print(f"final checkpoint /{k}: {int((x != y).sum())} of {x.size} values differ, "
          f"max |diff| {np.abs(x - y).max():.3g}")
PY
