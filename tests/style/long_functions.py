#!/usr/bin/env python3
"""tests/style/long_functions.py — lists C++ functions longer than a limit (80 lines by default).

A brace counter, not a parser: comments, string and character literals are blanked out, then every
`{` opened at namespace or class scope whose header ends like a function signature — `)` followed
by qualifiers (const, noexcept, override, a trailing return type) or a constructor's initializer
list — opens a function body; lambdas and local classes inside it count as part of it. A function's
length runs from the first line of its signature to its closing brace, both included.

Declarative tables may stay long: a `// style: table` comment on a line of the signature, or on
the line right above it, exempts that function.

usage: long_functions.py [--max N] [--lines FILE:A-B ...] FILE...
  prints `FILE:LINE: NAME is L lines (max N)` for each long function and exits 1 if there is one;
  with --lines, only functions overlapping one of the given line ranges of that file are reported
  (the style check passes the lines a change touched).
"""
import argparse
import re
import sys

SCOPE_KEYWORDS = re.compile(r"\b(namespace|class|struct|union|enum)\b|\bextern\s*\"")
CONTROL = re.compile(r"\b(if|for|while|switch|catch|do|else|try)\s*$")
QUALIFIERS = re.compile(
    r"\)\s*(const|volatile|noexcept(\s*\([^)]*\))?|override|final|mutable|&|&&|\s)*"
    r"(->\s*[\w:<>,\s*&]+)?\s*$")


def blank_literals(text):
    """The text with comments and literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_templates(header):
    """`template <...>` prefixes removed (their `class T` is no class head)."""
    while True:
        m = re.search(r"\btemplate\s*<", header)
        if not m:
            return header
        depth, j = 1, m.end()
        while j < len(header) and depth:
            depth += {"<": 1, ">": -1}.get(header[j], 0)
            j += 1
        header = header[:m.start()] + " " + header[j:]


def classify(header):
    """'fn', 'scope' (namespace, class: look inside for functions) or 'other' for a `{`."""
    h = strip_templates(header).strip()
    if not h or h.endswith("=") or h.endswith(",") or h.endswith("return"):
        return "other"
    if re.search(r"\benum\b", h):
        return "other"
    if SCOPE_KEYWORDS.search(h) and not h.endswith(")") and "(" not in h.split(":")[0]:
        return "scope"
    if CONTROL.search(h):
        return "other"
    if QUALIFIERS.search(h):
        return "fn"
    # A constructor's initializer list: `X(args) : a_(1), b_{2}` (the last one may end in `}`).
    if re.search(r"\)\s*:\s*[\w:]+\s*[({]", h) and not h.startswith(("case", "default")):
        return "fn"
    return "other"


def functions(text):
    """(name, first line, last line) of every function body at namespace or class scope."""
    code = blank_literals(text)
    stack = []  # per open brace: 'fn', 'scope', 'other'
    start = 0  # where the current header (text since the last ; { } at this level) starts
    found = []
    fn_open = None
    for i, c in enumerate(code):
        if c == ";":
            if not stack or stack[-1] == "scope":
                start = i + 1
        elif c == "{":
            in_decl = not stack or stack[-1] == "scope"
            kind = classify(code[start:i]) if in_decl else "other"
            stack.append(kind)
            if kind == "fn":
                header = code[start:i]
                lead = len(header) - len(header.lstrip())
                first = code.count("\n", 0, start + lead) + 1
                name = re.findall(r"([~\w:]+)\s*\(", strip_templates(header))
                fn_open = (name[0] if name else "?", first)
            if in_decl:
                start = i + 1
        elif c == "}":
            kind = stack.pop() if stack else "other"
            if kind == "fn" and fn_open:
                found.append((fn_open[0], fn_open[1], code.count("\n", 0, i) + 1))
                fn_open = None
            if not stack or stack[-1] == "scope":
                start = i + 1
        elif c == ":" and (not stack or stack[-1] == "scope"):
            # `public:` and friends end a header at class scope.
            if re.search(r"\b(public|private|protected)\s*$", code[start:i]):
                start = i + 1
    return found


def exempt(lines, first):
    window = lines[max(0, first - 2):first + 2]
    return any("style: table" in line for line in window)


def parse_ranges(specs):
    ranges = {}
    for spec in specs:
        path, _, span = spec.rpartition(":")
        a, _, b = span.partition("-")
        ranges.setdefault(path, []).append((int(a), int(b or a)))
    return ranges


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=80)
    ap.add_argument("--lines", nargs="*", default=None, metavar="FILE:A-B")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    ranges = parse_ranges(args.lines) if args.lines is not None else None
    bad = 0
    for path in args.files:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.split("\n")
        for name, first, last in functions(text):
            length = last - first + 1
            if length <= args.max or exempt(lines, first):
                continue
            if ranges is not None and not any(a <= last and b >= first
                                              for a, b in ranges.get(path, [])):
                continue
            print(f"{path}:{first}: {name} is {length} lines (max {args.max})")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
