#!/usr/bin/env bash
# tests/cli/test_plan.sh — `dtrain plan` (plan/plan_command.hpp) end to end on the Fashion-MNIST
# CNN job with synthetic 1×28×28 data: the profiling run, the table and the recommendation, the
# JSON plan, a saved profile read back; the profile against a real one-worker run (its median
# step + update against results.json's step_ms_p50, within a factor 2: both are timed on a machine
# other work shares, where one job's compute per step moved 1.85× between two runs a minute apart,
# docs/scaling/README.md); the latency-aware bucket rows, and ResNet-50 on 512 GPUs (fewer, larger
# buckets than the 25 MiB plan); data-tools/plan_vs_measured.py pricing each sync run by the
# allreduce it recorded, at --bucket-mb or the job file's, and reading scaling_report.py's CSV
# with empty cells (a figure the runs lack, shown "-"); bad options, each named in one error,
# nothing written.
set -euo pipefail
source "$(dirname "$0")/common.sh"
JOB=$SRC/jobs/fashion_mnist_cnn.ini
DATA=(--synthetic 1x28x28:10 --threads 1)

echo "== 1. profile, plan, table, recommendation, JSON"
"$DTRAIN" plan --config "$JOB" "${DATA[@]}" --nodes 2 --workers-per-node 2 --network 25gbe \
  --batch-size 64 --plan-steps 10 --save-profile "$SCRATCH/p.json" --out "$SCRATCH/plan.json" \
  >"$SCRATCH/plan.out" 2>&1 || { cat "$SCRATCH/plan.out"; fail "dtrain plan failed"; }
cat "$SCRATCH/plan.out"
for want in "on 2 node(s) × 2 worker(s) = 4 workers, 64 samples per worker" \
  "| configuration | bucket MiB | buckets | compute ms |" "| sync, flat allreduce | 25 |" \
  "| sync, hierarchical | 25 |" "| async, 4 ps |" "recommended: --mode " "between nodes 25gbe" \
  "assumptions"; do
  grep -qF -- "$want" "$SCRATCH/plan.out" || fail "no '$want' in the plan"
done
"$PY" - "$SCRATCH/plan.json" "$SCRATCH/p.json" <<'PY'
import json, sys
plan, prof = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
rows = plan["predictions"]
# sync: buckets {0, 1, 4, 16, 25, 64, 256} × flat, hierarchical, and latency-aware rows where
# those differ, flat only (4 workers on 25 GbE: at least 4 × 25 µs × 3.125 GB/s = 312,500 bytes, 78,125
# floats a bucket, above the end buckets below 8 MiB: 1 and 4 MiB); async: 1, 2, 4 ps
aware = sorted((r["configuration"], r["bucket_mb"]) for r in rows if r["latency_aware"])
assert aware == [("sync, flat allreduce, latency-aware", 1),
                 ("sync, flat allreduce, latency-aware", 4)], aware
assert len(rows) == 17 + 2, len(rows)
for r in rows:
    if r["latency_aware"]:
        assert r["options"].endswith(f"--bucket-mb {r['bucket_mb']:.0f} --bucket-link 25gbe"), r
        assert r["last_bucket_mib"] * 2**20 / 4 >= 78125 or r["buckets"] == 1, r
assert plan["workers"] == 4 and plan["batch_per_worker"] == 64 and plan["network"] == "25gbe"
params = sum(l["param_floats"] for l in prof["layers"])
assert params == 421834, params  # the job's parameters (docs/results/scaling)
assert plan["gradient_bytes"] == 4 * params
assert prof["batch"] == 64 and prof["steps"] == 10 and prof["optimizer_ms"] > 0
compute = sum(l["forward_ms"] + l["backward_ms"] for l in prof["layers"])
for r in rows:
    assert abs(r["compute_ms"] - compute) < 1e-6 * compute, (r, compute)
    assert r["step_ms"] >= r["compute_ms"] and 0 < r["efficiency"] <= 1 + 1e-9, r
    assert abs(r["samples_per_s"] - 4 * 64 / (r["step_ms"] / 1000)) < 1e-6 * r["samples_per_s"], r
print(f"{len(rows)} predictions; profile {compute:.1f} ms forward + backward at batch 64")
PY

echo "== 1b. a 512-rank ring: latency-aware buckets, fewer and larger"
# ResNet-50's 25,557,032 parameters, 512 H200s on HDR InfiniBand: at least 512 × 2 µs × 25 GB/s
# = 25.6 MB a bucket, 6,400,000 floats (collectives/bucketed.hpp): three buckets, the last of
# 24.41 MiB, against nine at 25 MiB whose ends hold 1 MiB.
R50=(plan --config "$SRC/jobs/resnet50_imagenet.ini" --profile
  "$SRC/docs/scaling/resnet50_h200_gpu_bf16_6052_b128.json" --nodes 64 --workers-per-node 8
  --network hdr-ib --intra-node nvlink --batch-size 128 --mode sync)
"$DTRAIN" "${R50[@]}" --out "$SCRATCH/r50.json" >"$SCRATCH/r50.out" 2>&1 ||
  { cat "$SCRATCH/r50.out"; fail "dtrain plan of 512 GPUs failed"; }
