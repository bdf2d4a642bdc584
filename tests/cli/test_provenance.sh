#!/usr/bin/env bash
# tests/cli/test_provenance.sh — `dtrain --version` is `git describe --tags --always --dirty` of the
# checkout it was built from; results.json and the log header carry the version, compiler, MPI /
# oneDNN / HDF5 versions, every rank's host and threads, and config_crc32 — recomputed here with
# zlib's CRC-32 over the documented canonical text of config.ini, equal for the same options given
# in another order and different for another --lr.
set -euo pipefail
source "$(dirname "$0")/common.sh"

echo "== --version"
v=$("$DTRAIN" --version)
echo "$v"
if git -C "${SRC:?}" rev-parse --git-dir >/dev/null 2>&1; then
  want="dtrain $(git -C "$SRC" describe --tags --always --dirty)"
  [[ $v == "$want" ]] || fail "--version says '$v', git describe says '$want' (rebuild?)"
else
  [[ $v =~ ^dtrain\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "--version outside git: '$v'"
fi

make_data train 256 --seed 21 --template-seed 9
write_job "$SCRATCH/job.ini"
COMMON=(--config "$SCRATCH/job.ini" --train-data "$SCRATCH/train.h5" --max-steps 4)
run 3 "$SCRATCH/a" --mode async --num-ps 1 --lr 0.02 --seed 5
run 3 "$SCRATCH/b" --seed 5 --num-ps 1 --lr 0.02 --mode async   # same options, other order
run 3 "$SCRATCH/c" --mode async --num-ps 1 --lr 0.03 --seed 5

"$PY" - "$SCRATCH" "$v" "$(hostname)" <<'PY' || fail "provenance in results.json"
import json, re, sys, zlib
scratch, version, host = sys.argv[1], sys.argv[2], sys.argv[3]
r = {d: json.load(open(f"{scratch}/{d}/results.json")) for d in "abc"}
a = r["a"]
assert "dtrain " + a["dtrain_version"] == version, (a["dtrain_version"], version)
assert re.fullmatch(r"(GCC|Clang) \d+\.\d+\.\d+", a["compiler"]), a["compiler"]
assert "MPI" in a["mpi_version"] and re.search(r"\d+\.\d+", a["mpi_version"]), a["mpi_version"]
for k in ("onednn_version", "hdf5_version"):
    assert re.fullmatch(r"\d+\.\d+\.\d+", a[k]), (k, a[k])
assert a["hosts"] == [host] * 3, (a["hosts"], host)
assert len(a["threads_per_rank"]) == 3 and all(t >= 1 for t in a["threads_per_rank"]), a
assert "gpu_models" not in a and "cudnn_version" not in a, "GPU versions on a CPU run"

def crc(ini):  # the canonical text of provenance.hpp: key=value lines, stably sorted by key
    kv = []
    for line in open(ini):
        line = line.strip()
        if not line or line[0] in "#;[" or "=" not in line:
            continue
        k, v = line.split("=", 1)
        kv.append((k.strip(), v.strip()))
    kv.sort(key=lambda x: x[0])
    return "%08x" % zlib.crc32("".join(f"{k}={v}\n" for k, v in kv).encode())

for d in "abc":
    assert r[d]["config_crc32"] == crc(f"{scratch}/{d}/config.ini"), (d, r[d]["config_crc32"])
assert a["config_crc32"] != r["b"]["config_crc32"], "run dirs differ, so must the configurations"
print("results.json provenance ok:", {k: a[k] for k in ("dtrain_version", "compiler", "mpi_version",
      "onednn_version", "hdf5_version", "config_crc32")})
PY
# a and b differ only in --run-dir: with it set equal, the order of options must not matter.
"$PY" - "$SCRATCH" <<'PY' || fail "config_crc32 order independence"
import sys
s = sys.argv[1]
ini = {d: open(f"{s}/{d}/config.ini").read().replace(f"{s}/{d}", "RUN") for d in "abc"}
assert ini["a"] == ini["b"], "same options in another order gave another effective configuration"
assert ini["a"] != ini["c"]
PY
grep -q "^# dtrain $(sed 's/^dtrain //' <<<"$v") | compiler " "$SCRATCH/a.log" || { cat "$SCRATCH/a.log"; fail "no provenance line in the log header"; }
grep -q "^# hosts by rank: " "$SCRATCH/a.log" || fail "no hosts line in the log header"
echo "PASS"
