#!/usr/bin/env bash
# data-tools/run_strong_scaling.sh — strong-scaling sweep with plain mpirun (a workstation, or one
# node without Slurm; slurm/submit_strong_scaling.sh runs the same plan under Slurm): the same total
# problem — a fixed global batch and a fixed number of samples — on 1, 2, 4, ... workers, in sync
# mode and in async mode with one or more ps counts; each run leaves results.json in OUT/<run>/, and
# the report (table + plot) is made at the end by data-tools/scaling_report.py.
#
# Usage: data-tools/run_strong_scaling.sh [options] [-- extra dtrain options]
#   --job FILE        job file                                   (default: jobs/fashion_mnist_cnn.ini)
#   --workers LIST    worker counts, e.g. "1 2 4 8 12"           (default: "1 2")
#   --modes LIST      "sync async", or one of them               (default: "sync async")
#   --ps LIST         async: parameter-server counts, e.g. "1 2 4" (ps:worker ratios) (default: "1")
#   --global-batch N  samples per global step, split over the workers (default: 128)
#   --steps N         sync steps of N×global-batch samples; async runs get --max-steps N×workers
#                     (an async global step is one worker's push of global-batch/workers samples),
#                     so every run trains on the same N×global-batch samples  (default: 200)
#   --threads N       OpenMP threads per rank (default: 1 = one core per worker, so that the
#                     1-worker run measures one core; 0 = dtrain's cores/ranks, and each ceiling
#                     run for N workers cores/N, as the N-worker run's ranks get)
#                     Numbers are decimal (010 is 10); a count or mode listed twice runs once.
#   --out DIR         results folder                             (default: runs/scaling-<date-time>)
#   --plan            print the plan and exit, one run per line, shell-quoted (printf %q):
#                     NAME RANKS JOB DTRAIN_OPTIONS... (--run-dir OUT/NAME among them);
#                     slurm/submit_strong_scaling.sh submits these lines
#   --no-report       do not run data-tools/scaling_report.py at the end
#   --ceiling         also measure the host's ceiling for every worker count N > 1: N independent
#                     one-worker runs started together (sync, no exchange: one rank each, batch
#                     global-batch/N — the per-worker batch of the N-worker runs — for the sync
#                     run's step count), into OUT/ceiling-wN/r<k>/; scaling_report.py adds their
#                     summed samples/s and each run's efficiency against it (issue 36)
#   --lockstep        also the lock-step ceiling for every worker count N > 1 (sync in --modes):
#                     the N-worker sync run with --allreduce none (no gradient sum, the workers
#                     agreeing on one float each step) into OUT/lockstep-wN/; scaling_report.py
#                     sets the sync rows beside it: the exchange's cost apart from the waiting
#                     and memory traffic that steps in lock step bring
#   --host            print the host's shape (as the sweep log's "# host:" line names it) and exit
#   --keep-runs TGZ   after every finished run, TGZ (re)written: sweep.conf, sweep.log and every run's log,
#                     results.json and launcher.json, relative to OUT — so a sweep cut short (a
#                     time limit) leaves every run it finished; unpacked into an OUT, the sweep
#                     continues there (finished runs are skipped) and scaling_report.py reads it
# Environment: DTRAIN (default build/bin/dtrain), MPIRUN (default mpirun), PYTHON (default
#   /usr/bin/python3, Debian's interpreter with numpy/matplotlib), EPOCHS (default 1000: the step
#   count decides).
# Relative paths in --job, --out, --keep-runs, DTRAIN, MPIRUN and PYTHON are relative to the
# directory the script is started in; the defaults are the repository's. The runs start in the
# repository root: dtrain options after `--` and a job file's own paths resolve there.
# More ranks than cores (nproc): mpirun gets --oversubscribe and idle ranks yield
# (OMPI_MCA_mpi_yield_when_idle=1) — timings of such runs measure sharing, not scaling.
# The runs go by worker count — for each N its sync and async runs, then its ceiling and lock-step
# run — so that a sweep cut short has whole worker counts. A failed run stops the sweep (its log is
# OUT/<run>.log). Finished runs (their results.json; a ceiling's: all N runs') are skipped (rerun
# into the same --out to complete an interrupted sweep). OUT/sweep.conf records the job file's
# contents (sha256), --global-batch, --steps, --threads, EPOCHS and the dtrain options after --:
# a rerun into that OUT with other values is refused (exit 2, naming them), as its finished runs
# are not the runs it asks for; other --workers, --modes, --ps, --ceiling or --lockstep add runs.
set -euo pipefail
# Paths given here (--job, --out, --keep-runs, DTRAIN, MPIRUN, PYTHON) are the caller's: relative
# ones resolve against the directory it was started in. The runs start in the repository root
# (the defaults, and a job file's own relative paths, are relative to it).
caller=$PWD
# from_caller PATH: PATH made absolute against the caller's directory (an absolute one as it is).
from_caller() { case $1 in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$caller" "$1" ;; esac; }
# command_from_caller CMD: a command given with a directory (./x, bin/x) made absolute; a bare
# name (looked up on PATH) as it is.
command_from_caller() { case $1 in */*) from_caller "$1" ;; *) printf '%s' "$1" ;; esac; }
cd "$(dirname "$0")/.."

job=jobs/fashion_mnist_cnn.ini workers="1 2" modes="sync async" ps_list="1" gb=128 steps=200
threads=1 out="" plan_only=0 report=1 ceiling=0 keep="" lockstep=0
die() {
  echo "run_strong_scaling.sh: error: $*" >&2
  exit 2
}
# host_shape: the machine's CPUs as lscpu names them (model, SMT threads per core, cores per
# socket, sockets, NUMA nodes, L3), which the host's ceiling reflects; "unknown" without lscpu.
host_shape() {
  command -v lscpu >/dev/null || { echo unknown; return 0; }
  lscpu | sed -n -E 's/^(Model name|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|NUMA node\(s\)|L3 cache): *(.*)/\1 \2/p' |
    paste -sd';' | sed 's/;/; /g'
}
# need_value "$@": the option in $1 must be followed by a value.
need_value() { [ $# -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
  case $1 in
    --job) need_value "$@"; job=$(from_caller "$2"); shift 2 ;;
    --workers) need_value "$@"; workers=$2; shift 2 ;;
    --modes) need_value "$@"; modes=$2; shift 2 ;;
    --ps) need_value "$@"; ps_list=$2; shift 2 ;;
    --global-batch) need_value "$@"; gb=$2; shift 2 ;;
    --steps) need_value "$@"; steps=$2; shift 2 ;;
    --threads) need_value "$@"; threads=$2; shift 2 ;;
    --out) need_value "$@"; out=$(from_caller "$2"); shift 2 ;;
    --plan) plan_only=1; shift ;;
    --no-report) report=0; shift ;;
    --ceiling) ceiling=1; shift ;;
    --lockstep) lockstep=1; shift ;;
    --keep-runs) need_value "$@"; keep=$(from_caller "$2"); shift 2 ;;
    --host) host_shape; exit 0 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
extra=("$@")
# isnum N: N is a count below 10^18 (bash's arithmetic wraps at 2^63), leading zeros aside.
isnum() { [[ $1 =~ ^0*[0-9]{1,18}$ ]]; }
# Numbers are decimal: 010 is 10 (bash's arithmetic would read it as octal 8, and 08 not at all).
isnum "$gb" && gb=$((10#$gb)) && [ "$gb" -gt 0 ] || die "--global-batch '$gb' is not a positive number"
isnum "$steps" && steps=$((10#$steps)) && [ "$steps" -gt 0 ] || die "--steps '$steps' is not a positive number"
isnum "$threads" && threads=$((10#$threads)) || die "--threads '$threads' is not a number"
# once LIST: LIST's words, each once in its first place, numbers in decimal ("2 02" is one run:
# twice it would be two runs into one run folder).
once() {
  local x words out=() seen=" "
  read -r -d '' -a words <<<"$1" || true
  for x in "${words[@]}"; do
    ! isnum "$x" || x=$((10#$x))
    [[ $seen == *" $x "* ]] || { out+=("$x"); seen+="$x "; }
  done
  echo "${out[*]}"
}
workers=$(once "$workers") modes=$(once "$modes") ps_list=$(once "$ps_list")
[[ $workers =~ [^[:space:]] ]] || die "--workers: empty list (give worker counts, e.g. \"1 2 4\")"
[[ $modes =~ [^[:space:]] ]] || die "--modes: empty list (give \"sync async\", sync or async)"
[[ ! $modes =~ async ]] || [[ $ps_list =~ [^[:space:]] ]] ||
  die "--ps: empty list, but async mode needs ps counts (e.g. \"1 2\")"

# ---------------------------------------------------------------- the plan
plan=()
for m in $modes; do
  case $m in
    sync) ps_for_mode=0 ;;
    async) ps_for_mode=$ps_list ;;
    *) die "--modes: '$m' is neither sync nor async" ;;
  esac
  for p in $ps_for_mode; do
    isnum "$p" || die "--ps: '$p' is not a number"
    [ "$m" = sync ] || [ "$p" -gt 0 ] || die "--ps: async mode needs at least 1 ps"
    for w in $workers; do
      isnum "$w" && [ "$w" -gt 0 ] || die "--workers: '$w' is not a positive number"
      [ $((gb % w)) = 0 ] || die "--global-batch $gb does not split evenly over $w workers"
      if [ "$m" = sync ]; then
        plan+=("sync-w$w sync 0 $w $w $steps")
      else
        plan+=("async-ps$p-w$w async $p $w $((w + p)) $((steps * w))")
      fi
    done
  done
done
[ ${#plan[@]} -gt 0 ] || die "empty plan (--workers '$workers', --modes '$modes', --ps '$ps_list')"
out=${out:-runs/scaling-$(date +%Y%m%d-%H%M%S)}
# run_args NAME MODE PS MAX_STEPS: the dtrain options of one run (after --config JOB).
run_args() {
  args=(--mode "$2" --num-ps "$3" --global-batch-size "$gb" --max-steps "$4"
        --epochs "${EPOCHS:-1000}" --threads "$threads" --run-dir "$out/$1" "${extra[@]}")
}
[ -f "$job" ] || die "job file '$job' does not exist"
if [ "$plan_only" = 1 ]; then
  # The plan lists one job per run; the ceiling's N runs started together and the lock-step runs
  # are this script's own: refused rather than left out without a word.
  [ "$ceiling" = 0 ] && [ "$lockstep" = 0 ] ||
    die "--plan lists the sync and async runs only; --ceiling and --lockstep are measured by this script on one node (run it there without --plan)"
  for line in "${plan[@]}"; do
    read -r name mode ps w np max_steps <<<"$line"
    run_args "$name" "$mode" "$ps" "$max_steps"
    printf '%q ' "$name" "$np" "$job" "${args[@]}"
    echo
  done
  exit 0
fi

# ---------------------------------------------------------------- checks, then run
dtrain=${DTRAIN:+$(command_from_caller "$DTRAIN")}
dtrain=${dtrain:-build/bin/dtrain}
[[ $dtrain == */* ]] || dtrain=$(command -v "$dtrain") ||
  die "dtrain binary '$DTRAIN' not found on PATH (set DTRAIN to its path)"