grep -E '^\| sync, flat allreduce(, latency-aware)? \| 25 \|' "$SCRATCH/r50.out"
grep -qF "| sync, flat allreduce | 25 | 9, last 1.00 MiB |" "$SCRATCH/r50.out" ||
  fail "the 25 MiB plan is not nine buckets ending in 1 MiB"
grep -qF "| sync, flat allreduce, latency-aware | 25 | 3, last 24.41 MiB |" "$SCRATCH/r50.out" ||
  fail "no latency-aware 25 MiB row of three buckets ending in 24.41 MiB"
grep -qE "^best sync: +--mode sync --num-ps 0 --allreduce nccl --bucket-mb 25 --bucket-link hdr-ib " \
  "$SCRATCH/r50.out" || fail "the best sync is not the latency-aware 25 MiB plan"
"$PY" - "$SCRATCH/r50.json" "$SCRATCH/r50.out" <<'PY'
import json, re, sys
plan = json.load(open(sys.argv[1]))
rows = {(r["configuration"], r["bucket_mb"]): r for r in plan["predictions"]}
# The JSON's recommendations are the printed ones, pointing at their rows.
printed = dict(re.findall(r"^(recommended|best sync|best async): +(.*?)  \(", open(sys.argv[2]).read(), re.M))
assert plan["best_async"] is None and "best async" not in printed, plan["best_async"]
for key, label in (("recommended", "recommended"), ("best_sync", "best sync")):
    pick = plan[key]
    assert pick["options"] == printed[label], (key, pick, printed)
    assert plan["predictions"][pick["prediction"]]["options"] == pick["options"], (key, pick)
print(f"recommended in the JSON as printed: {plan['recommended']['options']}")
fixed, aware = rows[("sync, flat allreduce", 25)], rows[("sync, flat allreduce, latency-aware", 25)]
assert fixed["buckets"] == 9 and aware["buckets"] == 3, (fixed, aware)
# Fewer buckets pay less latency after backward: less exposed, higher efficiency.
assert aware["exposed_comm_ms"] < fixed["exposed_comm_ms"], (fixed, aware)
assert aware["efficiency"] > fixed["efficiency"] + 0.1, (fixed, aware)
print(f"512 GPUs, 25 MiB: efficiency {fixed['efficiency']:.3f} (9 buckets) -> "
      f"{aware['efficiency']:.3f} latency-aware (3)")
PY

echo "== 2. the profile against a real one-worker run"
# Profiled right before the run, both as medians over 100 steps (2-4 s), so that both see the same
# other work on the machine.
"$DTRAIN" plan --config "$JOB" "${DATA[@]}" --batch-size 64 --plan-steps 100 --mode sync \
  --save-profile "$SCRATCH/profile100.json" >"$SCRATCH/plan100.out" 2>&1 ||
  { cat "$SCRATCH/plan100.out"; fail "dtrain plan --plan-steps 100 failed"; }
timeout 300 "$MPIEXEC" -n 1 "$DTRAIN" --config "$JOB" "${DATA[@]}" --mode sync --num-ps 0 \
  --batch-size 64 --max-steps 100 --epochs 100 --run-dir "$SCRATCH/run1" --summaries false \
  >"$SCRATCH/run1.log" 2>&1 || { cat "$SCRATCH/run1.log"; fail "the one-worker run failed"; }
"$PY" - "$SCRATCH/profile100.json" "$SCRATCH/run1/results.json" <<'PY'
import json, sys
prof, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
layers = sum(l["forward_ms"] + l["backward_ms"] for l in prof["layers"])
assert abs(layers - prof["step_ms"]) < 1e-6 * prof["step_ms"], (layers, prof["step_ms"])
profiled = prof["step_ms"] + prof["optimizer_ms"]  # forward + backward + update, median
measured = run["step_ms_p50"]  # one worker: its whole step, median
ratio = profiled / measured
print(f"profiled step + optimizer {profiled:.2f} ms, measured median step {measured:.2f} ms "
      f"(ratio {ratio:.2f}); measured mean compute {run['step_compute_ms']:.2f} ms/step")
assert 1 / 2 <= ratio <= 2, f"profile off by {ratio:.2f}x"
PY

echo "== 3. a saved profile, one mode"
"$DTRAIN" plan --config "$JOB" "${DATA[@]}" --profile "$SCRATCH/p.json" --nodes 1 \
  --workers-per-node 4 --global-batch-size 256 --mode async --num-ps 2 >"$SCRATCH/plan2.out" 2>&1 ||
  { cat "$SCRATCH/plan2.out"; fail "dtrain plan --profile failed"; }
grep -qF "profile: from $SCRATCH/p.json" "$SCRATCH/plan2.out" || fail "the saved profile was not used"
[[ $(grep -c '^| async, 2 ps |' "$SCRATCH/plan2.out") -eq 1 ]] || fail "not exactly the async 2-ps row"
! grep -q '^| sync' "$SCRATCH/plan2.out" || fail "sync rows despite --mode async"
grep -qF "recommended: --mode async --num-ps 2" "$SCRATCH/plan2.out" || fail "no recommendation"

