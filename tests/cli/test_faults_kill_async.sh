#!/usr/bin/env bash
# tests/cli/test_faults_kill_async.sh — a rank killed with SIGKILL in the ps modes (1 ps + 3
# workers): async — a worker, the ps, the chief; sync through the ps — a worker (the others wait
# for an update that cannot come, until the kill ends the job); async pipelined over 2 stages
# with a ps each (2 ps + 2 workers) — stage 0's ps, stage 0's worker. For each (kill_case in
# faults_common.sh): the job must end within 30 s of the kill (bounded by 60 s) with mpirun's
# message naming the dead rank ("rank R ... signal 9") and that rank's role findable in the role
# table printed at start; every complete checkpoint left behind must verify (Fletcher32, via
# h5py); `--resume` must continue from the newest and finish.
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"
make_fault_data

kill_case async 4 1 worker --num-ps 1
kill_case async 4 3 ps --num-ps 1
kill_case async 4 0 worker --num-ps 1
kill_case sync 4 2 worker --num-ps 1
# A pipeline of P = 2 stages, each with a ps of its own (ranks 2, 3; stage 0 on worker 1 = rank 1).
CASE_TAG=-pipe kill_case async 4 2 ps --num-ps 2 --pipeline-stages 2 --micro-batches 4
CASE_TAG=-pipe kill_case async 4 1 worker --num-ps 2 --pipeline-stages 2 --micro-batches 4
echo "PASS"

