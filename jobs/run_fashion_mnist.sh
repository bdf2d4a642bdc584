#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs what is missing, builds dtrain, converts
# Fashion-MNIST (Debian's dataset-fashion-mnist) to HDF5, and trains the CNN of
# jobs/fashion_mnist_cnn.ini on 4 MPI ranks (1 parameter server + 3 workers, async).
# Arguments are passed on to dtrain, e.g. `--mode sync --num-ps 0` (then use NP=3).
# Environment: NP (ranks, default 4), JOB (job file), RUN_DIR (default runs/<job>-<time>).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh
bash .ci/build.sh >/dev/null
if [ ! -f data/fashion_mnist/train.h5 ] || [ ! -f data/fashion_mnist/test.h5 ]; then
  /usr/bin/python3 data-tools/convert_idx.py --fashion-mnist /usr/share/datasets/fashion-mnist \
    --out-dir data/fashion_mnist
fi
job=${JOB:-jobs/fashion_mnist_cnn.ini}
run_dir=${RUN_DIR:-runs/$(basename "$job" .ini)-$(date +%Y%m%d-%H%M%S)}
np=${NP:-4}
root_flags=()
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# More ranks than cores: oversubscribe, and let idle ranks yield the core.
if [ "$np" -gt "$(nproc)" ]; then root_flags+=(--oversubscribe); export OMPI_MCA_mpi_yield_when_idle=1; fi
exec mpirun --bind-to none -np "$np" "${root_flags[@]}" build/bin/dtrain --config "$job" --run-dir "$run_dir" "$@"