echo "== 3b. a node's cores: 4 workers on 2 cores are paced by its CPU work"
"$DTRAIN" plan --config "$JOB" "${DATA[@]}" --profile "$SCRATCH/p.json" --nodes 1 \
  --workers-per-node 4 --global-batch-size 256 --cores-per-node 2 --out "$SCRATCH/cores.json" \
  >"$SCRATCH/cores.out" 2>&1 || { cat "$SCRATCH/cores.out"; fail "dtrain plan --cores-per-node failed"; }
grep -qF "; 2 cores per node" "$SCRATCH/cores.out" || fail "the plan does not name the cores"
"$PY" - "$SCRATCH/cores.json" "$SCRATCH/p.json" <<'PY' || fail "--cores-per-node does not bound the step"
import json, sys
plan, prof = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert plan["cores_per_node"] == 2, plan["cores_per_node"]
# 4 one-thread workers at batch 64 on 2 cores: at least 2 x each one's compute per step.
compute = sum(l["forward_ms"] + l["backward_ms"] for l in prof["layers"]) * 64 / prof["batch"]
for r in plan["predictions"]:
    assert r["node_cpu_ms"] >= 2 * compute * prof["threads"] - 1e-6, r
    assert r["step_ms"] >= r["node_cpu_ms"] - 1e-6, r
    assert r["bound"] == "cores", r  # every candidate: the cores pace it
print(f"{len(plan['predictions'])} rows paced by the cores")
PY

echo "== 3c. plan_vs_measured.py prices each sync run by the allreduce it ran"
# A sweep of one 4-worker sync run per algorithm, on a link slow to start (α 5 ms), where the flat
# ring (6 hops) and the node's in-place sum (2) differ: each row is the plan's own row.
for algo in hierarchical mpi; do
  mkdir -p "$SCRATCH/sweep-$algo/sync-w4"
  echo "{\"samples_per_sec\": 100.0, \"allreduce\": \"$algo\"}" \
    >"$SCRATCH/sweep-$algo/sync-w4/results.json"
done
LINK=alpha_us=5000,beta_gbps=1
"$DTRAIN" plan --config "$JOB" "${DATA[@]}" --profile "$SCRATCH/p.json" --nodes 1 \
  --workers-per-node 4 --global-batch-size 256 --intra-node "$LINK" --mode sync \
  --out "$SCRATCH/pvm.json" >/dev/null 2>&1 || fail "dtrain plan for plan_vs_measured failed"
PVM=("$PY" "$SRC/data-tools/plan_vs_measured.py" --profile "$SCRATCH/p.json" --job "$JOB"
     --global-batch 256 --intra-node "$LINK" --dtrain "$DTRAIN")
"${PVM[@]}" "$SCRATCH/sweep-hierarchical" >"$SCRATCH/pvm-h.md"
"${PVM[@]}" "$SCRATCH/sweep-mpi" >"$SCRATCH/pvm-m.md"
"${PVM[@]}" "$SCRATCH/sweep-hierarchical" --allreduce flat >"$SCRATCH/pvm-f.md"
cat "$SCRATCH/pvm-h.md" "$SCRATCH/pvm-m.md"
"$PY" - "$SCRATCH/pvm.json" "$SCRATCH"/pvm-{h,m,f}.md <<'PY' || fail "plan_vs_measured priced a run by another allreduce"
import json, sys
rows = {r["configuration"]: r["samples_per_s"] for r in json.load(open(sys.argv[1]))["predictions"]
        if r["bucket_mb"] == 25}
hier, flat = rows["sync, hierarchical"], rows["sync, flat allreduce"]
assert abs(hier - flat) > 0.01 * flat, (hier, flat)  # the test tells them apart
for path, label, want in ((sys.argv[2], "sync (hierarchical)", hier),
                          (sys.argv[3], "sync (flat allreduce)", flat),
                          (sys.argv[4], "sync (flat allreduce)", flat)):
    row = [l for l in open(path) if l.startswith("| sync")]
    assert len(row) == 1 and row[0].startswith(f"| {label} | 4 |"), (path, row)
    got = float(row[0].split("|")[3])
    assert abs(got - want) <= 0.01, (path, got, want)
print(f"hierarchical {hier:.2f}, flat {flat:.2f} samples/s: each run priced by its own")
PY

echo "== 3c'. plan_vs_measured.py --straggler-cv auto: σ from the ceiling runs' step times"
# 4 ceiling runs whose logs time steps 1-3 at 5000 (the first: left out), 100 and 110 ms: within
# each run ±5 of 105, so σ = √(2·(5/105)²) = 0.0673.
mkdir -p "$SCRATCH/sweep-cv/sync-w4"
echo '{"samples_per_sec": 100.0, "allreduce": "hierarchical"}' >"$SCRATCH/sweep-cv/sync-w4/results.json"
for k in 1 2 3 4; do
  mkdir -p "$SCRATCH/sweep-cv/ceiling-w4/r$k"
  echo '{"samples_per_sec": 30.0}' >"$SCRATCH/sweep-cv/ceiling-w4/r$k/results.json"
  for st in "1 5000.0" "2 100.0" "3 110.0"; do
    read -r n ms <<<"$st"
    printf 'step %7d | epoch   1 | loss 2.3000 | acc 0.1000 | %8s ms/step |     640.0 samples/s | lr 0.01\n' "$n" "$ms"
  done >"$SCRATCH/sweep-cv/ceiling-w4/r$k.log"
