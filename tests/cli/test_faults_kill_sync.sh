#!/usr/bin/env bash
# tests/cli/test_faults_kill_sync.sh — a rank killed with SIGKILL in sync mode (3 workers): a worker and
# the chief, with the default allreduce and with --allreduce hierarchical (the chief is the
# node's leader there), and a worker with hierarchical in 16 bits. For each (kill_case in faults_common.sh): the job must end within 30 s
# of the kill (bounded by 60 s) with mpirun's message naming the dead rank ("rank R ... signal 9")
# and that rank's role findable in the role table printed at start; every complete checkpoint left
# behind must verify (Fletcher32, via h5py); `--resume` must continue from the newest and finish.
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"
make_fault_data

kill_case sync 3 2 worker --num-ps 0
kill_case sync 3 0 worker --num-ps 0
# --allreduce hierarchical: the workers wait for each other in shared memory, not in MPI; a killed
# worker (and a killed node leader, worker 0) still ends the job, naming the rank.
CASE_TAG=-hier kill_case sync 3 1 worker --num-ps 0 --allreduce hierarchical
CASE_TAG=-hier kill_case sync 3 0 worker --num-ps 0 --allreduce hierarchical
# The same with 16-bit slots (--wire-dtype bf16): the barriers do not depend on the slots' dtype.
CASE_TAG=-hier16 kill_case sync 3 1 worker --num-ps 0 --allreduce hierarchical --wire-dtype bf16
echo "PASS"
