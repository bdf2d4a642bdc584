#!/usr/bin/env bash
# Benchmark: the parameter-server family on real Fashion-MNIST with jobs/fashion_mnist_cnn.ini
# (README "Training modes" and "Results"). Each part prints one line per run:
#   NAME | ranks | options | test accuracy after each epoch | samples/s | global steps/s | extra
# Parts (arguments; default: all of them, about 2 hours on 2 cores):
#   ablation   async 1 ps + 3 workers, epoch-1 test accuracy of one recipe change at a time
#              (the run is stopped after its first evaluation), seeds $SEEDS
#   async      async 1 ps + 3 workers, all epochs, seeds $SEEDS; and 1 ps + 7 workers (seed 1)
#   sync       sync allreduce (3 workers) and sync through 1 ps with R = 3 (seed 1)
#   straggler  worker 2 slowed 4x (DTRAIN_FAULT slow*4:2): sync allreduce, sync through the ps with
#              one backup worker (R = 2 of 3), each against the same run unslowed ($STRAGGLER_STEPS
#              global steps)
#   ps         async with 2 and 4 ps ranks (3 workers), all epochs
#   throughput async 1 ps + 3 workers, 900 pushes without evaluation, --async-momentum dana
#              (default) and lr-scaled, alternating twice; and a sync allreduce control (200 steps)
#              to compare machine speed between days. With DTRAIN=another/build/bin/dtrain it
#              times another build (how the chunked ps protocol was compared with 766c995).
# Env: SEEDS (default "1 2 3"), STRAGGLER_STEPS (default 300), OUT (run dirs, default
#      /tmp/dtrain-ps-modes), DTRAIN (default build/bin/dtrain). Needs a built dtrain and the
#      converted data (jobs/run_fashion_mnist.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
dtrain=${DTRAIN:-build/bin/dtrain}
[ -x "$dtrain" ] || { echo "ps_modes: build dtrain first (.ci/build.sh)" >&2; exit 1; }
[ -f data/fashion_mnist/train.h5 ] || { echo "ps_modes: convert the data first (jobs/run_fashion_mnist.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1 DTRAIN_FAULT=
seeds=${SEEDS:-1 2 3}
out=${OUT:-/tmp/dtrain-ps-modes}
mkdir -p "$out"
job=jobs/fashion_mnist_cnn.ini

# run NAME NP EPOCHS_TO_WAIT ARGS...: trains $job; EPOCHS_TO_WAIT > 0 stops the job after that
# many epoch evaluations (the schedule is the full job's), 0 lets it finish. Prints the line.
run() {
  local name=$1 np=$2 want=$3
  shift 3
  local dir=$out/$name log=$out/$name.log
  rm -rf "$dir"
  mpirun --bind-to none --oversubscribe -np "$np" -x DTRAIN_FAULT "$dtrain" --config "$job" \
    --run-dir "$dir" "$@" >"$log" 2>&1 &
  local pid=$!
  if [ "$want" -gt 0 ]; then
    while kill -0 "$pid" 2>/dev/null; do
      if [ "$(grep -c 'done | global_step' "$log" || true)" -ge "$want" ]; then
        kill "$pid" 2>/dev/null || true
        break
      fi
      sleep 1
    done
  fi
  wait "$pid" 2>/dev/null || [ "$want" -gt 0 ] || { cat "$log"; exit 1; }
  /usr/bin/python3 - "$name" "$np" "$log" "$dir" "$*" <<'PY'
import json, os, re, sys
name, np, log, run, opts = sys.argv[1:]
text = open(log).read()
acc = re.findall(r"done \| global_step \d+ \| test loss [\d.]+ \| test accuracy ([\d.]+)", text)
r = json.load(open(f"{run}/results.json")) if os.path.exists(f"{run}/results.json") else {}
sps = f"{r['samples_per_sec']:.0f}" if r else "-"
steps = f"{r['global_step'] / r['train_seconds']:.1f}" if r else "-"
extra = ""
if r.get("num_ps"):
    extra = f"staleness mean {r['staleness_mean']:.2f} max {r['staleness_max']}"
    if r.get("dropped_gradients"):
        extra += f", dropped per worker {r['dropped_per_worker']}"
print(f"{name} | {np} | {opts} | {' '.join(acc)} | {sps} | {steps} | {extra}", flush=True)
PY
}

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(ablation async sync straggler ps)
for part in "${parts[@]}"; do
  case $part in
    ablation)
      for s in $seeds; do
        run "downpour-s$s" 4 1 --seed "$s" --async-momentum as-given --async-schedule pushes
        run "default-s$s" 4 1 --seed "$s"
      done
      dp="--async-momentum as-given --async-schedule pushes"  # Downpour as first built
      for v in "half-lr $dp --lr 0.01" "stale-lr $dp --stale-lr inverse" \
               "warmup-x3 --async-momentum as-given" "momentum-05 $dp --momentum 0.5" \
               "compensated-pushes --async-momentum compensated --async-schedule pushes" \
               "compensated --async-momentum compensated" "lr-scaled --async-momentum lr-scaled" \
               "dc-asgd --async-momentum as-given --delay-compensation 2" "one-worker"; do
        set -- $v
        name=$1
        shift
        np=4
        [ "$name" = one-worker ] && np=2
        run "$name-s1" "$np" 1 --seed 1 "$@"
      done
      ;;
    async)
      for s in $seeds; do run "async-3w-s$s" 4 0 --seed "$s"; done
      run async-7w-s1 8 0 --seed 1
      ;;
    sync)
      run allreduce-3w 3 0 --mode sync --num-ps 0
      run sync-ps-3w 4 0 --mode sync --num-ps 1
      ;;
    straggler)
      n=${STRAGGLER_STEPS:-300}
      for slow in "" "slow*4:2"; do
        tag=${slow:+-slow4}
        export DTRAIN_FAULT=$slow
        run "allreduce$tag" 3 0 --mode sync --num-ps 0 --max-steps "$n" --test-data ""
        run "sync-ps-backup$tag" 4 0 --mode sync --num-ps 1 --replicas-to-aggregate 2 --max-steps "$n" --test-data ""
        export DTRAIN_FAULT=
      done
      ;;
    ps)
      run async-2ps-3w 5 0 --num-ps 2
      run async-4ps-3w 7 0 --num-ps 4
      ;;
    throughput)
      run tp-allreduce 3 0 --seed 1 --test-data "" --mode sync --num-ps 0 --max-steps 200
      for i in 1 2; do
        run "tp-lr-scaled-$i" 4 0 --seed 1 --test-data "" --async-momentum lr-scaled --max-steps 900
        run "tp-dana-$i" 4 0 --seed 1 --test-data "" --max-steps 900
      done
      ;;
    *) echo "ps_modes: unknown part '$part' (ablation async sync straggler ps throughput)" >&2; exit 2 ;;
  esac
done