done
"${PVM[@]}" "$SCRATCH/sweep-cv" --straggler-cv auto >"$SCRATCH/pvm-cv.md" ||
  fail "plan_vs_measured.py --straggler-cv auto failed"
cat "$SCRATCH/pvm-cv.md"
grep -qF "4 workers: --straggler-cv 0.0673 from 8 steps of the ceiling runs" "$SCRATCH/pvm-cv.md" ||
  fail "σ is not the ceiling runs' pooled step-to-step variation"
"$DTRAIN" plan --config "$JOB" "${DATA[@]}" --profile "$SCRATCH/p.json" --nodes 1 \
  --workers-per-node 4 --global-batch-size 256 --intra-node "$LINK" --mode sync \
  --straggler-cv 0.06734350297014738 --out "$SCRATCH/pvm-cv.json" >/dev/null 2>&1 ||
  fail "dtrain plan --straggler-cv for plan_vs_measured failed"
"$PY" - "$SCRATCH/pvm-cv.json" "$SCRATCH/pvm-cv.md" <<'PY' || fail "the auto σ was not the plan's"
import json, sys
r = [r for r in json.load(open(sys.argv[1]))["predictions"]
     if r["bucket_mb"] == 25 and r["configuration"] == "sync, hierarchical"][0]
row = [l for l in open(sys.argv[2]) if l.startswith("| sync")][0].split("|")
assert abs(float(row[3]) - r["samples_per_s"]) <= 0.01, (row, r)
assert r["straggler_ms"] > 0 and abs(float(row[8]) - r["exposed_comm_ms"] - r["straggler_ms"]) <= 0.1, (row, r)
print(f"   σ 0.0673: {r['samples_per_s']:.2f} samples/s, {r['straggler_ms']:.1f} ms waiting for the slowest")
PY

echo "== 3c''. plan_vs_measured.py: the run's own worker count; a bad SWEEP is one clear error"
# A results.json that records 4 workers in a folder named for 2: priced as the 4 it ran, with a
# warning; the same row as sweep-hierarchical's.
mkdir -p "$SCRATCH/sweep-rec/sync-w2"
echo '{"samples_per_sec": 100.0, "allreduce": "hierarchical", "mode": "sync", "num_ps": 0, "num_workers": 4}' \
  >"$SCRATCH/sweep-rec/sync-w2/results.json"
"${PVM[@]}" "$SCRATCH/sweep-rec" >"$SCRATCH/pvm-rec.md" 2>"$SCRATCH/pvm-rec.err" ||
  { cat "$SCRATCH/pvm-rec.err"; fail "plan_vs_measured.py on a run recording its workers failed"; }
grep -qF "sweep-rec/sync-w2/results.json: the run records mode sync, 0 ps, 4 workers" "$SCRATCH/pvm-rec.err" ||
  { cat "$SCRATCH/pvm-rec.err"; fail "no warning that the folder's name and the record differ"; }
[[ $(grep '^| sync' "$SCRATCH/pvm-rec.md") == $(grep '^| sync' "$SCRATCH/pvm-h.md") ]] ||
  { cat "$SCRATCH/pvm-rec.md"; fail "the run was not priced by its recorded 4 workers"; }
mkdir -p "$SCRATCH/sweep-bad/sync-w2"
echo '{"samples_per_sec": 1' >"$SCRATCH/sweep-bad/sync-w2/results.json"
# pvm_fails NEEDLE SWEEP [OPTIONS...]: plan_vs_measured.py exits 1 with NEEDLE and no traceback.
pvm_fails() {
  local needle=$1 rc=0
  "${PVM[@]}" "${@:2}" >"$SCRATCH/pvm-bad.out" 2>&1 || rc=$?
  [[ $rc -eq 1 ]] && grep -qF -- "$needle" "$SCRATCH/pvm-bad.out" && ! grep -q Traceback "$SCRATCH/pvm-bad.out" ||
    { cat "$SCRATCH/pvm-bad.out"; fail "plan_vs_measured.py ${*:2}: exit $rc, want 1 and '$needle'"; }
  echo "-- exit $rc: $(head -1 "$SCRATCH/pvm-bad.out")"
}
pvm_fails "SWEEP $SCRATCH/none: no such folder or file" "$SCRATCH/none"
pvm_fails "SWEEP $SCRATCH/sweep-rec/sync-w2/results.json: not scaling_report.py's CSV" \
  "$SCRATCH/sweep-rec/sync-w2/results.json"
pvm_fails "$SCRATCH/sweep-bad/sync-w2/results.json: not valid JSON" "$SCRATCH/sweep-bad"
# scaling_report.py's CSV leaves a figure the runs lack empty (an older dtrain's results.json has
# no step_compute_ms): priced, that measured figure shown "-" as for such a folder of runs (it was
# "not scaling_report.py's CSV", and the folder showed it as 0.0). A cell that is no number: one
# error naming FILE:LINE and the column.
printf 'mode,ps,workers,samples_per_s,compute_ms,comm_ms,global_batch,samples\nsync,0,4,100,,2.5,256,2560\n' \
  >"$SCRATCH/pvm-empty.csv"
