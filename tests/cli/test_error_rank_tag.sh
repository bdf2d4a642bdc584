#!/usr/bin/env bash
# tests/cli/test_error_rank_tag.sh — every error that reaches main() names its rank: the one
# `dtrain: error:` line starts with the rank tag, "[rank R]" before the ranks know their roles and
# "[rank R worker|ps I HOST]" after, exactly once, for
#   1. a config error (an invalid option value, found while parsing the command line), under
#      mpiexec -n 3 and alone (one rank);
#   2. a data error (a missing training file, and one that is not HDF5, found while checking the
#      job on every rank);
#   3. a runtime fault (a NaN gradient in async mode: worker rank 1's RuntimeFault, which main()
#      prints before MPI_Abort; exit 4).
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/faults_common.sh"
make_fault_data
echo "not HDF5" >"$SCRATCH/not-hdf5.h5"

# has_tag LOG REGEX: the log's one error line starts with "dtrain: error: [REGEX] " and names a rank
# only there.
has_tag() {
  local msg
  msg=$(grep "dtrain: error:" "$1")
  grep -qE "^dtrain: error: \[$2\] " <<<"$msg" || { cat "$1"; fail "no rank tag [$2]: $msg"; }
  [[ $(grep -o "\[rank " <<<"$msg" | wc -l) -eq 1 ]] || fail "the rank tag is not there once: $msg"
  echo "   $msg" | cut -c1-200
}

ROLE="rank [0-9]+ (worker|ps) [0-9]+ [^] ]+"  # the tag once the job knows each rank's role

expect_error 3 "--epochs|abc" "${FX[@]}" --run-dir "$SCRATCH/run" --epochs abc
has_tag "$SCRATCH/case$((cases - 1)).log" "rank 0"
expect_error 0 "--epochs|abc" "${FX[@]}" --run-dir "$SCRATCH/run" --epochs abc
has_tag "$SCRATCH/case$((cases - 1)).log" "rank 0"

expect_error 3 "missing.h5" --config "$SCRATCH/fx.ini" --run-dir "$SCRATCH/run" --train-data "$SCRATCH/missing.h5"
[[ $last_rc -eq 2 ]] || fail "a missing file: exit $last_rc, want 2"
has_tag "$SCRATCH/case$((cases - 1)).log" "$ROLE"
expect_error 3 "not-hdf5.h5" --config "$SCRATCH/fx.ini" --run-dir "$SCRATCH/run" --train-data "$SCRATCH/not-hdf5.h5"
has_tag "$SCRATCH/case$((cases - 1)).log" "$ROLE"
[[ ! -e $SCRATCH/run ]] || fail "a refused job created its run dir"

LOG=$SCRATCH/fault.log
set +e
DTRAIN_FAULT=nan-gradient@30:1 timeout 60 "$MPIEXEC" -n 3 -x DTRAIN_FAULT "$DTRAIN" "${FX[@]}" \
  --run-dir "$SCRATCH/fault" --mode async --num-ps 1 --max-steps 200 --timeout 60 >"$LOG" 2>&1
rc=$?
set -e
echo "-- runtime fault: exit $rc"
[[ $rc -ne 124 ]] || { cat "$LOG"; fail "the runtime fault hung"; }
[[ $rc -eq 4 ]] || { cat "$LOG"; fail "the runtime fault: exit $rc, want 4"; }
[[ $(grep -c "dtrain: error:" "$LOG") -eq 1 ]] || { cat "$LOG"; fail "want one error message"; }
grep -q "non-finite gradient" "$LOG" || { cat "$LOG"; fail "the fault's message is missing"; }
has_tag "$LOG" "rank 1 worker 1 [^] ]+"
echo "PASS: config, data and runtime errors carry the rank tag"
