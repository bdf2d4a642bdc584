#!/usr/bin/env bash
# tests/cli/test_bad_input.sh — bad input through the dtrain binary under `mpiexec -n 3` (and once
# without mpiexec): missing / non-HDF5 / malformed datasets, out-of-range and negative labels, an
# unknown layer type, no model (no job file, or one without layers), bad option values, an unknown
# job-file key, impossible ps counts, a batchnorm a micro-batch gives one value per channel, a run
# dir that is a regular file, a stray word or misspelt subcommand, a run dir holding a run's
# outputs without checkpoints, --resume of a finished run without checkpoints, and
# dtrain_comm_bench's options (its own "comm_bench: error:" line, exit 2). Each must exit
# non-zero within the deadline (never hang: every run is wrapped in `timeout 60`, and exit 124
# counts as a failure), print exactly ONE `dtrain: error:` message (the ranks agree, they do not
# all report), and name the file / option at fault.
set -euo pipefail
source "$(dirname "$0")/common.sh"

make_data good 64 --seed 1
for kind in not-hdf5 missing-images images-rank3 label-out-of-range label-negative; do
  make_data "$kind" 64 --seed 1 --corrupt "$kind"
done
write_job "$SCRATCH/job.ini"
printf '[train]\nepochs = 1\nlearning-speed = 3\n' >"$SCRATCH/unknown_key.ini"
echo "not a directory" >"$SCRATCH/run_dir_file"

JOB=(--config "$SCRATCH/job.ini" --run-dir "$SCRATCH/run")
GOOD=(--train-data "$SCRATCH/good.h5")

expect_error 3 "$SCRATCH/missing.h5" "${JOB[@]}" --train-data "$SCRATCH/missing.h5"
# Without mpiexec the world is one rank: sync mode, so the data error is the first one found.
expect_error 0 "$SCRATCH/missing.h5" "${JOB[@]}" --mode sync --num-ps 0 --train-data "$SCRATCH/missing.h5"
expect_error 0 "--num-ps" "${JOB[@]}" "${GOOD[@]}"
expect_error 3 "not-hdf5.h5" "${JOB[@]}" --train-data "$SCRATCH/not-hdf5.h5"
expect_error 3 "missing-images.h5|images" "${JOB[@]}" --train-data "$SCRATCH/missing-images.h5"
expect_error 3 "images-rank3.h5|images|rank" "${JOB[@]}" --train-data "$SCRATCH/images-rank3.h5"
expect_error 3 "label-out-of-range.h5|label" "${JOB[@]}" --train-data "$SCRATCH/label-out-of-range.h5"
expect_error 3 "label-negative.h5|label" "${JOB[@]}" --train-data "$SCRATCH/label-negative.h5"
expect_error 3 "label-negative.h5|label" "${JOB[@]}" "${GOOD[@]}" --test-data "$SCRATCH/label-negative.h5"
expect_error 3 "convolution" "${GOOD[@]}" --run-dir "$SCRATCH/run" --batch-size 8 --layer "convolution filters=4" --layer dense
expect_error 3 "epochs|abc" "${JOB[@]}" "${GOOD[@]}" --epochs abc
expect_error 0 "epochs|abc" "${JOB[@]}" "${GOOD[@]}" --epochs abc
expect_error 3 "batch-size" "${JOB[@]}" "${GOOD[@]}" --batch-size 0
expect_error 3 "mode|fast" "${JOB[@]}" "${GOOD[@]}" --mode fast
expect_error 3 "--cuda-graph|--device cuda" "${JOB[@]}" "${GOOD[@]}" --cuda-graph on
# A batchnorm that a training micro-batch gives one value per channel (N·H·W = 1: a batch of 1
# after a dense layer) has a batch variance of 0: it would output beta alone and pass no gradient.
BN1=(--layer "dense units=8" --layer "batchnorm name=bn1" --layer relu --layer dense)
expect_error 3 "bn1|one value per channel|--batch-size 1" "${GOOD[@]}" --run-dir "$SCRATCH/run" --batch-size 1 "${BN1[@]}"
expect_error 3 "bn1|one value per channel|--micro-batches 4" "${GOOD[@]}" --run-dir "$SCRATCH/run" --batch-size 4 --micro-batches 4 "${BN1[@]}"
# A shard's last batch of 1 sample (17 samples at batch 16) is no error, but a warning naming the
# layer and the worker; the run trains.
make_data bn17 17 --seed 1
timeout 60 "$DTRAIN" --train-data "$SCRATCH/bn17.h5" --run-dir "$SCRATCH/bn17" --batch-size 16 \
  --mode sync --num-ps 0 --max-steps 2 "${BN1[@]}" >"$SCRATCH/bn17.log" 2>&1 || { cat "$SCRATCH/bn17.log"; fail "the 17-sample run failed"; }