"${PVM[@]}" "$SCRATCH/pvm-empty.csv" >"$SCRATCH/pvm-empty.md" 2>&1 ||
  { cat "$SCRATCH/pvm-empty.md"; fail "plan_vs_measured.py refused scaling_report.py's CSV with an empty cell"; }
for f in pvm-empty pvm-h; do  # the CSV's row; the folder's run has no step_compute_ms either
  row=$(grep '^| sync' "$SCRATCH/$f.md")
  [[ $(cut -d'|' -f8 <<<"$row") == " - " ]] ||
    { cat "$SCRATCH/$f.md"; fail "$f: a missing measured compute is not shown as -"; }
done
[[ $(grep '^| sync' "$SCRATCH/pvm-empty.md" | cut -d'|' -f10) == " 2.5 " ]] ||
  { cat "$SCRATCH/pvm-empty.md"; fail "the CSV's exposed comm is not shown"; }
sed 's/,2.5,/,lots,/' "$SCRATCH/pvm-empty.csv" >"$SCRATCH/pvm-word.csv"
pvm_fails "SWEEP $SCRATCH/pvm-word.csv:2: column comm_ms is 'lots', expected a number" "$SCRATCH/pvm-word.csv"
sed 's/,100,/,,/' "$SCRATCH/pvm-empty.csv" >"$SCRATCH/pvm-norate.csv"
pvm_fails "SWEEP $SCRATCH/pvm-norate.csv:2: column samples_per_s is empty, expected a number" "$SCRATCH/pvm-norate.csv"
# A missing dtrain (the default was build/bin/dtrain under the caller's directory): a traceback.
pvm_fails "--dtrain $SCRATCH/none/dtrain: not an executable" "$SCRATCH/sweep-hierarchical" \
  --dtrain "$SCRATCH/none/dtrain"

echo "== 3c'''. plan_vs_measured.py prices sync rows at --bucket-mb, else at the job file's"
# 0.5 MiB is none of the plan's own sizes: the row was missing (a traceback), and a job file's
# bucket-mb was never read (its sync runs priced at 25 MiB).
"$DTRAIN" plan --config "$JOB" "${DATA[@]}" --profile "$SCRATCH/p.json" --nodes 1 \
  --workers-per-node 4 --global-batch-size 256 --intra-node "$LINK" --mode sync --bucket-mb 0.5 \
  --out "$SCRATCH/pvm-b.json" >/dev/null 2>&1 || fail "dtrain plan --bucket-mb 0.5 failed"
sed 's/^\[train\]$/[train]\nbucket-mb = 0.5/' "$JOB" >"$SCRATCH/job-b.ini"
"${PVM[@]}" "$SCRATCH/sweep-hierarchical" --bucket-mb 0.5 >"$SCRATCH/pvm-b.md" ||
  fail "plan_vs_measured.py --bucket-mb 0.5 failed"
"${PVM[@]}" "$SCRATCH/sweep-hierarchical" --job "$SCRATCH/job-b.ini" >"$SCRATCH/pvm-bj.md" ||
  fail "plan_vs_measured.py with a job file's bucket-mb failed"
"$PY" - "$SCRATCH/pvm-b.json" "$SCRATCH"/pvm-{b,bj,h}.md <<'PY' || fail "not priced at 0.5 MiB buckets"
import json, sys
want = [r["samples_per_s"] for r in json.load(open(sys.argv[1]))["predictions"]
        if r["bucket_mb"] == 0.5 and r["configuration"] == "sync, hierarchical"][0]
got = [float([l for l in open(p) if l.startswith("| sync")][0].split("|")[3]) for p in sys.argv[2:]]
assert abs(got[0] - want) <= 0.01 and abs(got[1] - want) <= 0.01, (got, want)
assert abs(got[2] - want) > 0.01, ("25 MiB priced as 0.5 MiB", got, want)  # the test tells them apart
print(f"   0.5 MiB buckets: {want:.2f} samples/s, 25 MiB: {got[2]:.2f}")
PY

echo "== 3d. --straggler-cv: sync steps wait for the slowest of 4 workers, async ones do not"
"$DTRAIN" plan --config "$JOB" "${DATA[@]}" --profile "$SCRATCH/p.json" --nodes 2 \
  --workers-per-node 2 --network 25gbe --batch-size 64 --straggler-cv 0.05 \
  --out "$SCRATCH/cv.json" >"$SCRATCH/cv.out" 2>&1 || { cat "$SCRATCH/cv.out"; fail "plan --straggler-cv failed"; }
grep -qF "step times ±5.0 % (σ), the slowest of 4 5.1 % above the mean" "$SCRATCH/cv.out" ||
  { head -5 "$SCRATCH/cv.out"; fail "the header does not state the stragglers"; }
