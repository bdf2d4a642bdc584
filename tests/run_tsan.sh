#!/usr/bin/env bash
# ThreadSanitizer over dtrain's own threads (not part of tests/run_all.sh: a third full build):
# builds a CPU-only RelWithDebInfo tree with -fsanitize=thread into ${TSAN_BUILD_DIR:-build-tsan},
# then runs the unit tests that start threads (the batch reader's prefetch, the dataset open
# deadline, summaries), every MPI test on 2 and 3 ranks (the ps's push progress thread and event
# loop, the bucketed allreduce's communication thread, deadline-aware waits) and three short
# training runs (async, sync allreduce, sync through the ps) with evaluation and checkpoints.
# Fails on any ThreadSanitizer report. Suppressed (tests/tsan.supp): reports inside libgomp and
# Open MPI, which are not built with TSan, so their synchronization is invisible to it; the OpenMP
# kernel tests are left out for that reason. The encoded-image reader: its decode pool with the
# next batches read ahead, two epochs through one --cache-mb cache (dtrain_input_bench). -DDTRAIN_NO_CLONES: GCC's target_clones resolvers run
# before TSan is initialised and crash under it (the kernels then build for the default target).
# Not 4 ranks: on 2 cores under TSan's slowdown the bucket test's 14,287 tiny buckets pass its 60 s
# deadline. Last, an async run stopped mid-epoch by SIGTERM to every rank (exit 75): the reader's and
# the push progress thread's early ends. Measured 2026-11-24: 0 reports (unit 33 tests, MPI 38 + 38
# tests, 3 runs of 60 steps); the stopped run, 2026-11-28: 0 reports.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh
build=${TSAN_BUILD_DIR:-build-tsan}
flags="-fsanitize=thread -fno-omit-frame-pointer -DDTRAIN_NO_CLONES"
BUILD_DIR=$build BUILD_TYPE=RelWithDebInfo bash .ci/build.sh -DDTRAIN_WITH_CUDA=OFF \
  "-DCMAKE_CXX_FLAGS=$flags" -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread
export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp report_signal_unsafe=0 detect_deadlocks=0 report_mutex_bugs=0 exitcode=0"
export OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
[ "$(id -u)" != 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d /tmp/dtrain-tsan.XXXXXX)
reports=0
check() {  # check NAME: counts the reports in $out/NAME.log, fails on a test failure
  local n
  n=$(grep -a -c "WARNING: ThreadSanitizer" "$out/$1.log" || true)
  echo "$1: $n ThreadSanitizer report(s)"
  reports=$((reports + n))
}
echo "== unit tests that start threads"
"$build/tests/dtrain_unit_tests" --gtest_filter='AugmentReader.*:DatasetShard.*:DatasetTest.*:Nap.*:Files.*:Summary.*:FuzzTest.*:JobPool.*:EncodedReader.*:EncodedCache.*' \
  >"$out/unit.log" 2>&1 || { tail -30 "$out/unit.log"; exit 1; }
check unit
for np in 2 3; do
  echo "== MPI tests, $np ranks"
  timeout 1200 mpirun -np "$np" -x OMP_NUM_THREADS -x TSAN_OPTIONS "$build/tests/dtrain_mpi_tests" \
    >"$out/mpi$np.log" 2>&1 || { tail -30 "$out/mpi$np.log"; exit 1; }
  check "mpi$np"
done
[ -f data/fashion_mnist/train.h5 ] || /usr/bin/python3 data-tools/convert_idx.py --fashion-mnist \
  /usr/share/datasets/fashion-mnist --out-dir data/fashion_mnist >/dev/null
echo "== encoded images: the decode pool with its read-ahead, through a shared cache"
/usr/bin/python3 tests/benchmarks/make_jpegs.py "$out/jpeg" 96 /usr/share/datasets/fashion-mnist
/usr/bin/python3 data-tools/images_to_h5.py "$out/jpeg" --store encoded --out "$out/enc.h5" --quiet
"$build/bin/dtrain_input_bench" "$out/enc.h5" --threads 3 --epochs 2 --batch 8 --cache-mb 1 \
  >"$out/decode.log" 2>&1 || { tail -30 "$out/decode.log"; exit 1; }
check decode
for mode in "async --num-ps 1" "sync --num-ps 0" "sync --num-ps 1"; do
  name=run-${mode// /}
  echo "== training, $mode"
  # shellcheck disable=SC2086
  timeout 900 mpirun -np 3 -x OMP_NUM_THREADS -x TSAN_OPTIONS "$build/bin/dtrain" \
    --config jobs/fashion_mnist_cnn.ini --mode $mode --max-steps 60 --threads 1 --ps-threads 1 \
    --eval-every 30 --checkpoint-every 20 --run-dir "$out/$name" >"$out/$name.log" 2>&1 ||
    { tail -30 "$out/$name.log"; exit 1; }
  check "$name"
done
echo "== a stop mid-epoch: SIGTERM to every rank of an async run (reader and push threads end early)"
name=run-stop
mpirun -np 4 --oversubscribe -x OMP_NUM_THREADS -x TSAN_OPTIONS "$build/bin/dtrain" \
  --config jobs/fashion_mnist_cnn.ini --mode async --num-ps 1 --threads 1 --ps-threads 1 \
  --checkpoint-every 20 --run-dir "$out/$name" >"$out/$name.log" 2>&1 &
job=$!
for ((t = 0; t < 1800; ++t)); do  # up to 15 minutes for the first checkpoint (or the run's end)
  if ls "$out/$name"/ckpt-*.h5 >/dev/null 2>&1 || ! kill -0 "$job" 2>/dev/null; then break; fi
  sleep 0.5
done
# shellcheck disable=SC2046
kill -TERM $(pgrep -P "$job") 2>/dev/null || true
rc=0
wait "$job" || rc=$?
[ "$rc" = 75 ] || { tail -30 "$out/$name.log"; echo "FAIL: the stopped run exited $rc, want 75" >&2; exit 1; }
check "$name"
if ((reports > 0)); then
  echo "FAIL: $reports ThreadSanitizer report(s); logs in $out" >&2
  exit 1
fi
rm -rf "$out"
echo "PASS: no ThreadSanitizer report"