grep -q "warning: .*worker(s) 0 (1 sample) .*layer 'bn1' .*one value per channel" "$SCRATCH/bn17.log" ||
  { cat "$SCRATCH/bn17.log"; fail "no warning for a last batch of 1 sample into bn1"; }
expect_error 3 "unknown_key.ini|learning-speed" --config "$SCRATCH/unknown_key.ini" "${GOOD[@]}" --batch-size 8 --layer dense
expect_error 3 "--num-ps" "${JOB[@]}" "${GOOD[@]}" --num-ps 3
expect_error 3 "--num-ps" "${JOB[@]}" "${GOOD[@]}" --num-ps 5
expect_error 3 "--num-ps" "${JOB[@]}" "${GOOD[@]}" --mode async --num-ps 0
expect_error 3 "--max-staleness" "${JOB[@]}" "${GOOD[@]}" --mode sync --num-ps 1 --max-staleness 1
expect_error 3 "--replicas-to-aggregate" "${JOB[@]}" "${GOOD[@]}" --mode sync --num-ps 1 --replicas-to-aggregate 5
expect_error 3 "--delay-compensation" "${JOB[@]}" "${GOOD[@]}" --mode sync --num-ps 1 --delay-compensation 1
expect_error 3 "--delay-compensation" "${JOB[@]}" "${GOOD[@]}" --delay-compensation -0.5
expect_error 3 "--ps-chunk-kb" "${JOB[@]}" "${GOOD[@]}" --ps-chunk-kb 0
expect_error 3 "--checkpoint-secs|>= 0" "${JOB[@]}" "${GOOD[@]}" --checkpoint-secs -5
expect_error 3 "--run-dir|$SCRATCH/run_dir_file" --config "$SCRATCH/job.ini" "${GOOD[@]}" --run-dir "$SCRATCH/run_dir_file"
[[ -f $SCRATCH/run_dir_file && $(cat "$SCRATCH/run_dir_file") == "not a directory" ]] || fail "the run-dir file was touched"
[[ ! -e $SCRATCH/run ]] || fail "a failed start created a run dir: $(ls -R "$SCRATCH/run")"
# A misspelt subcommand or a stray word is an error, not a training run into the job's run dir.
expect_error 3 "unexpected argument 'predcit'" predcit "${JOB[@]}" "${GOOD[@]}"
expect_error 3 "option --checkpoint|dtrain predict" "${JOB[@]}" "${GOOD[@]}" --checkpoint x.h5
# No model: training or predict --init-from without the job file names --config (predict
# --checkpoint takes the checkpoint's); a job file without layers names itself.
expect_error 0 "no model|--config JOB" "${GOOD[@]}" --run-dir "$SCRATCH/run"
expect_error 0 "no model|--config JOB" predict --init-from x.safetensors --data "$SCRATCH/good.h5" --out "$SCRATCH/p.h5"
printf '[train]\nepochs = 1\n' >"$SCRATCH/no_layers.ini"
expect_error 3 "no_layers.ini|layer =" --config "$SCRATCH/no_layers.ini" "${GOOD[@]}" --run-dir "$SCRATCH/run"
[[ ! -e $SCRATCH/run ]] || fail "a refused command line created a run dir"
# A run dir holding a run's outputs but no checkpoint (a run that crashed before its first one,
# or files of the user's own) is refused, and not a byte of them changes.
mkdir -p "$SCRATCH/held"
echo "the user's own config" >"$SCRATCH/held/config.ini"
echo "a,b" >"$SCRATCH/held/metrics.csv"
expect_error 3 "already holds a run|config.ini, metrics.csv" "${GOOD[@]}" --config "$SCRATCH/job.ini" --run-dir "$SCRATCH/held"
[[ $(cat "$SCRATCH/held/config.ini") == "the user's own config" && $(cat "$SCRATCH/held/metrics.csv") == "a,b" ]] ||
  fail "a refused run changed the files in its run dir"
# --resume of a finished run without checkpoints: nothing to continue, its results are kept.
mkdir -p "$SCRATCH/finished"
echo '{"test_accuracy": 0.5}' >"$SCRATCH/finished/results.json"
expect_error 3 "--resume|holds a finished run|results.json" "${GOOD[@]}" --config "$SCRATCH/job.ini" --run-dir "$SCRATCH/finished" --resume
[[ $(cat "$SCRATCH/finished/results.json") == '{"test_accuracy": 0.5}' && $(ls "$SCRATCH/finished") == results.json ]] ||
  fail "--resume of a finished run changed its run dir: $(ls "$SCRATCH/finished")"

# --dry-run refuses a device a real run could not get, and shows the one it would use: without a
# usable GPU --device cuda is an error naming the option and the host; with one GPU, two workers
# need --allow-gpu-sharing, and one worker shows cuda:0 in the role table.
auto=$(timeout 60 "$MPIEXEC" -n 1 "$DTRAIN" "${JOB[@]}" "${GOOD[@]}" --mode sync --num-ps 0 --device auto --dry-run 2>&1) ||
  fail "--device auto --dry-run failed: $auto"
