#!/usr/bin/env bash
# tests/style/test_checkers.sh — the style checkers find what they are for, on small made-up trees:
#  1. include_layering.py: a core/ header that includes io/ fails, naming the file and line; a
#     two-module cycle fails naming both modules; a clean tree passes;
#  2. long_functions.py: an 81-line function is reported with its name and length, an 80-line one
#     and one marked `// style: table` are not; --lines reports only functions a range touches;
#     braces inside strings, comments and lambdas do not confuse it;
#  3. tests/style_check.sh in a scratch git repository (this repo's checkers and .clang-format):
#     a clean branch passes; a misformatted line, a 114-column line and a function grown past 80
#     lines on the branch each fail, naming the file and line; an untouched long function and an
#     untouched misformatted line do not. Skipped (exit 77, after 1, 2 and 4) without clang-format.
#  4. doc_links.py: a link to a missing file and one to a missing heading fail, naming file and
#     line; headings with code, punctuation and repeats, folders, web addresses, links in code
#     blocks and inline code pass.
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

# 4. Markdown links.
mk docs/README.md '# Title' '## Sync allreduce (`collectives/`, `train/exchange`)' '## Notes' '## Notes' \
  '[a](guide.md#setting-up-a_run) [b](#sync-allreduce-collectives-trainexchange) [c](#notes-1)' \
  '[d](sub/) [e](https://example.org/x.md) `[f](nowhere.md)`' '```' '[g](nowhere.md)' '```'
mk docs/guide.md '# Setting up a_run!'
mkdir -p "$tmp/docs/sub"
out=$($py "$here/doc_links.py" --root "$tmp/docs") || fail "good links refused: $out"
grep -q "4 relative links, all resolve" <<<"$out" || fail "wrong count: $out"
mk docs/guide.md '# Setting up a_run!' '' 'see [x](missing.md) and [y](README.md#notes-2)'
if out=$($py "$here/doc_links.py" --root "$tmp/docs"); then fail "broken links passed"; fi
grep -q "guide.md:3: missing.md: no such file" <<<"$out" || fail "missing file not named: $out"
grep -q "guide.md:3: README.md#notes-2: no heading '#notes-2' in README.md" <<<"$out" ||
  fail "missing heading not named: $out"

# 3. The style check itself, on a branch of a scratch repository.
if ! command -v clang-format >/dev/null || ! command -v git-clang-format >/dev/null; then
  echo "style checkers: ok; style_check.sh not tried: no clang-format (skipped)"
  exit 77
fi
repo=$tmp/repo
mkdir -p "$repo/tests/style" "$repo/src/core"
cp "$here/../style_check.sh" "$repo/tests/"
cp "$here"/*.py "$repo/tests/style/"
cp "$here/../../.clang-format" "$repo/"
cd "$repo"
git init -q -b main . && git config user.email t@t && git config user.name t
{
  echo "int   old_misformatted( int a ){return a;}"
  fn old_long 90
} >src/core/a.cpp
git add -A && git commit -qm base
git checkout -qb work
echo "int added(int a) { return a + 1; }" >>src/core/a.cpp
git commit -qam clean
out=$(bash tests/style_check.sh 2>&1) || fail "a clean change failed: $out"
check_fails() {  # check_fails WHAT PATTERN: the working tree's change fails, the message matches
  local out
  if out=$(bash tests/style_check.sh 2>&1); then fail "$1 passed: $out"; fi
  grep -q -- "$2" <<<"$out" || fail "$1: no '$2' in: $out"
  git checkout -q -- .
}
echo "int   bad( int a ){return a;}" >>src/core/a.cpp
check_fails "a misformatted line" "not formatted"
printf 'int wide_%0100d = 0;\n' 0 >>src/core/a.cpp
check_fails "a 114-column line" "src/core/a.cpp:93: 114 columns (max 100)"
sed -i '0,/^  a = f(a);$/s//  a = f(a);\n  a = f(a);/' src/core/a.cpp  # one line more
check_fails "a grown function" "src/core/a.cpp:2: old_long is 91 lines (max 80)"
echo "style checkers: ok"
