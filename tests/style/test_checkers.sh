#!/usr/bin/env bash
# tests/style/test_checkers.sh — the style checkers find what they are for, on small made-up trees:
#  1. include_layering.py: a core/ header that includes io/ fails, naming the file and line; a
#     two-module cycle fails naming both modules; a clean tree passes;
#  2. long_functions.py: an 81-line function is reported with its name and length, an 80-line one
#     and one marked `// style: table` are not; --lines reports only functions a range touches;
#     braces inside strings, comments and lambdas do not confuse it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
[[ -x $py ]] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. Include layering.
mk() { mkdir -p "$(dirname "$tmp/$1")"; printf '%s\n' "${@:2}" >"$tmp/$1"; }
mk tree/include/dtrain/core/config.hpp '#pragma once' '#include "dtrain/core/error.hpp"'
mk tree/include/dtrain/io/dataset.hpp '#include "dtrain/core/config.hpp"'
mk tree/src/train/run.cpp '#include "dtrain/io/dataset.hpp"' '#include "dtrain/core/config.hpp"'
out=$($py "$here/include_layering.py" --root "$tmp/tree") || fail "clean tree refused: $out"
grep -q "no cycle" <<<"$out" || fail "no summary: $out"
mk tree/include/dtrain/core/config.hpp '#pragma once' '' '  #include "dtrain/io/dataset.hpp"'
if out=$($py "$here/include_layering.py" --root "$tmp/tree"); then fail "core -> io passed"; fi
grep -q "core includes io/.*include/dtrain/core/config.hpp:3" <<<"$out" || fail "no core line: $out"
grep -q "include cycle between modules core, io" <<<"$out" || fail "no cycle named: $out"
mk tree/include/dtrain/core/config.hpp '#pragma once'
mk tree/src/io/dataset.cpp '#include "dtrain/train/run.hpp"'
if out=$($py "$here/include_layering.py" --root "$tmp/tree"); then fail "io <-> train passed"; fi
grep -q "cycle between modules io, train" <<<"$out" || fail "io/train cycle not named: $out"
grep -q "core includes" <<<"$out" && fail "core blamed for the io/train cycle: $out"
$py "$here/include_layering.py" --root "$tmp/tree" --allow 'io->train' >/dev/null ||
  fail "--allow io->train did not tolerate the edge"

# 2. Long functions: fn NAME N writes a function of N lines in all.
fn() {
  echo "int $1(int a) {"
  echo '  const char* s = "}}{ not a brace";  // } nor this {'
  echo '  auto f = [&](int x) { return x + 1; };'
  for ((i = 0; i < $2 - 5; ++i)); do echo "  a = f(a);"; done
  echo "  return a;"
  echo "}"
}
{
  echo "namespace dtrain {"
  echo "namespace {"
  fn short_one 80
  echo "}  // namespace"
  echo "struct S {"
  echo " public:"
  fn long_one 81 | sed 's/^/  /'
  echo "};"
  echo "// style: table"
  fn table_one 120
  echo "}  // namespace dtrain"
} >"$tmp/long.cpp"
if out=$($py "$here/long_functions.py" "$tmp/long.cpp"); then fail "81 lines passed"; fi
[[ $(wc -l <<<"$out") == 1 ]] || fail "expected one long function: $out"
grep -q "long.cpp:86: long_one is 81 lines (max 80)" <<<"$out" || fail "wrong report: $out"
$py "$here/long_functions.py" --lines "$tmp/long.cpp:1-85" -- "$tmp/long.cpp" >/dev/null ||
  fail "--lines 1-85 reported long_one (lines 86-166)"
$py "$here/long_functions.py" --lines "$tmp/long.cpp:100-100" -- "$tmp/long.cpp" >/dev/null &&
  fail "--lines 100-100 missed long_one"
echo "style checkers: ok"