[ -x "$dtrain" ] || die "dtrain binary '$dtrain' not found (build: bash .ci/build.sh, or set DTRAIN)"
mpirun_bin=${MPIRUN:+$(command_from_caller "$MPIRUN")}
mpirun_bin=${mpirun_bin:-mpirun}
command -v "$mpirun_bin" >/dev/null || die "'$mpirun_bin' not found"
ini() { sed -n -E "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*([^#;]*).*/\1/p" "$job" | tail -n 1 | sed -E 's/[[:space:]]+$//'; }
data=$(ini train-data)
for ((i = 0; i < ${#extra[@]}; i++)); do [ "${extra[$i]}" != --train-data ] || data=${extra[$((i + 1))]:-}; done
synthetic=$(ini synthetic)
for ((i = 0; i < ${#extra[@]}; i++)); do [ "${extra[$i]}" != --synthetic ] || synthetic=${extra[$((i + 1))]:-}; done
# A synthetic job (--synthetic CxHxW:classes) reads no training set.
[ -n "$synthetic" ] || { [ -n "$data" ] && [ -f "$data" ]; } || die "training set '${data}' (from $job) does not exist; for Fashion-MNIST run: /usr/bin/python3 data-tools/convert_idx.py --fashion-mnist /usr/share/datasets/fashion-mnist --out-dir data/fashion_mnist"
# OUT/sweep.conf: what every run of this folder was made with — the job file's contents, the
# global batch, the steps, the threads, EPOCHS and the dtrain options after -- (not the worker
# counts, modes, ps counts, --ceiling or --lockstep: a rerun may add runs). Finished runs are
# skipped only in a rerun with the same; one with others is refused, naming them (its runs would
# not be the ones it asks for). A folder without it (an older sweep's) gets one, with a warning.
job_sha=$(sha256sum <"$job" | cut -d' ' -f1)
extra_q=""
[ ${#extra[@]} = 0 ] || extra_q=$(printf '%q ' "${extra[@]}")
sweep_conf=$(printf '%s\n' "# data-tools/run_strong_scaling.sh: the parameters of the runs in this folder" \
  "job $(printf '%q' "$job")" "job-sha256 $job_sha" "global-batch $gb" "steps $steps" \
  "threads $threads" "epochs ${EPOCHS:-1000}" "extra ${extra_q% }")
if [ -f "$out/sweep.conf" ]; then
  # conf_value FILE KEY: KEY's value in FILE (the rest of its line), "" without one.
  conf_value() { sed -n "s/^$2 //p" "$1" | head -n 1; }
  differ=()
  old_sha=$(conf_value "$out/sweep.conf" job-sha256)
  [ "$old_sha" = "$job_sha" ] ||
    differ+=("--job: $(conf_value "$out/sweep.conf" job) (sha256 ${old_sha:0:12}) there, $job (sha256 ${job_sha:0:12}) now")
  for key in global-batch steps threads epochs extra; do
    old_v=$(conf_value "$out/sweep.conf" "$key")
    new_v=$(printf '%s\n' "$sweep_conf" | sed -n "s/^$key //p")
    [ "$old_v" = "$new_v" ] || case $key in
      epochs) differ+=("EPOCHS: ${old_v:-(none)} there, $new_v now") ;;
      extra) differ+=("dtrain options after --: '${old_v}' there, '${new_v}' now") ;;
      *) differ+=("--$key: ${old_v:-(none)} there, $new_v now") ;;
    esac
  done
  if [ ${#differ[@]} -gt 0 ]; then
    {
      echo "run_strong_scaling.sh: error: $out holds the runs of another sweep (its sweep.conf); its finished runs would be reused as this one's:"
      printf '  %s\n' "${differ[@]}"
      echo "  give another --out, or the same parameters to complete that sweep"
    } >&2
    exit 2
  fi
elif compgen -G "$out/*/results.json" >/dev/null || compgen -G "$out/ceiling-w*/r*/results.json" >/dev/null; then
  echo "run_strong_scaling.sh: warning: $out holds finished runs but no sweep.conf (an older sweep's):" \
    "they are reused without a check of their job, global batch, steps and threads" >&2
fi
mkdir -p "$out"
[ -f "$out/sweep.conf" ] || { printf '%s\n' "$sweep_conf" >"$out/sweep.conf.tmp" && mv -f "$out/sweep.conf.tmp" "$out/sweep.conf"; }
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc obeys OMP_NUM_THREADS
tck=$(getconf CLK_TCK)
# child_cpu: user + system CPU seconds of this shell's finished children (mpirun and its ranks).
child_cpu() { awk -v t="$tck" '{ sub(/^.*\) /, ""); print ($14 + $15) / t }' "/proc/$$/stat"; }
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
{
  echo "# strong-scaling sweep $(date '+%F %T') on $(hostname) ($cores cores)"
  echo "# job $job, global batch $gb, $steps×$gb samples per run, threads/rank $threads, extra: ${extra[*]:-}"
  echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# host: $(host_shape)"
} | tee -a "$out/sweep.log"

# run_one NAME MODE PS NP MAX_STEPS [DTRAIN_OPTIONS...]: one run of the plan into OUT/NAME, with
# those options after the sweep's (skipped when done before).
run_one() {
  local name=$1 mode=$2 ps=$3 np=$4 max_steps=$5 dir=$out/$1
  shift 5
  if [ -f "$dir/results.json" ]; then
    echo "$name: done before, skipped" | tee -a "$out/sweep.log"
    return 0
  fi
  rm -rf "$dir"
  local flags=(-np "$np" --bind-to none)
  if [ "$np" -gt "$cores" ]; then
    flags+=(--oversubscribe -x OMPI_MCA_mpi_yield_when_idle=1)
  fi
  run_args "$name" "$mode" "$ps" "$max_steps"
  # An option given here replaces the sweep's (dtrain refuses one given twice); one in $drop
  # (words) is left out.
  local kept=() i o
  for ((i = 0; i < ${#args[@]}; i++)); do
    for o in "$@" ${drop:-}; do
      if [[ $o == --* && ${args[$i]} == "$o" ]]; then i=$((i + 1)); continue 2; fi
      if [[ $o == --* && ${args[$i]} == "$o="* ]]; then continue 2; fi
    done
    kept+=("${args[$i]}")
  done
  local cmd=("$mpirun_bin" "${flags[@]}" "$dtrain" --config "$job" "${kept[@]}" "$@")
  echo "$name: load $(cut -d' ' -f1 /proc/loadavg): ${cmd[*]}" | tee -a "$out/sweep.log"
  local l0 c0 t0 t1 c1 l1
  l0=$(cut -d' ' -f1 /proc/loadavg) c0=$(child_cpu) t0=$(date +%s.%N)
  "${cmd[@]}" >"$out/$name.log" 2>&1 || { tail -n 30 "$out/$name.log" >&2; die "run $name failed (log: $out/$name.log)"; }
  t1=$(date +%s.%N) c1=$(child_cpu) l1=$(cut -d' ' -f1 /proc/loadavg)
  # launcher.json: what the run got from the machine (scaling_report.py shows cpu_share = CPU time
  # of all ranks / (elapsed × ranks): below 1 when ranks waited, or shared cores with other work).
  awk -v a="$t0" -v b="$t1" -v c0="$c0" -v c1="$c1" -v np="$np" -v l0="$l0" -v l1="$l1" -v cores="$cores" \
    'BEGIN { printf "{\"elapsed_seconds\": %.3f, \"cpu_seconds\": %.2f, \"ranks\": %d, \"cores\": %d, \"load1_before\": %s, \"load1_after\": %s}\n", b - a, c1 - c0, np, cores, l0, l1 }' \
    >"$dir/launcher.json"
  echo "$name: $(cat "$dir/launcher.json")" | tee -a "$out/sweep.log"
}

# The ceiling runs are N independent jobs: --pin-threads cannot split the node between them (each
# would take the whole node as its block), so they run unpinned.
ceiling_extra=()
for a in "${extra[@]}"; do [ "$a" = --pin-threads ] || ceiling_extra+=("$a"); done
# run_ceiling N: the host's ceiling for N workers into OUT/ceiling-wN/r1..rN (skipped when done:
# all N runs have their results.json; one that failed or never ran makes the N run again together).
run_ceiling() {
  local w=$1 cdir=$out/ceiling-w$1 k done=1
  for ((k = 1; k <= w; k++)); do
    [ -f "$cdir/r$k/results.json" ] || done=0
  done
  if [ "$done" = 1 ]; then
    echo "ceiling-w$w: done before, skipped" | tee -a "$out/sweep.log"
    return 0
  fi
  rm -rf "$cdir"
  mkdir -p "$cdir"
  # --threads 0 is dtrain's cores/ranks of the node: the N-worker run's ranks get cores/N each
  # (at least 1), and so does each of the N ceiling runs beside it (alone, each would take them all).
  local ct=$threads
  [ "$ct" != 0 ] || ct=$((cores / w > 0 ? cores / w : 1))
  echo "ceiling-w$w: load $(cut -d' ' -f1 /proc/loadavg): $w x ($mpirun_bin -np 1 --bind-to none $dtrain --config $job --mode sync --num-ps 0 --global-batch-size $((gb / w)) --max-steps $steps --threads $ct ...) started together" |
    tee -a "$out/sweep.log"
  local pids=() session
  for ((k = 1; k <= w; k++)); do
    # Each mpiexec its own Open MPI session folder: started together, two of them can race to
    # create the same one ("mkdir ... File exists", orte_init fails).
    session=${OMPI_MCA_orte_tmpdir_base:-${TMPDIR:-/tmp}}/dtrain-ceiling-$$-r$k
    mkdir -p "$session"
    OMPI_MCA_orte_tmpdir_base=$session "$mpirun_bin" -np 1 --bind-to none "$dtrain" --config "$job" --mode sync --num-ps 0 \
      --global-batch-size $((gb / w)) --max-steps "$steps" --epochs "${EPOCHS:-1000}" \
      --threads "$ct" --run-dir "$cdir/r$k" "${ceiling_extra[@]}" >"$cdir/r$k.log" 2>&1 &
    pids+=($!)
  done
  local failed=0 p
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  rm -rf "${OMPI_MCA_orte_tmpdir_base:-${TMPDIR:-/tmp}}"/dtrain-ceiling-$$-r*
  [ "$failed" = 0 ] || { tail -n 30 "$cdir"/r*.log >&2; die "a ceiling run of $w failed (logs: $cdir/r*.log)"; }
  echo "ceiling-w$w: samples/s $(cat "$cdir"/r*/results.json | sed -n -E 's/.*"samples_per_sec": ([0-9.e+-]+).*/\1/p' | tr '\n' ' ')" |
    tee -a "$out/sweep.log"
}

# keep_runs: --keep-runs TGZ rewritten with every finished run (written aside, then renamed: a
# sweep killed meanwhile leaves the previous one whole).
if [ -n "$keep" ]; then
  mkdir -p "$(dirname "$keep")"
  keep=$(realpath -m "$keep")
fi
keep_runs() {
  [ -n "$keep" ] || return 0
  (cd "$out" && shopt -s nullglob &&
    tar -czf "$keep.part" ./sweep.conf ./*.log ./*/results.json ./*/launcher.json ./ceiling-w*/r*.log \
      ./ceiling-w*/r*/results.json) && mv -f "$keep.part" "$keep"
}

# By worker count: each N's runs of every mode, then its ceiling and its lock-step run.
for w in $workers; do
  for line in "${plan[@]}"; do
    read -r name mode ps lw np max_steps <<<"$line"
    [ "$lw" = "$w" ] || continue
    run_one "$name" "$mode" "$ps" "$np" "$max_steps"
    keep_runs
  done
  if [ "$ceiling" = 1 ] && [ "$w" -gt 1 ]; then
    run_ceiling "$w"
    keep_runs
  fi
  if [ "$lockstep" = 1 ] && [ "$w" -gt 1 ] && [[ " $modes " == *" sync "* ]]; then
    # How the sum is sent is no option of a run that sends none (dtrain refuses it there).
    drop="--wire-dtype --bucket-mb --bucket-link" run_one "lockstep-w$w" sync 0 "$w" "$steps" --allreduce none
    keep_runs
  fi
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/sweep.log"
keep_runs
if [ "$report" = 1 ]; then
  # --force: a rerun into the same --out (to complete a sweep) regenerates the report.
  "$(command_from_caller "${PYTHON:-/usr/bin/python3}")" data-tools/scaling_report.py "$out" --out "$out/report" --force
fi
