#!/usr/bin/env bash
# slurm/submit_strong_scaling.sh — submit a strong-scaling sweep to Slurm: one slurm/train.sbatch job
# per run of the plan that data-tools/run_strong_scaling.sh makes (the same total problem — fixed
# global batch, fixed number of samples — on 1, 2, 4, ... workers; sync, and async with each ps
# count), chained with --dependency=afterany so that no two runs share the nodes and the timings are
# clean; then a report job that writes the table and plot (data-tools/scaling_report.py).
#
# Usage:   slurm/submit_strong_scaling.sh [sweep options] [-- extra dtrain options]
# Example: slurm/submit_strong_scaling.sh --workers "1 2 4 8 12" --ps "1 2 4" --steps 200 \
#              --out runs/scaling-cluster
#   Sweep options are run_strong_scaling.sh's: --job FILE, --workers LIST, --modes LIST, --ps LIST,
#   --global-batch N, --steps N, --threads N, --out DIR (see data-tools/run_strong_scaling.sh --help).
#   -h, --help prints this text.
# Run it from the repository root (the jobs run in the submit directory).
# Environment:
#   CHAIN        1: each run waits for the previous one (afterany); 0: submit all at once (default: 1)
#   SBATCH_ARGS  extra sbatch options for every run, e.g. "--time=00:30:00 --partition=cpu
#                --ntasks-per-node=16" (word-split; default: none)
#   REPORT       1: submit the report job after the last run (default: 1)
#   PYTHON       the report's interpreter (default: /usr/bin/python3)
#   DTRAIN, LAUNCHER, MPIRUN, ...: passed on to slurm/train.sbatch (see its header)
# Prints one line per submitted job (name, job id) and the report's output files. Each run leaves
# OUT/<run>/results.json; its log is OUT/<run>-<jobid>.out.
set -euo pipefail
cd "$(dirname "$0")/.."
die() {
  echo "submit_strong_scaling.sh: error: $*" >&2
  exit 2
}
# --help is this script's; --host would print the login node's shape where plan lines are read.
for a in "$@"; do
  case $a in
    --) break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    --host)
      die "--host describes the machine it runs on, not the nodes the jobs get" \
        "(run data-tools/run_strong_scaling.sh --host in a job there)" ;;
  esac
done
command -v sbatch >/dev/null || die "sbatch not found (is this a Slurm login node? is SLURM_CONF set?)"
plan=$(bash data-tools/run_strong_scaling.sh --plan "$@") || die "could not make the plan (see above)"
[ -n "$plan" ] || die "empty plan"
read -r -a sbatch_args <<<"${SBATCH_ARGS:-}"

out="" prev="" ids=()
while IFS= read -r line; do
  run=()
  eval "run=($line)"            # NAME RANKS JOB DTRAIN_OPTIONS..., printf %q-quoted
  name=${run[0]} np=${run[1]} job=${run[2]}
  opts=("${run[@]:3}")
  for ((i = 0; i < ${#opts[@]}; i++)); do [ "${opts[$i]}" != --run-dir ] || dir=${opts[$((i + 1))]}; done
  out=$(dirname "$dir")
  mkdir -p "$out"
  dep=()
  if [ "${CHAIN:-1}" = 1 ] && [ -n "$prev" ]; then dep=(--dependency="afterany:$prev"); fi
  id=$(sbatch --parsable -J "scaling-$name" --ntasks="$np" "${dep[@]}" -o "$out/$name-%j.out" \
    "${sbatch_args[@]}" slurm/train.sbatch "$job" "${opts[@]}") || die "sbatch of run $name failed"
  id=${id%%;*}
  echo "$name $id"
  prev=$id
  ids+=("$id")
done <<<"$plan"

# sh_quote WORD: WORD in single quotes for /bin/sh (sbatch --wrap runs its command with sh, which
# has no $'...' of printf %q): every ' inside closed, escaped and reopened ('\'').
sh_quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
if [ "${REPORT:-1}" = 1 ]; then
  deps=$(IFS=:; echo "${ids[*]}")
  report_cmd="$(sh_quote "${PYTHON:-/usr/bin/python3}") data-tools/scaling_report.py $(sh_quote "$out")"
  report_cmd+=" --out $(sh_quote "$out/report") --force"
  id=$(sbatch --parsable -J scaling-report --ntasks=1 --dependency="afterany:$deps" \
    -o "$out/report-%j.out" "${sbatch_args[@]}" --wrap "$report_cmd") ||
    die "sbatch of the report job failed"
  echo "report ${id%%;*} -> $out/report.md, $out/report.csv, $out/report.png"
fi
