#!/usr/bin/env bash
# tests/gpu/device.sh — run ON the lent GPU machine (device tool), in the repository root, after
# tests/gpu/stage.sh staged .device/ here and the call named ".device" in `carry`:
#   bash tests/gpu/device.sh STEP...        logs go to $OUT (the device tool's folder) or .device/out
# Set-up (every call; the machine starts bare): unpack the staged Debian runtime into /tmp/dtrain-rt
# (not into /: glibc and libstdc++ stay the machine's), point LD_LIBRARY_PATH at PyTorch's CUDA
# wheels (cuDNN 9, NCCL 2, cuBLAS 13) and the unpacked libraries, make the relocated Open MPI
# work, link /work/main to this checkout (the build's CTest files hold absolute paths), unpack the
# build, convert Fashion-MNIST when a step needs it.
# Steps:
#   probe     nvidia-smi, library versions, the GPU unit tests and the one-rank NCCL / MPI-staging
#             tests with DTRAIN_REQUIRE_GPU=1, and a short CNN run on cpu, cuda+nccl, cuda+mpi
#             (early losses side by side)
#   units     the GPU unit tests alone (DTRAIN_REQUIRE_GPU=1; the whole output in units_full.log,
#             failures and the end printed), then the GPU CLI test tests/cli/test_cuda_graph.sh
#             (--cuda-graph on against off through the binary)
#   sanitize  the GPU unit tests (SANITIZE_FILTER, a gtest filter; default Cuda* but the failed-
#             capture test, which then runs alone without API-error reports; the whole output
#             in memcheck_unit.log) and the one-rank NCCL test under compute-sanitizer memcheck
#   ctest     the whole ctest suite with the GPU present and DTRAIN_REQUIRE_GPU=1
#   bench     tests/benchmarks/gpu_bench.sh (dtrain vs PyTorch on this GPU)
#   share     async and sync jobs with several ranks sharing the GPU, and CPU-only ranks
#   profile   tests/gpu/kernel_profile.sh: per-kernel GPU time of dtrain and PyTorch (ncu)
#   input     tests/benchmarks/input_bench.sh on the machine's cores (issue 38's 16-core row):
#             decode + RandomResizedCrop(224) + flip, dtrain against torchvision's DataLoader on
#             the same JPEG files, INPUT_THREADS (default "1 2 4 8 16") threads / worker
#             processes, with the host's ceiling (N one-thread processes together), dtrain's
#             busy threads and its rate with uint8 batches (a GPU worker's), REPEATS (default 2) SAMPLES (default 3072), into $OUT/input/
#             (MAX_SIDE=256: the files stored at shorter side 256, into $OUT/input-max-side-256/); the
#             machine's python3 has PyTorch, torchvision, Pillow and h5py (~3 minutes)
#   comm      the CPU communication benchmark on the machine's 16 cores (a core per rank):
#             REPEATS=3 tests/benchmarks/comm_bench.sh 2, 3 and 4 (COMM_RANKS="8 12": those rank
#             counts; OPS: comm_bench's ops), into $OUT/comm; first the NCCL rows with one rank
#             (the one GPU: NCCL needs a GPU per rank)
#   scaling [MODEL [GLOBAL_BATCH]]
#             the 16-core CPU strong-scaling sweep of issue 36: MODEL (default resnet50:
#             jobs/MODEL_imagenet.ini), WORKERS="1 2 4 8 12", GLOBAL_BATCH (default 96: every
#             worker count divides it), STEPS (default 2) sync steps per run, sync and async (1 ps),
#             plus the host's ceiling (N independent one-worker runs started together, per-worker
#             batch GLOBAL_BATCH/N, no exchange: run_strong_scaling.sh --ceiling); the report —
#             samples/s, T1/(N·TN) and the efficiency against the ceiling, step anatomy — as table
#             and CSV (and a plot where matplotlib exists) in $OUT/scaling/MODEL/, with runs.tgz
#             (every run's log — per-worker step times and anatomy — and results.json). Expected
#             duration with the defaults on the 16-core H100/H200 machines: ~7 minutes (ResNet-50
#             takes ~0.25 s per sample on one core: 2 × 96 samples per run, 14 runs, ~8 s start-up
#             each); keep timeout_s at 600. Example: bash tests/gpu/device.sh scaling resnet50 96
#             (LOCKSTEP=1 adds a run per worker count > 1.) One line per finished run as it ends.
#             Every finished run is kept in $OUT/scaling/MODEL/runs.tgz as it ends, so a call cut
#             short by its time limit still brings back what it finished; RESUME=.device/runs.tgz
#             (that file, copied into .device/ before staging) continues such a sweep of MODEL in a
#             later call on the same kind of host, skipping the runs it holds, with its STEPS and
#             global batch where none are given (a sweep of another model starts afresh).
#             LOCKSTEP=1: also each worker count's sync run with --allreduce none (no gradient
#             sum, the workers in lock step: the report's "efficiency vs lock-step" is the
#             exchange's own cost, "lock-step wait" the waiting for the slowest worker alone).
#             PIN_THREADS=1: the same sweep with --pin-threads (each rank's threads on its own
#             CPUs, the allreduce's communication thread on its own where a rank has 2; the
#             ceiling runs stay unpinned), into $OUT/scaling-pinned/ — run it after the default
#             one to compare the two. ARGS="--wire-dtype bf16" (more dtrain options for every
#             run): into $OUT/scaling-ARGS/ (the options' letters and digits), beside the default
#   pack      every file under $OUT into $OUT/out.tgz (the device tool brings back at most 8 files,
#             2 folders down), e.g. bash tests/gpu/device.sh units bench sanitize pack; done after
#             the other steps wherever it is named, also when they fail or run out of BUDGET
# Every step name (and RESUME, bench's ROWS, scaling's model) is checked before the first step runs.
# BUDGET (seconds, default 570): the steps are stopped there, so that `pack` still runs inside the
# device tool's limit (a call it kills brings back only 8 loose files); give the call timeout_s
# 600, or BUDGET 30 s below a shorter timeout_s. Each step's start and end (seconds into the call)
# go to stderr as "### ..." lines: a call cut short shows where it was.
set -uo pipefail
self=$(cd "$(dirname "$0")" && pwd -P)/$(basename "$0")
cd "$(dirname "$self")/../.."
OUTDIR=${OUT:-.device/out}
mkdir -p "$OUTDIR"
# The host every figure of this call comes from: cores, SMT siblings, caches, NUMA, load.
[ -f "$OUTDIR/host.txt" ] || { lscpu; echo "load average: $(cat /proc/loadavg)"; } >"$OUTDIR/host.txt" 2>&1
log() { echo "### $*" >&2; }
STEP_NAMES='^(probe|units|sanitize|ctest|bench|share|profile|input|comm|scaling|pack)$'

