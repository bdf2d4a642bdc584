#!/usr/bin/env bash
# tests/cli/test_signals_during_compute.sh — a stop signal never runs a handler on a computing
# thread (train/signals.hpp: oneDNN's generated GEMM kernels point the stack pointer into the heap,
# and a signal frame written there corrupted it — oneDNN issue #4845).
#   1. compute_under_signals: 2 s of training steps (oneDNN GEMM kernels) under a storm of SIGUSR1
#      (one every 20 µs, about 25,000), with AVX-512 kernels where the CPU has them and again with
#      oneDNN capped at AVX2: exit 0, every signal taken by the signal thread. Before the signal
#      thread, glibc aborted it within the 2 s on every run ("corrupted size vs. prev_size").
#   2. The dtrain binary, async 1 ps + 2 workers: each rank has one thread "dtrain-signals" (in
#      sigwait, which lifts the block while it waits), and on every other thread (MPI's and
#      OpenMP's included) SIGTERM, SIGUSR1 and SIGINT are blocked (/proc/PID/task/TID/status
#      SigBlk); no thread catches them (SigCgt). SIGUSR1 to every rank then stops the job (exit 75).
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"

echo "== 1. training steps under a SIGUSR1 storm"
for isa in default AVX2; do
  env_isa=()
  [[ $isa == default ]] || env_isa=(ONEDNN_MAX_CPU_ISA=$isa)
  out=$(env "${env_isa[@]}" timeout 120 "$BIN/compute_under_signals" 2 2>&1) ||
    { echo "$out"; fail "compute_under_signals ($isa kernels) failed"; }
  echo "   $isa kernels: $(echo "$out" | tail -1)"
done

echo "== 2. every thread of every rank blocks the stop signals and catches none"
make_fault_data
d=$SCRATCH/ranks
start_job "$d.log" -n 3 "$DTRAIN" "${FX[@]}" --mode async --num-ps 1 --run-dir "$d" \
  --checkpoint-every 10 --timeout 30
wait_ckpts "$d" 1 60
# Bits of SIGINT (2), SIGUSR1 (10) and SIGTERM (15) in a /proc status mask: bit signo − 1.
want=$(( (1 << 1) | (1 << 9) | (1 << 14) ))
pids=()
for ((r = 0; r < 3; ++r)); do
  p=$(rank_pid $r) || fail "rank $r not found among the children of mpiexec"
  pids+=("$p")
  threads=0 takers=0
  for status in /proc/"$p"/task/*/status; do
    st=$(cat "$status" 2>/dev/null) || continue  # the thread ended while we looked
    name=$(awk '/^Name:/ {print $2}' <<<"$st")
    blk=$(awk '/^SigBlk:/ {print $2}' <<<"$st") cgt=$(awk '/^SigCgt:/ {print $2}' <<<"$st")
    [[ -n $blk ]] || continue
    threads=$((threads + 1))
    if [[ $name == dtrain-signals ]]; then
      takers=$((takers + 1))
    elif (( (0x$blk & want) != want )); then
      fail "rank $r, thread ${status%/status}: stop signals not blocked (SigBlk $blk)"
    fi
    (( (0x$cgt & want) == 0 )) ||
      fail "rank $r, thread ${status%/status}: a handler catches a stop signal (SigCgt $cgt)"
  done
  ((takers == 1)) || fail "rank $r: $takers threads named dtrain-signals, want 1"
  echo "   rank $r: $threads threads; all but dtrain-signals block SIGINT/SIGUSR1/SIGTERM, none" \
    "catches them"
done
kill -USR1 "${pids[@]}" 2>/dev/null || true
wait_job 60
[[ $JOB_RC -eq 75 ]] || { cat "$d.log"; fail "SIGUSR1 to every rank: exit $JOB_RC, want 75"; }
[[ $(json_get "$d/results.json" stopped_by) == signal ]] || fail "stopped_by is not 'signal'"
echo "   SIGUSR1 to every rank: exit 75, stopped_by signal"
echo "PASS"
