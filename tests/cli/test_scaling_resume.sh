#!/usr/bin/env bash
# tests/cli/test_scaling_resume.sh — a strong-scaling sweep cut short keeps what it finished, and
# continues (data-tools/run_strong_scaling.sh --keep-runs, the sweeps of tests/gpu/device.sh):
#   1. the runs go by worker count — 1 worker's sync and async, then 2 workers' and their
#      ceiling — and --keep-runs TGZ holds every run's results.json, launcher.json and log and the
#      sweep log, relative to the sweep's folder; the sweep log names the host's shape;
#   2. a sweep whose 2-worker sync run fails (a dtrain that fails there) stops there, and
#      its TGZ already holds the 1-worker runs, not the failed one;
#   3. that TGZ unpacked into a new folder, the sweep run again there skips the 1-worker runs
#      and runs the rest; scaling_report.py reads the folder;
#   4. a ceiling folder one of whose N runs has no results.json (failed) is not done: rerun;
#   5. a rerun into that folder with another job file, --global-batch, --steps or other dtrain
#      options is refused (exit 2, naming each), reusing none of its runs (OUT/sweep.conf, kept
#      in the archive too).
set -euo pipefail
source "$(dirname "$0")/common.sh"
make_data train 256 --seed 53
write_job "$SCRATCH/job.ini"
# sweep OUT TGZ [DTRAIN_OPTIONS...]: workers 1 and 2, sync and async, with the ceiling, into OUT,
# keeping TGZ.
sweep() {
  bash "$SRC/data-tools/run_strong_scaling.sh" --job "$SCRATCH/job.ini" --workers "1 2" \
    --global-batch 16 --steps 4 --out "$1" --ceiling --no-report --keep-runs "$2" \
    -- --train-data "$SCRATCH/train.h5" --summaries false "${@:3}"
}
# members TGZ: the files in TGZ, one per line, sorted.
members() { tar -tzf "$1" | sed 's|^\./||' | grep -v '/$' | sort; }

echo "== 1. by worker count, every finished run kept"
DTRAIN=$DTRAIN MPIRUN=$MPIEXEC sweep "$SCRATCH/full" "$SCRATCH/full.tgz" >"$SCRATCH/full.out" 2>&1 ||
  { cat "$SCRATCH/full.out"; fail "the sweep failed"; }
order=$(sed -n -E 's/^([a-z0-9-]+): load .*/\1/p' "$SCRATCH/full/sweep.log" | paste -sd' ')
[[ $order == "sync-w1 async-ps1-w1 sync-w2 async-ps1-w2 ceiling-w2" ]] || fail "run order: $order"
grep -q "^# host: " "$SCRATCH/full/sweep.log" || fail "the sweep log does not name the host"
members "$SCRATCH/full.tgz" >"$SCRATCH/full.list"
for f in sweep.log sync-w1.log sync-w1/results.json sync-w1/launcher.json async-ps1-w2/results.json \
  async-ps1-w2/launcher.json ceiling-w2/r1.log ceiling-w2/r2/results.json; do
  grep -qx "$f" "$SCRATCH/full.list" || { cat "$SCRATCH/full.list"; fail "$f not kept"; }
done
[[ ! -e $SCRATCH/full.tgz.part ]] || fail "a partial archive was left behind"

echo "== 2. cut short at the 2-worker sync run: the 1-worker runs are kept"
cat >"$SCRATCH/fails_sync_2.sh" <<EOF
#!/usr/bin/env bash
[[ "\${OMPI_COMM_WORLD_SIZE:-1} \$*" != "2 "*"--mode sync"* ]] || { echo "dtrain (test): refusing 2 sync ranks" >&2; exit 3; }
exec "$DTRAIN" "\$@"
EOF
chmod +x "$SCRATCH/fails_sync_2.sh"
if DTRAIN=$SCRATCH/fails_sync_2.sh MPIRUN=$MPIEXEC sweep "$SCRATCH/cut" "$SCRATCH/cut.tgz" \
  >"$SCRATCH/cut.out" 2>&1; then
  fail "the sweep went on past a failed run"
fi
grep -q "run sync-w2 failed" "$SCRATCH/cut.out" || { cat "$SCRATCH/cut.out"; fail "no error naming sync-w2"; }
members "$SCRATCH/cut.tgz" >"$SCRATCH/cut.list"
grep -qx "sync-w1/results.json" "$SCRATCH/cut.list" && grep -qx "async-ps1-w1/results.json" "$SCRATCH/cut.list" ||
  { cat "$SCRATCH/cut.list"; fail "the 1-worker runs are not kept"; }
! grep -q "w2/results.json" "$SCRATCH/cut.list" || { cat "$SCRATCH/cut.list"; fail "a 2-worker run is kept"; }

