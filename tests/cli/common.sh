# tests/cli/common.sh — shared set-up of the CLI tests (sourced, not run by ctest): checks the
# environment ctest provides, recreates $SCRATCH, and offers small helpers.
#   DTRAIN   the dtrain binary        BIN      tool dir (make_dataset)
#   MPIEXEC  mpiexec                  SCRATCH  this script's scratch directory
: "${DTRAIN:?set DTRAIN to the dtrain binary}"
: "${BIN:?set BIN to the build bin dir}"
: "${MPIEXEC:?set MPIEXEC}"
: "${SCRATCH:?set SCRATCH}"
export OMP_NUM_THREADS=1
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH"
PY=/usr/bin/python3

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# make_data NAME N [extra make_dataset args]: 1×12×12 images, 4 classes, into $SCRATCH/NAME.h5.
make_data() {
  local name=$1 n=$2
  shift 2
  "$BIN/make_dataset" "$SCRATCH/$name.h5" --n "$n" --c 1 --h 12 --w 12 --classes 4 "$@" >/dev/null
}

# write_job FILE: the tiny CNN job used by the end-to-end tests (data paths given on the command line).
write_job() {
  cat >"$1" <<'INI'
[model]
layer = conv filters=6 kernel=3 pad=1
layer = batchnorm
layer = relu
layer = maxpool kernel=2
layer = flatten
layer = dense units=24
layer = relu
layer = dropout rate=0.2
layer = dense

[train]
epochs = 2
batch-size = 16
seed = 3
log-every = 4

[optimizer]
optimizer = momentum
lr = 0.02
momentum = 0.9

[faults]
timeout = 60
INI
}

# json_get FILE KEY: prints results.json's value of KEY.
json_get() {
  "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}