"$PY" - "$SCRATCH/cv.json" "$SCRATCH/plan.json" <<'PY'
import json, sys
cv, calm = (json.load(open(f))["predictions"] for f in sys.argv[1:3])
for a, b in zip(cv, calm):
    assert a["configuration"] == b["configuration"] and a["bucket_mb"] == b["bucket_mb"]
    if a["configuration"].startswith("async"):
        assert a["straggler_ms"] == 0 and a["step_ms"] == b["step_ms"], (a, b)
    else:  # 0.05 × E[max of 4 standard normals] (1.0293754) × compute
        assert abs(a["straggler_ms"] - 0.05 * 1.0293754 * a["compute_ms"]) < 1e-6 * a["compute_ms"], a
        assert abs(a["step_ms"] - b["step_ms"] - a["straggler_ms"]) < 1e-6 * a["step_ms"], (a, b)
print("   sync rows +5.1 % of compute, async unchanged")
PY

echo "== 4. bad options"
P=(plan --config "$JOB" "${DATA[@]}" --profile "$SCRATCH/p.json")
expect_error 0 "option --straggler-cv|[0, 1)" "${P[@]}" --straggler-cv 1.5
expect_error 0 "--straggler-cv|belong to \`dtrain plan\`" --config "$JOB" "${DATA[@]}" \
  --straggler-cv 0.1
expect_error 0 "option --network 'hdr'|unknown preset|hdr-ib" "${P[@]}" --network hdr
expect_error 0 "option --intra-node 'alpha_us=1'|beta_gbps" "${P[@]}" --intra-node alpha_us=1
expect_error 0 "option --nodes|>= 1" "${P[@]}" --nodes 0
expect_error 0 "option --cores-per-node|>= 0" "${P[@]}" --cores-per-node -1
expect_error 0 "--cores-per-node|belong to \`dtrain plan\`" --config "$JOB" "${DATA[@]}" \
  --cores-per-node 2
expect_error 0 "option --global-batch-size|10|4 workers" "${P[@]}" --workers-per-node 4 \
  --global-batch-size 10
expect_error 0 "option --profile '$SCRATCH/none.json'|cannot read" plan --config "$JOB" \
  "${DATA[@]}" --profile "$SCRATCH/none.json"
expect_error 0 "--mode sync --num-ps 2|not modelled" "${P[@]}" --mode sync --num-ps 2
expect_error 0 "needs the job's input|--synthetic|--train-data" plan --config \
  "$SRC/tests/common/tiny_cnn.ini"
expect_error 0 "--nodes|belong to \`dtrain plan\`" --config "$JOB" "${DATA[@]}" --nodes 2
expect_error 2 "one process|mpirun -np 2" "${P[@]}"
echo "keep me" >"$SCRATCH/exists.json"
expect_error 0 "option --out|exists.json|already exists" "${P[@]}" --out "$SCRATCH/exists.json"
[[ $(cat "$SCRATCH/exists.json") == "keep me" ]] || fail "an existing --out was overwritten"
# A profile of another job prices another model: refused (it was used as if it were this one's).
expect_error 0 "--profile $SCRATCH/p.json|layers, but the job's model has" plan --config \
  "$SRC/jobs/resnet50_imagenet.ini" --profile "$SCRATCH/p.json" --nodes 1 --workers-per-node 2
# The same layer list at another width: its gradient is another size (it was priced with the
# profile's 421,834 parameters for a model of 3,241,546).
sed 's/^layer = dense units=128$/layer = dense units=1024/' "$JOB" >"$SCRATCH/wide.ini"
grep -q "units=1024" "$SCRATCH/wide.ini" || fail "the wide job has no wide layer"
expect_error 0 "--profile $SCRATCH/p.json|parameters in the profile but|profile this job" plan \
  --config "$SCRATCH/wide.ini" "${DATA[@]}" --profile "$SCRATCH/p.json"
# Without the job's input here the counts cannot be checked, and the plan says so.
"$DTRAIN" plan --config "$SRC/jobs/fashion_mnist_cnn.ini" --train-data "$SCRATCH/absent.h5" \
  --profile "$SCRATCH/p.json" >"$SCRATCH/unchecked.out" 2>&1 || { cat "$SCRATCH/unchecked.out"; fail "plan without the input"; }
grep -qF "its parameter counts unchecked: the job's input is not here" "$SCRATCH/unchecked.out" ||
  { cat "$SCRATCH/unchecked.out"; fail "the plan does not say the counts went unchecked"; }
# --save-profile saves a measured profile: with --profile it was silently not written; naming
# the --out file it profiled, wrote the profile there and then failed.
expect_error 0 "option --save-profile '$SCRATCH/sp.json'|nothing is measured" "${P[@]}" \
  --save-profile "$SCRATCH/sp.json"
expect_error 0 "--save-profile and --out|need a file each" plan --config "$JOB" "${DATA[@]}" \
  --save-profile "$SCRATCH/same.json" --out "$SCRATCH/./same.json"
[[ ! -e $SCRATCH/same.json && ! -e $SCRATCH/sp.json ]] || fail "a refused plan wrote a file"
# A job file's mode and num-ps are the job's, not the plan's: --num-ps 2 under a job of mode =
# sync plans async with 2 ps (it was refused as "--mode sync --num-ps 2"), and num-ps = auto in
# the file is no error (the plan compares ps counts itself).
R50=(--config "$SRC/jobs/resnet50_imagenet.ini" --profile "$SRC/docs/scaling/resnet50_h200host_cpu_b24.json"
     --workers-per-node 8 --global-batch-size 24)
