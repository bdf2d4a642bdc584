#!/usr/bin/env bash
# tests/cli/test_faults_stuck.sh — a stuck rank and the watchdog (--timeout 5).
#   1. sync, 3 workers: worker rank 1 stopped with SIGSTOP: the other workers wait in an allreduce
#      (the gradient's, or the epoch-end metrics' if the stop fell on an epoch boundary); after
#      --timeout one reports "[rank R ...] timed out after 5 s waiting in: ... allreduce ..." and the
#      job aborts (non-zero) — well before the 60 s bound.
#      With --allreduce hierarchical the others wait in shared memory, and the message names the
#      stopped worker ("waiting for worker 1 (world rank 1, pid P)"); so does the hook in a run
#      of several buckets (the communication thread's sum), exit 4, no crash.
#   2. async, 1 ps + 1 worker: the ps (rank 1) stopped with SIGSTOP: the worker reports waiting in an
#      exchange "with ps 0 (rank 1)" and the job aborts. (With more workers, one already waiting for
#      the others in an epoch-end allreduce may time out first: then that operation is named.)
#   3. async: DTRAIN_FAULT=hang@20:2 (test-only hook: worker rank 2 sleeps forever at step 20): the
#      other workers finish the epoch and wait for it in a collective; the watchdog reports and the
#      job aborts.
#   4. sync through the ps, and SSP: the same hook: the others wait for the update (held replies,
#      deadline 2 × --timeout) and the ps, waiting for the missing push, times out first and names
#      the stuck worker ("no request from worker 2 (world rank 2)"); the job aborts.
#   6. a pipeline (--pipeline-stages 2): DTRAIN_FAULT=hang@20:1 stops stage 0 (world rank 1);
#      stage 1 waits for its activations, or for it at the stages' agreement after the step (2 ×
#      --timeout: longer than a stage waits on its own peers), and the watchdog names the stage and
#      its rank.
#   6b. the same with D = 2 replicas (allreduce), world rank 1 or 0 stuck after a step's compute:
#      the rank waiting for it in the stages' agreement names it, and no rank names a healthy one
#      (the replicas of a stage meet before each step, waiting 3 x --timeout).
#   7. a pipeline with a ps per stage (async, 2 ps + 2 workers): stage 1's ps (rank 3) stopped
#      with SIGSTOP: stage 1 reports waiting "with ps 0 (rank 3)" (its stage's ps 0), or stage 0
#      waiting for stage 1 (the gradients of a micro-batch, or the stages' agreement on the step).
#   7b. the same in sync through the ps: the stopped ps is named, by the other ps, which waits for
#      its say on the step (1.5 × --timeout; the stages wait 2 × --timeout for held replies).
#   7c. sync through 2 ps (3 workers), no pipeline, ps 1 stopped: ps 0 names it the same way, or
#      (stopped between steps) a worker waiting for a reply ps 1 gives at once does, after
#      --timeout.
#   7e. the latter made certain: ps 1 hangs on the chief's checkpoint snapshot (hang-ps-snapshot).
#   7d. a sync pipeline through the ps, stage 0's worker stuck: its ps names it (world rank 1), not
#      stage 1's ps, which waits for that ps's say on the step.
#   5. DTRAIN_FAULT=hang-reader@30:0, one worker: its batch reader thread hangs at batch 30 (a hung
#      file system); the worker's wait for the batch times out naming the batch and the file.
#   8. no stuck rank, steps longer than --timeout in a sync pipeline through the ps: the run ends.
# In every case no rank is left behind (the job ends) and every checkpoint written verifies.
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"
make_fault_data

