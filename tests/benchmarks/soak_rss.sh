#!/usr/bin/env bash
# tests/benchmarks/soak_rss.sh [STEPS] — memory soak: async training with 4 ranks (1 ps + 3 workers)
# of a small CNN on synthetic data for STEPS global steps (default 4000), sampling every rank's
# resident set (VmRSS in /proc/PID/status) every 0.5 s. Prints, per rank and role, the RSS after
# warm-up (the first sample past 25 % of the run), at the end (the last sample) and the growth; and
# writes the samples (soak_rss.csv) and the summary (soak_rss.json) beside the run. A benchmark that
# prints figures, not a timed test: read the growth column (a leak grows with the step count).
# Uses ${BUILD_DIR:-build} (build it first: bash .ci/build.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-4000}
build=${BUILD_DIR:-build}
out=${SOAK_DIR:-$build/soak}
rm -rf "$out"
mkdir -p "$out"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
"$build/bin/make_dataset" "$out/train.h5" --n 2048 --c 1 --h 16 --w 16 --classes 10 --seed 1 >/dev/null
"$build/bin/make_dataset" "$out/test.h5" --n 512 --c 1 --h 16 --w 16 --classes 10 --seed 2 >/dev/null
# The tests' tiny CNN (tests/common/tiny_cnn.ini) with Adam, long enough for STEPS, checkpoints.
mpirun -n 4 "$build/bin/dtrain" --config tests/common/tiny_cnn.ini --epochs 100000 --batch-size 32 \
  --log-every 200 --optimizer adam --lr 0.001 --checkpoint-every 500 --keep-checkpoints 2 \
  --timeout 300 --train-data "$out/train.h5" --test-data "$out/test.h5" --num-ps 1 \
  --max-steps "$STEPS" --run-dir "$out/run" >"$out/train.log" 2>&1 &
job=$!
echo "t_s,rank,rss_kib" >"$out/soak_rss.csv"
t0=$(date +%s.%N)
while kill -0 "$job" 2>/dev/null; do
  t=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN{printf "%.1f", a-b}')
  for p in $(pgrep -P "$job" 2>/dev/null); do
    r=$({ tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    kib=$({ awk '/^VmRSS:/{print $2}' "/proc/$p/status"; } 2>/dev/null)
    [[ -n $r && -n $kib ]] && echo "$t,$r,$kib" >>"$out/soak_rss.csv"
  done
  sleep 0.5
done
wait "$job" || { tail -20 "$out/train.log"; echo "soak: training failed" >&2; exit 1; }
/usr/bin/python3 - "$out" "$STEPS" <<'PY'
import csv, json, re, sys
out, steps = sys.argv[1], int(sys.argv[2])
rows = [(float(r["t_s"]), int(r["rank"]), int(r["rss_kib"])) for r in csv.DictReader(open(f"{out}/soak_rss.csv"))]
log = open(f"{out}/train.log").read()
roles = {int(m.group(1)): m.group(2) + " " + m.group(3) + (" (chief)" if m.group(4) else "")
         for m in re.finditer(r"^#\s+(\d+)\s+\d+\s+\S+\s+(worker|ps)\s+(\d+)\s+\S+(\s+\(chief\))?", log, re.M)}
wall = max(t for t, _, _ in rows)
summary = {"steps": steps, "wall_seconds": wall, "ranks": []}
print(f"# soak: async, 1 ps + 3 workers, {steps} global steps, {wall:.0f} s, {len(rows)} samples")
print(f"# {'rank':>4}  {'role':<16} {'warm-up RSS':>12} {'end RSS':>10} {'max RSS':>10} {'growth':>9} {'growth %':>8}")
for rank in sorted({r for _, r, _ in rows}):
    s = [(t, k) for t, r, k in rows if r == rank]
    warm = next((k for t, k in s if t >= 0.25 * wall), s[0][1])
    end, peak = s[-1][1], max(k for _, k in s)
    g = end - warm
    print(f"  {rank:>4}  {roles.get(rank, '?'):<16} {warm/1024:>9.1f} MiB {end/1024:>6.1f} MiB {peak/1024:>6.1f} MiB "
          f"{g/1024:>+6.2f} MiB {100*g/warm:>+7.2f}%")
    summary["ranks"].append({"rank": rank, "role": roles.get(rank, "?"), "warmup_rss_kib": warm,
                             "end_rss_kib": end, "max_rss_kib": peak, "growth_kib": g})
json.dump(summary, open(f"{out}/soak_rss.json", "w"), indent=1)
print(f"# samples: {out}/soak_rss.csv, summary: {out}/soak_rss.json")
PY