"$DTRAIN" plan "${R50[@]}" --num-ps 2 >"$SCRATCH/r50ps.out" 2>&1 || { cat "$SCRATCH/r50ps.out"; fail "plan --num-ps 2 under a sync job"; }
grep -q "^| async, 2 ps" "$SCRATCH/r50ps.out" || { cat "$SCRATCH/r50ps.out"; fail "no async 2-ps row"; }
sed 's/^num-ps = 1$/num-ps = auto/' "$SRC/jobs/fashion_mnist_mlp.ini" >"$SCRATCH/mlp_auto.ini"
grep -q "^num-ps = auto" "$SCRATCH/mlp_auto.ini" || fail "no num-ps = auto in the job"
"$DTRAIN" plan --config "$SCRATCH/mlp_auto.ini" "${DATA[@]}" --batch-size 8 --plan-steps 1 \
  --workers-per-node 4 >"$SCRATCH/auto.out" 2>&1 || { cat "$SCRATCH/auto.out"; fail "plan of a num-ps = auto job"; }
expect_error 0 "--num-ps auto picks K" "${P[@]}" --num-ps auto
# What the plan does not model is refused, not priced as plain data parallelism.
expect_error 0 "--pipeline-stages 2|not modelled" "${P[@]}" --pipeline-stages 2 --micro-batches 2
expect_error 0 "--max-staleness 2|not modelled" "${P[@]}" --max-staleness 2
# A fractional bucket size is recommended as given (0.3 printed as 0 meant one bucket).
"$DTRAIN" "${P[@]}" --nodes 2 --workers-per-node 2 --network 25gbe --bucket-mb 0.3 --mode sync \
  >"$SCRATCH/frac.out" 2>&1 || { cat "$SCRATCH/frac.out"; fail "plan --bucket-mb 0.3"; }
grep -q "^| sync, flat allreduce | 0.3 |" "$SCRATCH/frac.out" || { cat "$SCRATCH/frac.out"; fail "no 0.3 MiB row"; }
grep -q "^| sync, flat allreduce | 0 |" "$SCRATCH/frac.out" || fail "no one-bucket row"
[[ $(grep -c "^| sync, flat allreduce | 0 |" "$SCRATCH/frac.out") -eq 1 ]] ||
  { cat "$SCRATCH/frac.out"; fail "0.3 MiB printed as 0"; }
# LARS keeps each tensor whole on one ps: the plan tries no more ps than the model's 6 layers
# with parameters (it recommended 16 for 16 workers, which training refuses for fewer tensors).
"$DTRAIN" "${P[@]}" --nodes 2 --workers-per-node 8 --optimizer lars --mode async \
  >"$SCRATCH/lars.out" 2>&1 || { cat "$SCRATCH/lars.out"; fail "dtrain plan --optimizer lars"; }
grep -q "^| async, 4 ps" "$SCRATCH/lars.out" || { cat "$SCRATCH/lars.out"; fail "no 4-ps row"; }
! grep -qE "^\| async, (8|16) ps" "$SCRATCH/lars.out" || { cat "$SCRATCH/lars.out"; fail "more ps than layers"; }
# 2e9 nodes hung (the ps-count loop overflowed); a product that wraps int named no option.
expect_error 0 "--nodes 2000000000|at most 1048576 workers" "${P[@]}" --nodes 2000000000
expect_error 0 "--workers-per-node 65536|at most 1048576 workers" "${P[@]}" --nodes 65536 \
  --workers-per-node 65536

echo "== 5. a saved profile cuts the pipeline stages by measured time"
PIPE=(--config "$JOB" "${DATA[@]}" --batch-size 64 --mode sync --num-ps 0 --pipeline-stages 2
  --micro-batches 2 --dry-run)
"$MPIEXEC" -n 2 "$DTRAIN" "${PIPE[@]}" --pipeline-profile "$SCRATCH/p.json" \
  >"$SCRATCH/cut.out" 2>&1 || { cat "$SCRATCH/cut.out"; fail "--pipeline-profile dry run failed"; }
grep -F "balanced by measured time" "$SCRATCH/cut.out" || fail "the cut does not say it is timed"
# The two-stage cut that minimises the slower stage of the profile's forward + backward ms.
want=$("$PY" - "$SCRATCH/p.json" <<'PY'
import json, sys
ms = [l["forward_ms"] + l["backward_ms"] for l in json.load(open(sys.argv[1]))["layers"]]
best = min(range(1, len(ms)), key=lambda k: (max(sum(ms[:k]), sum(ms[k:])), k))
print(f"{best + 1}-{len(ms)}")
PY
)
grep -E "^#  +1 +$want " "$SCRATCH/cut.out" >/dev/null ||
  { cat "$SCRATCH/cut.out"; fail "stage 1 does not start at the timed cut ($want)"; }
expect_error 2 "--pipeline-profile|$SCRATCH/p.json|layers" --config \
  "$SRC/jobs/fashion_mnist_mlp.ini" "${DATA[@]}" --mode sync --num-ps 0 --pipeline-stages 2 \
  --micro-batches 2 --dry-run --pipeline-profile "$SCRATCH/p.json"
