#!/usr/bin/env bash
# Benchmark: dtrain's communication paths against bare MPI (tests/benchmarks/comm_bench.cpp), in
# the same run and process set, nccl-tests style: for 64 KiB .. 256 MiB
#   allreduce     bare MPI_Allreduce vs dtrain's sync exchange (bucketed,
#                 collectives/bucketed.hpp), busbw
#   hier_allreduce  bare MPI_Allreduce vs the same with --allreduce hierarchical (shared memory in
#                 the node, MPI between leaders; RANKS_PER_NODE=K fakes nodes of K ranks), busbw,
#                 summed in place as training sums; the same through the node's slots (copied in
#                 and out) alternated in the same rounds (below each row, JSON ratio_vs_slots_hier)
#   wire_allreduce  bare MPI_Allreduce vs the same with WIRE_DTYPE (default bf16) on the wire
#   hier_wire_allreduce  bare MPI_Allreduce vs --allreduce hierarchical with WIRE_DTYPE in the
#                 node's shared slots and between leaders; the fp32 hierarchical sum alternated
#                 in the same rounds (printed below each row, JSON ratio_vs_fp32_hier)
#   ps_push_pull  bare MPI point-to-point vs dtrain's ps push-pull (1 ps, RANKS-1 workers), bytes
#                 moved per second
#   nccl_allreduce  with a GPU per rank (skipped otherwise, with the reason): bare ncclAllReduce vs
#                 dtrain's bucketed NCCL path (GradientAllreduce::start_sum), busbw
# Usage: tests/benchmarks/comm_bench.sh [RANKS] (default 2). Prints the table and writes
# docs/results/communication/<today>/comm_bench_<RANKS>ranks.jsonl (one JSON object per line).
# Env: PIN (one core per world rank, e.g. PIN="0 1 0": ranks 0 and 2 — worker 0 and the ps — share
# core 0; each rank runs under taskset; default: unpinned, --bind-to none, where the kernel places
# and moves the ranks),
# MAX_BYTES, BUCKET_MB, PS_SHM (0: dtrain's push-pull without its shared rings, --ps-shm false),
# COMM_BENCH (the benchmark binary, default build/bin/dtrain_comm_bench:
# another build's, to compare two versions alternately),
# OUT_DIR, OPS (comma-separated ops, default all six), WIRE_DTYPE, RANKS_PER_NODE, REPEATS (default 1: runs the whole
# benchmark that many times, each run's table printed and its lines kept in <out>.runs, and
# writes per op and size the median over the runs of each figure — for a VM whose speed drifts
# between runs). Before and after each run it measures this machine's cross-core write penalty
# (dtrain_ps_update_bench --cross-core: the ps's SGD update of 128 KiB right after another core
# read it, over the same update with the lines in its own cache) and writes it to
# <out>.cross_core: on a VM it moves with where the host puts the vCPUs, and the push-pull rows
# with it. Needs a built dtrain (.ci/build.sh builds build/bin/dtrain_comm_bench and
# dtrain_ps_update_bench).
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=${1:-2}
bin=${COMM_BENCH:-build/bin/dtrain_comm_bench}
[ -x "$bin" ] || { echo "comm_bench: build first (.ci/build.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
out_dir=${OUT_DIR:-docs/results/communication/$(date +%F)}
mkdir -p "$out_dir"
out=$out_dir/comm_bench_${ranks}ranks.jsonl
repeats=${REPEATS:-1}
: >"$out.runs"
args=(--max-bytes "${MAX_BYTES:-268435456}" --bucket-mb "${BUCKET_MB:-25}" --ps-shm "${PS_SHM:-1}"
  --ops "${OPS:-allreduce,hier_allreduce,wire_allreduce,hier_wire_allreduce,ps_push_pull,nccl_allreduce}"
  --wire-dtype "${WIRE_DTYPE:-bf16}" --ranks-per-node "${RANKS_PER_NODE:-0}" --out "$out")
launch=(-np "$ranks" "$bin" "${args[@]}")
if [ -n "${PIN:-}" ]; then  # MPMD: one app context per rank, each under taskset on its core
  read -ra cores <<<"$PIN"
  [ "${#cores[@]}" = "$ranks" ] || { echo "comm_bench: PIN names ${#cores[@]} cores for $ranks ranks" >&2; exit 1; }
  launch=()
  for c in "${cores[@]}"; do launch+=(${launch[0]:+:} -np 1 taskset -c "$c" "$bin" "${args[@]}"); done
fi
# One line: "<when> run <i>: update x<penalty> memcpy x<penalty>" (the ratios of the 32768-float
# rows), or nothing where the benchmark skips (one CPU).
cross_core() {
  local upd=build/bin/dtrain_ps_update_bench
  [ -x "$upd" ] || return 0
  "$upd" --cross-core --rules sgd --min-floats 32768 --max-floats 32768 --rounds 100 |
    awk -v w="$1" '$1 == "memcpy" && NF == 7 {m = $NF} $1 == "sgd" && NF == 7 {u = $NF}
                   END {if (u != "") printf "%s: cross-core write penalty, 128 KiB: update x%s, memcpy x%s\n", w, u, m}'
}
: >"$out.cross_core"
for ((i = 1; i <= repeats; i++)); do
  cross_core "before run $i" | tee -a "$out.cross_core"
  mpirun --bind-to none --oversubscribe "${launch[@]}"
  cat "$out" >>"$out.runs"
  cross_core "after run $i" | tee -a "$out.cross_core"
done
if ((repeats > 1)); then
  "${PYTHON:-python3}" - "$out.runs" "$out" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault((r["op"], r["bytes"]), []).append(r)
with open(sys.argv[2], "w") as f:
    if rows:
        print(f"# median of {len(next(iter(rows.values())))} runs: dtrain/bare ratio per size")
    for (op, size), runs in rows.items():
        m = {k: (statistics.median(r[k] for r in runs) if isinstance(v, float) else v)
             for k, v in runs[0].items()}
        f.write(json.dumps(m) + "\n")
        print(f"{op:>14s} {size:>10d}  ratio {m['ratio']:.3f}  (runs: "
              + ", ".join(f"{r['ratio']:.2f}" for r in runs) + ")")
        for key, what in (("fp32_hier", "fp32 hierarchical"), ("slots_hier", "through slots")):
            if f"ratio_vs_{key}" in m:
                print(f"{'':>14s} {'':>10s}  vs {what} {m[f'ratio_vs_{key}']:.3f}  (runs: "
                      + ", ".join(f"{r[f'ratio_vs_{key}']:.2f}" for r in runs) + ")")
PY
else
  rm -f "$out.runs"
fi
echo "# wrote $out"