echo "== 3. unpacked elsewhere, the sweep continues"
mkdir -p "$SCRATCH/resumed"
tar -xzf "$SCRATCH/cut.tgz" -C "$SCRATCH/resumed"
DTRAIN=$DTRAIN MPIRUN=$MPIEXEC sweep "$SCRATCH/resumed" "$SCRATCH/resumed.tgz" >"$SCRATCH/resumed.out" 2>&1 ||
  { cat "$SCRATCH/resumed.out"; fail "the resumed sweep failed"; }
for r in sync-w1 async-ps1-w1; do
  grep -q "^$r: done before, skipped" "$SCRATCH/resumed/sweep.log" || fail "$r was not skipped"
done
for r in sync-w2 async-ps1-w2 ceiling-w2/r2; do
  [[ -f $SCRATCH/resumed/$r/results.json ]] || fail "$r did not run"
done
cmp -s "$SCRATCH/resumed/sync-w1/results.json" <(tar -xzOf "$SCRATCH/cut.tgz" ./sync-w1/results.json) ||
  fail "the kept 1-worker run was replaced"
"$PY" "$SRC/data-tools/scaling_report.py" "$SCRATCH/resumed" --out "$SCRATCH/report" >"$SCRATCH/report.out" 2>&1 ||
  { cat "$SCRATCH/report.out"; fail "the report of the resumed sweep failed"; }
grep -q "^| 2 |" "$SCRATCH/report.md" || { cat "$SCRATCH/report.md"; fail "no 2-worker row"; }

echo "== 4. a ceiling folder missing one of its runs (one failed) is not done: its N runs run again"
rm "$SCRATCH/resumed/ceiling-w2/r1/results.json"
DTRAIN=$DTRAIN MPIRUN=$MPIEXEC sweep "$SCRATCH/resumed" "$SCRATCH/resumed.tgz" >"$SCRATCH/again.out" 2>&1 ||
  { cat "$SCRATCH/again.out"; fail "the sweep after a lost ceiling run failed"; }
! grep -q "^ceiling-w2: done before" "$SCRATCH/again.out" || { cat "$SCRATCH/again.out"; fail "a ceiling with 1 of 2 runs counted as done"; }
grep -q "^ceiling-w2: load" "$SCRATCH/again.out" || { cat "$SCRATCH/again.out"; fail "the ceiling did not run again"; }
[[ -f $SCRATCH/resumed/ceiling-w2/r1/results.json && -f $SCRATCH/resumed/ceiling-w2/r2/results.json ]] ||
  fail "the rerun ceiling lacks a run"
grep -q "^sync-w2: done before, skipped" "$SCRATCH/again.out" || fail "a finished run ran again"

echo "== 5. a rerun into that folder with another job, --steps or --global-batch is refused"
cp "$SCRATCH/job.ini" "$SCRATCH/other.ini"
echo "# another job" >>"$SCRATCH/other.ini"
sums=$(cat "$SCRATCH"/resumed/*/results.json | md5sum)
rc=0
DTRAIN=$DTRAIN MPIRUN=$MPIEXEC bash "$SRC/data-tools/run_strong_scaling.sh" --job "$SCRATCH/other.ini" \
  --workers "1 2" --global-batch 32 --steps 5 --out "$SCRATCH/resumed" --ceiling --no-report \
  -- --train-data "$SCRATCH/train.h5" --summaries false >"$SCRATCH/other.out" 2>&1 || rc=$?
[[ $rc == 2 ]] || { cat "$SCRATCH/other.out"; fail "a sweep of other parameters into a finished one: exit $rc, want 2"; }
for want in "$SCRATCH/resumed holds the runs of another sweep" "--job: $SCRATCH/job.ini (sha256" \
  "$SCRATCH/other.ini (sha256" "--global-batch: 16 there, 32 now" "--steps: 4 there, 5 now"; do
  grep -qF -- "$want" "$SCRATCH/other.out" || { cat "$SCRATCH/other.out"; fail "the refusal does not say '$want'"; }
done
! grep -q "done before, skipped" "$SCRATCH/other.out" || { cat "$SCRATCH/other.out"; fail "runs of another sweep were reused"; }
[[ $(cat "$SCRATCH"/resumed/*/results.json | md5sum) == "$sums" ]] || fail "the refused sweep changed the runs"
# Only the dtrain options after -- differing: refused too, naming them.
rc=0
DTRAIN=$DTRAIN MPIRUN=$MPIEXEC sweep "$SCRATCH/resumed" "$SCRATCH/resumed.tgz" --log-every 1 \
  >"$SCRATCH/other.out" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -qF "dtrain options after --:" "$SCRATCH/other.out" ||
  { cat "$SCRATCH/other.out"; fail "other dtrain options into a finished sweep: exit $rc, want 2 naming them"; }
# The record travels in --keep-runs' archive, so an unpacked sweep is checked too.
members "$SCRATCH/resumed.tgz" | grep -qx sweep.conf || fail "sweep.conf is not kept in the archive"
echo "test_scaling_resume: OK"