expect_error 2 "option --pipeline-profile|$SCRATCH/none.json" "${PIPE[@]}" \
  --pipeline-profile "$SCRATCH/none.json"

echo "== 6. data-tools/scale_profile.py: a profile dtrain plan reads, or one clear error"
SP=("$PY" "$SRC/data-tools/scale_profile.py")
R50P=$SRC/docs/scaling/resnet50_cpu_vm_b24.json
mkdir -p "$SCRATCH/sp"
"${SP[@]}" "$R50P" --compute-ms 50 --batch 8 --out "$SCRATCH/sp/new/dir/scaled.json" \
  >"$SCRATCH/sp.out" 2>&1 || { cat "$SCRATCH/sp.out"; fail "scale_profile.py into a new folder failed"; }
"$DTRAIN" plan --config "$SRC/jobs/resnet50_imagenet.ini" --profile "$SCRATCH/sp/new/dir/scaled.json" \
  --nodes 1 --workers-per-node 2 --batch-size 8 --mode sync >"$SCRATCH/sp.out" 2>&1 ||
  { cat "$SCRATCH/sp.out"; fail "dtrain plan refused scale_profile.py's profile"; }
echo '[1]' >"$SCRATCH/sp/list.json"
echo '{"format": "dtrain-profile-1",' >"$SCRATCH/sp/broken.json"
"$PY" - "$R50P" "$SCRATCH/sp" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for l in p["layers"]:
    l["forward_ms"] = l["backward_ms"] = 0
json.dump(p, open(f"{sys.argv[2]}/zero.json", "w"))
p["layers"][0]["forward_ms"] = 1e308  # finite, but the sum overflows: all layers became 0 ms
json.dump(p, open(f"{sys.argv[2]}/huge.json", "w"))
PY
echo "keep me" >"$SCRATCH/sp/exists.json"
# sp_fails NEEDLE ARGS...: scale_profile.py exits 1 with NEEDLE, no traceback, no out.json.
sp_fails() {
  local needle=$1 rc=0
  shift
  "${SP[@]}" "$@" >"$SCRATCH/sp.out" 2>&1 || rc=$?
  [[ $rc -eq 1 ]] && grep -qF -- "$needle" "$SCRATCH/sp.out" && ! grep -q Traceback "$SCRATCH/sp.out" ||
    { cat "$SCRATCH/sp.out"; fail "scale_profile.py $*: exit $rc, want 1 and '$needle'"; }
  [[ ! -e $SCRATCH/sp/out.json && -z $(ls -A "$SCRATCH/sp" | grep '\.tmp-') ]] ||
    fail "scale_profile.py $*: wrote out.json or left a temporary"
  echo "-- exit $rc: $(head -1 "$SCRATCH/sp.out")"
}
O=(--batch 8 --out "$SCRATCH/sp/out.json")
sp_fails "cannot read $SCRATCH/sp/none.json: No such file or directory" "$SCRATCH/sp/none.json" --compute-ms 5 "${O[@]}"
sp_fails "$SCRATCH/sp/list.json is not a dtrain profile" "$SCRATCH/sp/list.json" --compute-ms 5 "${O[@]}"
sp_fails "$SCRATCH/sp/broken.json: not valid JSON" "$SCRATCH/sp/broken.json" --compute-ms 5 "${O[@]}"
sp_fails "$SCRATCH/sp/zero.json: every layer's forward_ms and backward_ms is 0" "$SCRATCH/sp/zero.json" --compute-ms 5 "${O[@]}"
sp_fails "$SCRATCH/sp/huge.json: layer 0: forward_ms = 1e+308, expected a finite number >= 0 and <= 1e+09" \
  "$SCRATCH/sp/huge.json" --compute-ms 5 "${O[@]}"
sp_fails "--compute-ms nan: expected a finite number > 0" "$R50P" --compute-ms nan "${O[@]}"
sp_fails "--optimizer-ms inf: expected a finite number >= 0" "$R50P" --compute-ms 5 --optimizer-ms inf "${O[@]}"
# dtrain plan's 1e9 ms a pass or an update: a profile written, then refused by dtrain plan.
sp_fails "--compute-ms 1e+300: $R50P's layers scaled by" "$R50P" --compute-ms 1e300 "${O[@]}"
sp_fails "--optimizer-ms 1000000000000.0: expected a finite number >= 0 and <= 1e9" "$R50P" --compute-ms 5 --optimizer-ms 1e12 "${O[@]}"
sp_fails "$SCRATCH/sp/exists.json: exists; not overwriting" "$R50P" --compute-ms 5 --batch 8 --out "$SCRATCH/sp/exists.json"
[[ $(cat "$SCRATCH/sp/exists.json") == "keep me" ]] || fail "scale_profile.py replaced an existing --out"
sp_fails "cannot write $SCRATCH/sp/exists.json/out.json: $SCRATCH/sp/exists.json is not a directory" \
  "$R50P" --compute-ms 5 --batch 8 --out "$SCRATCH/sp/exists.json/out.json"
echo "PASS"
