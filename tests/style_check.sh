#!/usr/bin/env bash
# tests/style_check.sh — the house style on the C++ a change touches (.cpp .hpp .h .cu .cuh):
#  1. the changed lines are as clang-format (.clang-format) writes them (`git clang-format --diff`);
#  2. no added line is longer than 100 columns (code points, as clang-format counts them);
#  3. no function the change touches is longer than 80 lines (tests/style/long_functions.py;
#     declarative tables may carry `// style: table`);
#  4. the module include graph has no cycle and core/ includes only itself
#     (tests/style/include_layering.py, whole tree; also the ctest entry style_include_layering).
# Lines the change does not touch are left alone: the tree is formatted once as a whole, not file by
# file as they are edited.
#
# What "the change" is, against base B (committed and uncommitted edits since B, and untracked
# files that git does not ignore):
#   DTRAIN_STYLE_BASE=<rev>  B = that revision;
#   otherwise, when a branch `main` (or `origin/main`) exists and HEAD is not on it, B = the
#   merge-base of HEAD and main: everything the branch adds;
#   otherwise (CI on main, or a clean clone of one branch) B = HEAD~: the last commit;
#   no git work tree, or a single commit: nothing to compare, the check says so and passes.
# Exit 0: clean; 1: a violation (each printed as FILE:LINE: what); 2: clang-format missing.
set -euo pipefail
cd "$(dirname "$0")/.."

python=/usr/bin/python3
[[ -x $python ]] || python=python3
status=0
$python tests/style/include_layering.py || status=1

if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "style check: not a git work tree, no change to check"
  exit $status
fi
if ! command -v clang-format >/dev/null || ! command -v git-clang-format >/dev/null; then
  echo "style check: clang-format not found (bash .ci/install-deps.sh installs Debian's)" >&2
  exit 2
fi

base=${DTRAIN_STYLE_BASE:-}
if [[ -z $base ]]; then
  for ref in main origin/main; do
    git rev-parse -q --verify "$ref^{commit}" >/dev/null || continue
    mb=$(git merge-base HEAD "$ref" 2>/dev/null) || continue
    [[ $mb != "$(git rev-parse HEAD)" ]] && base=$mb
    break
  done
fi
if [[ -z $base ]]; then
  if ! git rev-parse -q --verify 'HEAD~^{commit}' >/dev/null; then
    echo "style check: a single commit, nothing to compare"
    exit $status
  fi
  base=HEAD~
fi

exts=(-- '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
mapfile -t changed < <(git diff --name-only --diff-filter=ACMR "$base" "${exts[@]}")
mapfile -t untracked < <(git ls-files --others --exclude-standard "${exts[@]}")
files=("${changed[@]}" "${untracked[@]}")
echo "style check: ${#files[@]} changed C++ files against $(git rev-parse --short "$base")"
[[ ${#files[@]} -gt 0 ]] || exit $status

# 1. Formatting of the changed lines (untracked files: all their lines).
if [[ ${#changed[@]} -gt 0 ]]; then
  out=$(git clang-format --binary "$(command -v clang-format)" --diff "$base" -- "${changed[@]}" \
        2>&1) || true
  if [[ -n $out && $out != *"no modified files to format"* && $out != *"did not modify"* ]]; then
    echo "$out"
    echo "style check: the lines above are not formatted (fix: git clang-format $base)"
    status=1
  fi
fi
for f in "${untracked[@]}"; do
  clang-format --dry-run --Werror "$f" 2>&1 | head -20 || status=1
done

# The changed line ranges of every file, FILE:A-B (untracked files: whole).
mapfile -t ranges < <(
  git diff -U0 "$base" -- "${changed[@]}" | $python -c '
import re, sys
path = None
for line in sys.stdin:
    if line.startswith("+++ "):
        path = line[6:].rstrip("\n") if line.startswith("+++ b/") else None
    m = re.match(r"@@ -\S+ \+(\d+)(?:,(\d+))? @@", line)
    if m and path and m.group(2) != "0":
        a = int(m.group(1))
        print(f"{path}:{a}-{a + int(m.group(2) or 1) - 1}")'
  for f in "${untracked[@]}"; do echo "$f:1-$(wc -l <"$f")"; done)

# 2. Over-long lines among the changed ones.
$python - "${ranges[@]}" <<'EOF' || status=1
import sys
bad = 0
for spec in sys.argv[1:]:
    path, _, span = spec.rpartition(":")
    a, b = map(int, span.split("-"))
    with open(path, encoding="utf-8", errors="replace") as f:
        for no, line in enumerate(f, 1):
            if a <= no <= b and len(line.rstrip("\n")) > 100:
                print(f"{path}:{no}: {len(line.rstrip(chr(10)))} columns (max 100)")
                bad += 1
sys.exit(1 if bad else 0)
EOF

# 3. Long functions the change touches.
$python tests/style/long_functions.py --lines "${ranges[@]}" -- "${files[@]}" || status=1

[[ $status == 0 ]] && echo "style check: clean"
exit $status