if grep -q "cuda:0  (chief)" <<<"$auto"; then
  expect_error 2 "--allow-gpu-sharing" "${JOB[@]}" "${GOOD[@]}" --mode sync --num-ps 0 --device cuda --dry-run
else
  grep -q "worker      0  cpu  (chief)" <<<"$auto" || fail "--device auto --dry-run shows no device: $auto"
  expect_error 2 "option --device cuda|no CUDA device on host" "${JOB[@]}" "${GOOD[@]}" --device cuda --dry-run
fi
[[ ! -e $SCRATCH/run ]] || fail "--dry-run created the run dir"

# dtrain_comm_bench (tests/benchmarks/comm_bench.cpp) refuses what it cannot measure as asked: one
# error naming the option, exit 2 on every rank, never a hang (--min-bytes 0 looped forever, a
# size of 6 bytes summed 4 and reported 6, --bucket-mb -1 ran, an unknown op ran nothing, exit 0).
bench_error() {  # bench_error "WORD1|WORD2..." ARGS...: under mpiexec -n 2, one error, exit 2
  local words=$1 log=$SCRATCH/bench$cases.log rc w
  shift
  cases=$((cases + 1))
  set +e
  (cd "$SCRATCH" && timeout 60 "$MPIEXEC" -n 2 "$BIN/dtrain_comm_bench" --iters 1 --out bench.jsonl "$@") >"$log" 2>&1
  rc=$?
  set -e
  echo "-- exit $rc: dtrain_comm_bench $*"
  [[ $rc -ne 124 ]] || { cat "$log"; fail "dtrain_comm_bench hung (timeout): $*"; }
  [[ $rc -eq 2 ]] || { cat "$log"; fail "dtrain_comm_bench $*: exit $rc, want 2"; }
  [[ $(grep -c "comm_bench: error:" "$log") -eq 1 ]] || { cat "$log"; fail "want one error for: $*"; }
  local IFS='|'
  for w in $words; do
    grep -qF -- "$w" "$log" || { cat "$log"; fail "the message does not mention '$w': $(cat "$log")"; }
  done
}
bench_error "option --min-bytes|multiple of 4|got 0" --min-bytes 0 --max-bytes 1024 --ops allreduce
bench_error "option --min-bytes|multiple of 4|got 6" --min-bytes 6 --max-bytes 6 --ops allreduce
bench_error "option --min-bytes|whole number|'-4'" --min-bytes -4 --ops allreduce
bench_error "option --max-bytes|at least --min-bytes (4096)" --min-bytes 4096 --max-bytes 1024 --ops allreduce
bench_error "option --bucket-mb|0 to 2047|got -1" --bucket-mb -1 --ops allreduce
bench_error "option --bucket-mb|less than one float" --bucket-mb 0.000001 --ops allreduce
bench_error "option --ops|unknown op 'allreduc'|allreduce, hier_allreduce, wire_allreduce" --ops allreduc
# A good run: whole floats from 4 bytes, ×4 up to --max-bytes, each row the bytes it summed; the
# header says the bucket size as given (it printed "0 MiB" for 0.00001), and 0 as one bucket.
(cd "$SCRATCH" && timeout 60 "$MPIEXEC" -n 2 "$BIN/dtrain_comm_bench" --iters 1 --ops allreduce \
  --min-bytes 4 --max-bytes 100 --bucket-mb 0.00001 --out bench.jsonl) >"$SCRATCH/bench_ok.log" 2>&1 ||
  { cat "$SCRATCH/bench_ok.log"; fail "dtrain_comm_bench from 4 bytes failed"; }
grep -q "dtrain buckets 1e-05 MiB (2 floats)" "$SCRATCH/bench_ok.log" ||
  { cat "$SCRATCH/bench_ok.log"; fail "the header does not give the 1e-05 MiB buckets"; }
[[ $(grep -o '"bytes": [0-9]*' "$SCRATCH/bench.jsonl" | tr -dc '0-9\n' | paste -sd' ') == "4 16 64" ]] ||
  { cat "$SCRATCH/bench.jsonl"; fail "the sizes are not 4 16 64 bytes"; }
(cd "$SCRATCH" && timeout 60 "$MPIEXEC" -n 2 "$BIN/dtrain_comm_bench" --iters 1 --ops allreduce \
  --min-bytes 64 --max-bytes 64 --bucket-mb 0 --out bench.jsonl) >"$SCRATCH/bench_one.log" 2>&1 ||
  { cat "$SCRATCH/bench_one.log"; fail "dtrain_comm_bench --bucket-mb 0 failed"; }
grep -q "dtrain buckets one bucket (--bucket-mb 0)" "$SCRATCH/bench_one.log" ||
  { cat "$SCRATCH/bench_one.log"; fail "the header does not say one bucket for --bucket-mb 0"; }
echo "PASS ($cases cases)"