stuck_case() {  # stuck_case NAME NP HOW WORDS ARGS...  (HOW: stop:RANK | hook:SPEC)
  local name=$1 np=$2 how=$3 words=$4
  shift 4
  local dir=$SCRATCH/$name log=$SCRATCH/$name.log
  echo "== $name"
  [[ $how == hook:* ]] && export DTRAIN_FAULT=${how#hook:}
  start_job "$log" -n "$np" -x DTRAIN_FAULT "$DTRAIN" "${FX[@]}" --run-dir "$dir" --timeout 5 \
    --checkpoint-every 10 "$@"
  unset DTRAIN_FAULT
  wait_ckpts "$dir" 1 60
  local t0
  t0=$(now)
  if [[ $how == stop:* ]]; then
    local pid
    pid=$(rank_pid "${how#stop:}") || fail "rank ${how#stop:} not found"
    kill -STOP "$pid"
  fi
  wait_job 60
  echo "   exit $JOB_RC after $(elapsed "$t0" "$(now)") s"
  [[ $JOB_RC -ne 124 ]] || { cat "$log"; fail "$name: the job hung (> 60 s)"; }
  [[ $JOB_RC -ne 0 ]] || { cat "$log"; fail "$name: exit 0 with a stuck rank"; }
  # The watchdog's exit (kExitFault), not a crash while the others unwind.
  [[ $JOB_RC -eq 4 ]] || { cat "$log"; fail "$name: exit $JOB_RC, want 4 (the watchdog's)"; }
  local msg w
  # WATCHDOG_S "a/b": either deadline (where the stop falls decides which rank's wait ends first).
  # Not the stopped rank's own message: mpirun's abort sends SIGCONT before SIGTERM, and the rank
  # let go reports its own wait, stopped too, as timed out (naming a healthy peer).
  local after=${WATCHDOG_S:-5} stopped=none
  [[ $how == stop:* ]] && stopped=${how#stop:}
  msg=$(grep -E "timed out after (${after//\//|}) s" "$log" |
    grep -v "^dtrain: error: \[rank $stopped " | sed -n 1p) || true
  [[ -n $msg ]] || { cat "$log"; fail "$name: no watchdog message after ${WATCHDOG_S:-5} s"; }
  local IFS='|'
  # Each '|'-separated word must appear; a word "a/b" is satisfied by either (where a stuck peer
  # leaves the others waiting depends on the moment it stopped).
  local alt found
  for w in $words; do
    found=0
    IFS=/
    for alt in $w; do grep -qF -- "$alt" <<<"$msg" && found=1; done
    IFS='|'
    ((found)) || { cat "$log"; fail "$name: the message lacks '$w': $msg"; }
  done
  unset IFS
  grep -q "\[rank [0-9]" <<<"$msg" || fail "$name: the message does not name its rank: $msg"
  echo "   $msg"
  verify_ckpts "$dir"
}

stuck_case sync-stop 3 stop:1 "allreduce/batchnorm statistics" --mode sync --num-ps 0
# (Where the stop falls outside the gradient's sum, the batchnorm statistics — gathered for a
# checkpoint, or their allgather at an epoch's end — or the metrics are what the others wait in,
# over MPI.)
stuck_case sync-hier-stop 3 stop:1 "world rank 1/batchnorm statistics/allreduce of metrics" \
  --mode sync --num-ps 0 --allreduce hierarchical
# Several buckets summed by the communication thread (--bucket-mb 0.003: 12 for the tiny CNN):
# its sum names the stuck worker and ends the step's wait at once (the others used to wait on,
# then free the shared memory the thread still polled: SIGSEGV instead of the watchdog's exit).
stuck_case sync-hier-buckets 3 hook:hang@20:1 "waiting for worker 1 (world rank 1" --mode sync \
  --num-ps 0 --allreduce hierarchical --bucket-mb 0.003
# Two nodes (DTRAIN_TEST_RANKS_PER_NODE=1): the communication thread is inside the node leaders'
# blocking MPI sum, which a stuck peer never lets return: left behind, the job still exits 4
# (it used to wait for it forever).
export DTRAIN_TEST_RANKS_PER_NODE=1
stuck_case sync-hier-2nodes 2 hook:hang@20:1 "gradient allreduce of bucket" --mode sync \
  --num-ps 0 --allreduce hierarchical --bucket-mb 0.003
unset DTRAIN_TEST_RANKS_PER_NODE
stuck_case async-ps-stop 2 stop:1 "ps 0 (rank 1)" --mode async --num-ps 1
stuck_case async-hang 4 hook:hang@20:2 "waiting in:" --mode async --num-ps 1
stuck_case sync-ps-hang 4 hook:hang@20:2 "no request from worker 2 (world rank 2)" --mode sync \
  --num-ps 1
stuck_case ssp-hang 4 hook:hang@20:2 "no request from worker 2 (world rank 2)" --mode async \
  --num-ps 1 --max-staleness 1
stuck_case pipe-ps-stop 4 stop:3 "ps 0 (rank 3)/from stage 1/stages agreeing" --mode async \
  --num-ps 2 --pipeline-stages 2 --micro-batches 4
# 7b. the same in sync through the ps: the ps ranks agree on every step's update, and stage 0's ps
# waits 1.5 × --timeout for the stopped one's say — less than the stages wait for their held
# replies (2 × --timeout) — so the stopped ps is the one named (stage 0 used to time out first, at
# --timeout, naming stage 1, a healthy worker; then stage 0's ps, a healthy ps).
# Where ps 1 stops after its say on a step that ps 0 then makes, ps 0 is idle (it waits longer
# than anyone) and stage 1's worker, pushing that step to the stopped ps, names it after its
# 2 x --timeout wait for the reply.
WATCHDOG_S=7.5/10 stuck_case pipe-sync-ps-stop 4 stop:3 \
  "the ps at world rank 3/pushing gradients with ps 0 (rank 3)" --mode sync --num-ps 2 \
  --pipeline-stages 2 --micro-batches 4
# 7d. a sync pipeline through the ps, stage 0's worker (world rank 1) stuck before its push: stage
# 1's ps has the step and waits for stage 0's say; stage 0's ps, which knows whose push it lacks,
# names that worker after --timeout, before stage 1's ps would name it (a healthy ps) after 1.5 ×.
stuck_case pipe-sync-ps-hang 4 hook:hang@20:1 "world rank 1" --mode sync --num-ps 2 \
  --pipeline-stages 2 --micro-batches 4
# 7c. sync through 2 ps, no pipeline: ps 1 (world rank 4) stopped; ps 0 names it the same way (it
# used to wait for pushes that the workers, held up by ps 1, never sent, and blame a worker).
# Stopped between steps (a pull at an epoch's end, a checkpoint's snapshot), ps 1 leaves a worker
# waiting for a reply a ps gives at once: it names ps 1 after --timeout, ps 0 waiting longer for
# that worker's push (1.25 x) or, idle, for any message (3 x); ps 0 used to time out first, after
# --timeout, naming that healthy worker or no one.
# Stopped after its say on a step that ps 0 then makes (ps 0 idle), ps 1 leaves the workers
# pushing the next step: they name it after their 2 x --timeout wait for the reply.
WATCHDOG_S=7.5/5/10 stuck_case sync-2ps-stop 5 stop:4 \
  "the ps at world rank 4/no reply from ps 1 (rank 4)" --mode sync --num-ps 2
# 7e. The same moment made certain: ps 1 hangs on the chief's snapshot for the checkpoint of step
# 20. The chief names it after --timeout; ps 0, holding the others' pushes of the next step, waits
# 1.25 x for the chief's (it named the healthy chief after --timeout).
stuck_case sync-2ps-snapshot 5 hook:hang-ps-snapshot@20:4 \
  "worker 0 gathering a checkpoint snapshot|no reply from ps 1 (rank 4)" --mode sync --num-ps 2
# 5. the batch reader thread hangs (a hung file system): next() has the same deadline.
stuck_case reader-hang 1 hook:hang-reader@30:0 "reading batch 30 of|fx.h5" --mode sync --num-ps 0
# 6. a pipeline stage stuck: its neighbour names it.
WATCHDOG_S=10 stuck_case pipe-hang 2 hook:hang@20:1 "pipeline: stage 1|stage 0 (world rank 1)|worker 0 stage 1/2, replica 0 " \
  --mode sync --num-ps 0 --pipeline-stages 2 --micro-batches 4
# 6b. D = 2 replicas of P = 2 stages (allreduce): a rank stuck after its step's compute, whose sum
# its communication thread completes. Its stage peer waited in the next step's sum for it, and the
# other replica's neighbouring stage for the healthy rank waiting for it in the stages' agreement
# (2 x --timeout), both after --timeout: a healthy rank was named, sometimes first. The replicas of
# a stage now meet before each step (3 x --timeout): the rank waiting in the agreement names the
# stuck one, and no rank names a healthy one. World rank 1 is stage 0 of replica 0, 0 the chief.
for r in 1 0; do
  WATCHDOG_S=10 stuck_case "pipe-d2-hang$r" 4 "hook:hang@20:$r" \
    "stages agreeing on the global step|(world rank $r)" --mode sync --num-ps 0 \
    --pipeline-stages 2 --micro-batches 4
  blamed=$(grep "timed out after" "$SCRATCH/pipe-d2-hang$r.log" | grep -v "world rank $r[,)]" || true)
  [[ -z $blamed ]] || fail "pipe-d2-hang$r: a healthy rank is named: $blamed"
done
# 8. No stuck rank, only steps longer than --timeout (3 s steps, --timeout 2) in a sync pipeline
# through the ps, whose ps wait 4 × --timeout: the run ends (a ps took the other's say on the last
# step for a say on the next one, and gave the next step --timeout to come).
echo "== pipe-sync-ps-slow"
DTRAIN_FAULT=slow+3000 timeout 120 "$MPIEXEC" -n 4 -x DTRAIN_FAULT "$DTRAIN" "${FX[@]}" \
  --run-dir "$SCRATCH/pipe-sync-ps-slow" --mode sync --num-ps 2 --pipeline-stages 2 \
  --micro-batches 4 --timeout 2 --max-steps 5 >"$SCRATCH/pipe-sync-ps-slow.log" 2>&1 ||
  { cat "$SCRATCH/pipe-sync-ps-slow.log"; fail "pipe-sync-ps-slow: a slow step was taken for a stuck rank"; }
echo "PASS"
