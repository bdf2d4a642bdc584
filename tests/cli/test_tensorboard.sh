#!/usr/bin/env bash
# tests/cli/test_tensorboard.sh — TensorBoard event files, read back with TensorBoard's own reader
# (EventAccumulator; installed from PyPI into a test-only venv, skipped when that is impossible).
#   sync, 2 workers, --eval-every: stops at --max-steps 17, resumes to 40; summaries of every log row
#   async, 1 ps + 2 workers, --summary-every 10: stops at 17, resumes to 40
# Checks: one new event file per process (the first file unchanged by the resume); each starts
# with file_version brain.Event:2 and every record's masked CRC-32C verifies; every scalar TensorBoard
# sees equals its metrics.csv value (to the CSV's printed precision plus float32 rounding) at the
# row's global_step, and the steps are exactly the rows --summary-every selects (one curve across the
# resume); --summaries false writes no event file.
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/tb_python.sh"

make_data train 512 --seed 21 --template-seed 9
make_data test 128 --seed 22 --template-seed 9
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --test-data "$SCRATCH/test.h5"
        --epochs 3 --log-every 3)

# check DIR EVERY RESUME_STEP: the event files of DIR against DIR/metrics.csv.
check() {
  "$TB_PY" - "$@" <<'PY' || fail "TensorBoard check of $1"
import csv, glob, os, struct, sys
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
run, every, resume = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

files = sorted(glob.glob(f"{run}/events.out.tfevents.*"))
assert len(files) == 2, f"want 2 event files (first run + resume), got {files}"
for path in files:
    data = open(path, "rb").read()
    pos = n = 0
    while pos < len(data):  # TFRecord framing, checked independently of the reader
        (length,) = struct.unpack_from("<Q", data, pos)
        (hcrc,) = struct.unpack_from("<I", data, pos + 8)
        assert hcrc == masked_crc32c(data[pos:pos + 8]), f"{path}: record {n}: length crc"
        body = data[pos + 12:pos + 12 + length]
        (dcrc,) = struct.unpack_from("<I", data, pos + 12 + length)
        assert dcrc == masked_crc32c(body), f"{path}: record {n}: data crc"
        pos += 16 + length
        n += 1
    assert pos == len(data), f"{path}: trailing bytes"
    events = list(event_file_loader.EventFileLoader(path).Load())
    assert len(events) == n, (path, len(events), n)
    assert events[0].file_version == "brain.Event:2", events[0]
    assert events[1].session_log.status == 1, f"{path}: second event is not SessionLog START"
    print(f"{os.path.basename(path)}: {n} records, CRCs ok, START at step {events[1].step}")

acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0})
acc.Reload()
decimals = {"loss": 6, "accuracy": 6, "top5": 6, "lr": 6, "samples_per_sec": 1, "staleness": 3, "ms_per_step": 3,
            "exposed_comm_ms": 3,
            "wall_seconds": 3, "epoch": 0}
tags = {"train/loss": "loss", "train/accuracy": "accuracy", "train/top5": "top5",
        "train/learning_rate": "lr",
        "train/samples_per_sec": "samples_per_sec", "train/staleness": "staleness",
        "train/ms_per_step": "ms_per_step", "train/exposed_comm_ms": "exposed_comm_ms",
        "train/epoch": "epoch", "train/wall_seconds": "wall_seconds",
        "test/loss": "loss", "test/accuracy": "accuracy", "test/top5": "top5"}
assert sorted(acc.Tags()["scalars"]) == sorted(tags), acc.Tags()["scalars"]

# Which rows must be there: every test row; train rows as --summary-every selects them (the
# bucket of the resumed step counts as written, as the resumed writer starts there).
want = {"train": [], "test": []}
last = 0
reset = False
for r in csv.DictReader(open(f"{run}/metrics.csv")):
    step = int(r["global_step"])
    if r["kind"] == "train" and every > 0:
        if step > resume and not reset:
            last, reset = resume // every, True
        if step // every <= last:
            continue
        last = step // every
    want[r["kind"]].append(r)
# Sync logs every 3 steps of both processes; an async chief starved by a loaded machine may log
# few rows, but each process evaluates once at its end.
assert len(want["test"]) >= 2 and len(want["train"]) >= (8 if every == 0 else 1), want

checked = 0
for tag, col in tags.items():
    kind = tag.split("/")[0]
    got = [(e.step, e.value) for e in acc.Scalars(tag)]
    rows = want[kind]
    assert [s for s, _ in got] == [int(r["global_step"]) for r in rows], \
        f"{tag}: steps {[s for s, _ in got]} != metrics.csv {[int(r['global_step']) for r in rows]}"
    for (step, value), r in zip(got, rows):
        expect = float(r[col])
        tol = 0.5 * 10 ** -decimals[col] + abs(expect) * 2 ** -23 + 1e-12
        assert abs(value - expect) <= tol, f"{tag} at step {step}: TensorBoard {value}, metrics.csv {expect}"
        checked += 1
steps = [e.step for e in acc.Scalars("train/loss")]
assert steps == sorted(steps) and steps[-1] > resume, steps
assert every > 0 or steps[0] <= resume, f"no train summary of the first process: {steps}"
print(f"{run}: {checked} scalars equal metrics.csv; train steps {steps}")
PY
}

for mode in sync async; do
  d=$SCRATCH/$mode
  if [[ $mode == sync ]]; then
    args=(--mode sync --num-ps 0 --eval-every 10); np=2; every=0
  else
    args=(--mode async --num-ps 1 --summary-every 10); np=3; every=10
  fi
  echo "== $mode: stop at 17, resume to 40"
  run $np "$d" "${args[@]}" --max-steps 17
  first=$(ls "$d"/events.out.tfevents.*)
  [[ $(wc -l <<<"$first") -eq 1 ]] || fail "$d: want one event file after the first run: $first"
  sum_before=$(md5sum "$first")
  sleep 1.1  # a new second: the resumed file's name differs in its time (a clash gets ".1")
  run $np "$d" "${args[@]}" --max-steps 40 --resume
  [[ $(md5sum "$first") == "$sum_before" ]] || fail "$d: the resume changed the first event file"
  check "$d" $every 17
done

echo "== --summaries false writes no event file"
d=$SCRATCH/off
run 2 "$d" --mode sync --num-ps 0 --max-steps 6 --summaries false
! ls "$d"/events.out.tfevents.* 2>/dev/null || fail "--summaries false wrote an event file"
echo "PASS"