# pack: every file under OUTDIR into OUTDIR/out.tgz — unless it would be over the device tool's
# 16 MiB a file, then the files stay as they are (up to 8 of them come back).
pack() {
  local tgz=/tmp/device-out.$$.tgz size
  tar -czf "$tgz" -C "$OUTDIR" . || { log "pack: tar failed: the files stay unpacked"; return 1; }
  size=$(stat -c %s "$tgz")
  if [ "$size" -gt $((15 << 20)) ]; then
    log "pack: out.tgz would be $((size >> 20)) MiB (over the 16 MiB a file the device tool returns): the files stay unpacked"
    rm -f "$tgz"
    return 1
  fi
  find "$OUTDIR" -mindepth 1 -delete && mv "$tgz" "$OUTDIR/out.tgz" && log "pack: out.tgz, $((size >> 10)) KiB"
}

# The call itself: every argument checked first, then the steps in a child process under
# `timeout BUDGET` (its whole process group: mpirun's ranks too), then pack when named.
if [ -z "${DEVICE_SH_STEPS:-}" ]; then
  todo=() want_pack=0 bad=""
  while [ $# -gt 0 ]; do
    s=$1
    shift
    [[ $s =~ $STEP_NAMES ]] || { bad="unknown step '$s'"; break; }
    if [ "$s" = pack ]; then want_pack=1; continue; fi
    todo+=("$s")
    if [ "$s" = scaling ] && [ $# -gt 0 ] && [[ ! $1 =~ $STEP_NAMES ]]; then
      [ -f "jobs/$1_imagenet.ini" ] || bad="scaling $1: no job file jobs/$1_imagenet.ini"
      todo+=("$1")
      shift
      if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then todo+=("$1"); shift; fi
    fi
  done
  if [[ " ${todo[*]} " == *" bench "* ]]; then
    rows=$(sed -n 's/^ *\([a-z0-9]*\)) .*/\1/p' tests/benchmarks/gpu_bench.sh)
    for r in ${ROWS:-}; do grep -qx "$r" <<<"$rows" || bad="bench: unknown row '$r' in ROWS"; done
  fi
  [ -z "${RESUME:-}" ] || [ -f "$RESUME" ] || bad="RESUME=$RESUME: no such file"
  if [ -n "$bad" ]; then
    echo "device.sh: $bad (steps: probe | units | sanitize | ctest | bench | share | profile | input | comm | scaling [MODEL [BATCH]] | pack); nothing run" >&2
    exit 2
  fi
  budget=${BUDGET:-570}
  # (stdin from /dev/null: a process group of its own must not read a terminal — mpirun would stop)
  DEVICE_SH_STEPS=1 timeout -k 10 "$budget" bash "$self" "${todo[@]}" </dev/null
  rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    log "BUDGET=${budget}s reached at ${SECONDS}s: the steps were stopped there"
  fi
  [ "$want_pack" = 0 ] || pack
  log "device.sh: done at ${SECONDS}s (exit $rc)"
  exit "$rc"
fi

# resume_sweep DIR JOB: RESUME=runs.tgz (a scaling step's, from an earlier call: the device tool
# brought it back; copy it into .device/ here before staging the call) unpacked into DIR, the
# sweep's folder, so that the runs it finished are skipped — only when its sweep.log names this
# host's shape (the "# host:" line) and its sweep.conf this JOB file, else the sweep starts afresh
# and says why. Its steps and global batch are the sweep's where STEPS and the batch were not
# given (sets `steps` and `batch`); a sweep given others starts afresh, saying so.
resume_sweep() {
  [ -n "${RESUME:-}" ] || return 0
  [ -f "$RESUME" ] || { echo "device.sh: RESUME=$RESUME: no such file" >&2; exit 2; }
  local here there conf v
  here=$(bash data-tools/run_strong_scaling.sh --host)
  there=$(tar -xzOf "$RESUME" ./sweep.log 2>/dev/null | sed -n 's/^# host: //p' | head -n 1)
  if [ "$here" != "$there" ]; then
    echo "device.sh: RESUME=$RESUME ran on another host ('${there:-unknown}', this is '$here'): starting afresh" >&2
    return 0
  fi
  conf=$(tar -xzOf "$RESUME" ./sweep.conf 2>/dev/null)
  if [ "$(sed -n 's/^job-sha256 //p' <<<"$conf")" != "$(sha256sum <"$2" | cut -d' ' -f1)" ]; then
    echo "device.sh: RESUME=$RESUME is the sweep of $(sed -n 's/^job //p' <<<"$conf"), not of $2: $1 starts afresh" >&2
    return 0
  fi
  v=$(sed -n 's/^steps //p' <<<"$conf")
  steps=${steps:-$v}
  [ "$steps" = "$v" ] || { echo "device.sh: RESUME=$RESUME ran STEPS=$v, this sweep $steps: $1 starts afresh" >&2; return 0; }
  v=$(sed -n 's/^global-batch //p' <<<"$conf")
  batch=${batch:-$v}
  [ "$batch" = "$v" ] || { echo "device.sh: RESUME=$RESUME ran global batch $v, this sweep $batch: $1 starts afresh" >&2; return 0; }
  mkdir -p "$1" && tar -xzf "$RESUME" -C "$1"
  echo "device.sh: resuming the sweep in $1 from $RESUME: $(tar -tzf "$RESUME" | grep -c '/results.json$') runs done" >&2
}

setup() {
  local P=/tmp/dtrain-rt
  log "setup at ${SECONDS}s"
  if [ ! -d "$P/usr" ]; then
    for d in .device/debs/*.deb; do dpkg -x "$d" "$P"; done
    # Keep the machine's own copies of the libraries everything else on it uses. (The cache read
    # once: `ldconfig -p | grep -q` under pipefail fails now and then — SIGPIPE — and kept ours.)
    local cache
    cache=$(ldconfig -p)
    for so in libstdc++.so.6 libgcc_s.so.1 libgomp.so.1 libz.so.1 libzstd.so.1 libssl.so.3 \
              libcrypto.so.3 libffi.so.8 libudev.so.1 libatomic.so.1; do
      grep -qF "$so " <<<"$cache" && rm -f "$P"/usr/lib/x86_64-linux-gnu/"$so"* "$P"/lib/x86_64-linux-gnu/"$so"*
    done
    ln -sf mpirun.openmpi "$P/usr/bin/mpirun"
    ln -sf mpirun.openmpi "$P/usr/bin/mpiexec"
    [ -e "$P/usr/lib/x86_64-linux-gnu/libpsm_infinipath.so.1" ] ||
      ln -sf ../libpsm1/libpsm_infinipath.so.1.16 "$P/usr/lib/x86_64-linux-gnu/libpsm_infinipath.so.1" 2>/dev/null
  fi
  local SP
  SP=$(python3 -c 'import site; print(site.getsitepackages()[0])')
  local cuda_libs=""
  for d in cudnn/lib nccl/lib cu13/lib cublas/lib cuda_nvrtc/lib cuda_runtime/lib; do
    [ -d "$SP/nvidia/$d" ] && cuda_libs="$cuda_libs:$SP/nvidia/$d"
  done
  # cuDNN dlopens libnvrtc.so (unversioned) for runtime-compiled kernels.
  for d in ${cuda_libs//:/ }; do
    local v; v=$(ls "$d"/libnvrtc.so.* 2>/dev/null | head -1)
    [ -n "$v" ] && [ ! -e "$d/libnvrtc.so" ] && ln -sf "$(basename "$v")" "$d/libnvrtc.so"
  done
  export PATH="$P/usr/bin:$PATH"
  export LD_LIBRARY_PATH="${cuda_libs#:}:$P/usr/lib/x86_64-linux-gnu:$P/lib/x86_64-linux-gnu:$P/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}"
  export OPAL_PREFIX=$P/usr OPAL_SYSCONFDIR=$P/etc/openmpi
  export PMIX_MCA_mca_base_component_path=$P/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
  export PMIX_DATADIR=$P/usr/lib/x86_64-linux-gnu/pmix2/share
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  # CTest holds /usr/bin/mpiexec (this build machine's path).
  [ -e /usr/bin/mpiexec ] || ln -sf "$P/usr/bin/mpiexec.openmpi" /usr/bin/mpiexec
  # The build's CTest files hold the staging checkout's absolute paths (.device/srcdir): that path
  # made a link to this copy — never in place of a directory (run anywhere but the device machine,
  # that would delete a checkout).
  local src x
  src=$(cat .device/srcdir 2>/dev/null || echo /work/main)
  if [ "$(cd "$src" 2>/dev/null && pwd -P)" != "$(pwd -P)" ]; then
    rmdir "$src" 2>/dev/null
    if [ -L "$src" ] || [ ! -e "$src" ]; then
      mkdir -p "$(dirname "$src")" && ln -sfn "$(pwd -P)" "$src"
    else
      log "setup: $src is a directory here, left as it is: ctest and units' CLI test run what it holds"
    fi
  fi
  [ -x build/bin/dtrain ] || tar -xJf .device/build.tar.xz
  for x in .device/fashion-mnist/*.xz; do
    [ -f "${x%.xz}.gz" ] || [ ! -f "$x" ] || xz -dc "$x" | gzip -1 >"${x%.xz}.gz"
  done
  export DTRAIN_PYTHON TORCH_PYTHON DTRAIN_TB_VENV
  DTRAIN_PYTHON=$(command -v python3); TORCH_PYTHON=$DTRAIN_PYTHON
  DTRAIN_TB_VENV=$(python3 -c 'import sys; print(sys.prefix)')
  local missing
  missing=$(ldd build/bin/dtrain build/tests/dtrain_unit_tests build/tests/dtrain_mpi_tests | grep 'not found' | sort -u)
  [ -z "$missing" ] || { echo "setup: libraries not found: $missing" >&2; exit 1; }
  log "setup done at ${SECONDS}s"
}

data() {
  [ -f data/fashion_mnist/train.h5 ] || python3 data-tools/convert_idx.py --fashion-mnist \
    .device/fashion-mnist --out-dir data/fashion_mnist >/dev/null ||
    log "data: Fashion-MNIST's conversion failed (data-tools/convert_idx.py): the CNN rows will fail"
}

probe() {
  nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  ls "$(python3 -c 'import site; print(site.getsitepackages()[0])')"/nvidia/*/lib | grep -E "cudnn\.so|nccl\.so|cublas\.so" | head
  ldd build/bin/dtrain | grep -E "cudnn|nccl|cublas|mpi\.so|hdf5"
  log "GPU unit tests (DTRAIN_REQUIRE_GPU=1)"
  DTRAIN_REQUIRE_GPU=1 build/tests/dtrain_unit_tests --gtest_filter='Cuda*' 2>&1 | tail -40
  log "one-rank NCCL and MPI-staging tests"
  DTRAIN_REQUIRE_GPU=1 mpirun -np 1 build/tests/dtrain_mpi_tests --gtest_filter='CudaAllreduce.*' 2>&1 | tail -8
  log "2 ranks sharing the GPU: MPI staging (NCCL skips: one GPU per rank)"
  DTRAIN_REQUIRE_GPU=1 mpirun -np 2 build/tests/dtrain_mpi_tests --gtest_filter='CudaAllreduce.*' 2>&1 | tail -5
  data
  log "short CNN runs: early losses, cpu vs cuda+nccl vs cuda+mpi (fp32 math)"
  local common=(--config jobs/fashion_mnist_cnn.ini --mode sync --num-ps 0 --max-steps 200
                --log-every 50 --test-data "" --math fp32 --layout nchw)
  for v in "cpu mpi" "cuda nccl" "cuda mpi"; do
    set -- $v
    mpirun -np 1 build/bin/dtrain "${common[@]}" --device "$1" --allreduce "$2" \
      --run-dir /tmp/probe-$1-$2 > /tmp/probe-$1-$2.log 2>&1 || { echo "FAILED: $v"; tail -20 /tmp/probe-$1-$2.log; }
    # kind,global_step,epoch,wall_seconds,loss,accuracy,samples_per_sec,...
    echo "$v: step:loss:samples/s $(awk -F, '$1 == "train" {printf "%s:%s:%s ", $2, $5, $7}' \
      /tmp/probe-$1-$2/metrics.csv 2>/dev/null)"
  done
  grep -h "cuDNN conv" /tmp/probe-cuda-nccl.log | head -4
}

sanitize() {
  log "compute-sanitizer memcheck: GPU unit tests"
  # The whole output in memcheck_unit.log (a memory error is reported where it happens, far above
  # the summary); here every memcheck line and the end. CudaGraphCapture.AFailedCapture* calls a
  # synchronization inside a capture on purpose (CUDA answers cudaErrorStreamCaptureUnsupported,
  # then cudaErrorStreamCaptureInvalidated when the capture ends: two API errors by design): it
  # runs second, alone, with memory errors counted and API errors not reported.
  local capture='CudaGraphCapture.AFailedCapture*'
  DTRAIN_REQUIRE_GPU=1 compute-sanitizer --tool memcheck --error-exitcode 1 \
    build/tests/dtrain_unit_tests --gtest_filter="${SANITIZE_FILTER:-Cuda*:-$capture}" 2>&1 |
    grep -v "^cuDNN conv" >"$OUTDIR/memcheck_unit.log"
  echo "unit tests under memcheck: exit ${PIPESTATUS[0]}"
  grep "^=========" "$OUTDIR/memcheck_unit.log" | head -60
  tail -8 "$OUTDIR/memcheck_unit.log"
  DTRAIN_REQUIRE_GPU=1 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 \
    build/tests/dtrain_unit_tests --gtest_filter="$capture" >"$OUTDIR/memcheck_capture.log" 2>&1
  echo "the failed-capture test under memcheck (API errors not reported): exit $?"
  grep -E "^=========|OK|FAILED" "$OUTDIR/memcheck_capture.log" | head -20
  log "compute-sanitizer memcheck: one-rank NCCL / MPI staging"
  # NCCL probes kernel images for every architecture at init (cudaFuncGetAttributes answers
  # cudaErrorNoKernelImageForDevice for the ones its build lacks, and NCCL moves on): those API
  # errors are not ours, so only memory errors count here.
  DTRAIN_REQUIRE_GPU=1 mpirun -np 1 compute-sanitizer --tool memcheck --report-api-errors no \
    --error-exitcode 1 build/tests/dtrain_mpi_tests --gtest_filter='CudaAllreduce.*' >"$OUTDIR/memcheck_mpi.log" 2>&1
  echo "mpi tests under memcheck: exit $?"
  grep -E "=====|OK|FAILED|rror" "$OUTDIR/memcheck_mpi.log" | head -40
}

run_ctest() {
  data
  log "ctest, DTRAIN_REQUIRE_GPU=1"
  # cli_test_provenance compares `dtrain --version` with `git describe` of this copy, whose git
  # metadata the device tool does not keep current: it fails here whenever HEAD moved since the
  # session began (the build machine's CI runs it).
  (cd build && DTRAIN_REQUIRE_GPU=1 ctest -j 12 --timeout 300 --output-on-failure >"$OUTDIR/ctest_full.log" 2>&1)
  grep -E "tests passed|Failed|Skipped|Not Run|Timeout" "$OUTDIR/ctest_full.log" | tail -20
}

setup
while [ $# -gt 0 ]; do
  step=$1
  shift
  t0=$SECONDS
  log "step $step: start at ${t0}s ($(date +%T))"
  case $step in
    probe) probe 2>&1 | tee "$OUTDIR/probe.log" ;;
    units) { DTRAIN_REQUIRE_GPU=1 build/tests/dtrain_unit_tests --gtest_filter='Cuda*' 2>&1 |
               grep -v "^cuDNN conv" >"$OUTDIR/units_full.log"
             grep -B2 -A12 "Failure" "$OUTDIR/units_full.log" | head -60
             tail -12 "$OUTDIR/units_full.log"
             (cd build && DTRAIN_REQUIRE_GPU=1 ctest -R '^cli_test_cuda_graph$' --timeout 600 \
               --output-on-failure 2>&1 | tail -15); } | tee "$OUTDIR/units.log" ;;
    sanitize) sanitize 2>&1 | tee "$OUTDIR/sanitize.log" ;;
    ctest) run_ctest 2>&1 | tee "$OUTDIR/ctest.log" ;;
    bench) data; bash tests/benchmarks/gpu_bench.sh 2>&1 | tee "$OUTDIR/bench.log" ;;
    share) data; bash tests/benchmarks/gpu_share.sh 2>&1 | tee "$OUTDIR/share.log" ;;
    profile) data; bash tests/gpu/kernel_profile.sh 2>&1 | tee "$OUTDIR/profile.log" ;;
    input) PYTHON=python3 TORCH_PYTHON=python3 FASHION_MNIST=.device/fashion-mnist \
             REPEATS=${REPEATS:-2} SAMPLES=${SAMPLES:-3072} OUT="$OUTDIR/input${MAX_SIDE:+-max-side-$MAX_SIDE}" \
             bash tests/benchmarks/input_bench.sh ${INPUT_THREADS:-1 2 4 8 16} 2>&1 |
             tee "$OUTDIR/input${MAX_SIDE:+-max-side-$MAX_SIDE}.log" ;;
    comm) { OUT_DIR="$OUTDIR/comm" OPS=nccl_allreduce bash tests/benchmarks/comm_bench.sh 1
            for r in ${COMM_RANKS:-2 3 4}; do OUT_DIR="$OUTDIR/comm" REPEATS=${REPEATS:-3} \
              OPS=${OPS:-allreduce,hier_allreduce,hier_wire_allreduce,ps_push_pull} \
              bash tests/benchmarks/comm_bench.sh "$r"; done; } 2>&1 | tee "$OUTDIR/comm.log" |
          grep --line-buffered -E "ratio|wrote|skipped" ;;
    scaling) model=resnet50 batch=${GLOBAL_BATCH:-} steps=${STEPS:-}
             if [ $# -gt 0 ] && [[ ! $1 =~ $STEP_NAMES ]]; then
               model=$1; shift
               if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then batch=$1; shift; fi
             fi
             pin=""; [ "${PIN_THREADS:-0}" = 1 ] && pin=-pinned
             [ -n "${ARGS:-}" ] && pin+="-$(tr -cd 'a-z0-9-' <<<"${ARGS// /-}" | sed 's/^-*//')"
             resume_sweep "/tmp/scaling$pin/$model" "jobs/${model}_imagenet.ini"
             batch=${batch:-96} steps=${steps:-2}
             # One line a finished run as it ends (a call cut short shows how far it got), then
             # the report's end.
             WORKERS=${WORKERS:-"1 2 4 8 12"} GLOBAL_BATCH=$batch STEPS=$steps CEILING=1 KEEP_RUNS=1 \
               OUT=/tmp/scaling$pin DOCS="$OUTDIR/scaling$pin" PYTHON=python3 \
               bash tests/benchmarks/strong_scaling_models.sh "$model" 2>&1 |
               tee "$OUTDIR/scaling$pin.log" |
               grep --line-buffered -E '^[a-z0-9-]+: (\{|done before|samples/s)|error'
             grep -vE '^(sync|async|ceiling|lockstep)-[a-z0-9-]*: ' "$OUTDIR/scaling$pin.log" | tail -n 24 ;;
    pack) pack ;;
    *) echo "device.sh: unknown step '$step' (probe | units | sanitize | ctest | bench | share | profile | input | comm | scaling | pack)" >&2; exit 2 ;;
  esac
  log "step $step: done in $((SECONDS - t0)) s (at ${SECONDS}s)"
done
