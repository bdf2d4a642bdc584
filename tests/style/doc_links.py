#!/usr/bin/env python3
"""tests/style/doc_links.py — every relative link of the Markdown files resolves: the file (or
folder) it names exists, and an anchor (`file.md#heading`, `#heading`) names a heading of that file
as GitHub spells it (lower case, punctuation but `-` and `_` dropped, spaces as `-`, a repeated
heading numbered `-1`, `-2`, …). Links to web addresses are not followed; links inside fenced code
blocks and inline code are not links.

Prints every broken link as FILE:LINE: what, and exits 1; exits 0 with the count of links checked.

usage: doc_links.py [--root DIR]   (the Markdown files: DIR's README.md and docs/**/*.md, and any
                                    other *.md below DIR outside build trees and hidden folders)
"""
import argparse
import os
import re
import sys

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
SKIP_DIRS = {"third_party", "node_modules"}  # and build*/, hidden folders


def slug(text):
    """GitHub's anchor of a heading's text (a link in it counts by its text)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def lines_outside_code(path):
    """(line number, text) of the lines outside fenced code blocks."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if not fenced:
                yield n, line


_ANCHORS = {}  # path -> its headings' anchors


def anchors(path):
    """The anchors of the headings of Markdown file `path` (read once)."""
    if path not in _ANCHORS:
        seen, out = {}, set()
        for _, line in lines_outside_code(path):
            m = HEADING.match(line)
            if not m:
                continue
            s = slug(m.group(2))
            k = seen.get(s, 0)
            seen[s] = k + 1
            out.add(s if k == 0 else f"{s}-{k}")
        _ANCHORS[path] = out
    return _ANCHORS[path]


def markdown_files(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x not in SKIP_DIRS
                         and not x.startswith("build"))
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.join(d, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    root = os.path.abspath(ap.parse_args().root)
    bad, checked = [], 0
    for path in markdown_files(root):
        rel = os.path.relpath(path, root)
        for n, line in lines_outside_code(path):
            for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):  # inline code is not a link
                link = m.group(1)
                if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", link):  # https:, mailto:, …
                    continue
                checked += 1
                target, _, anchor = link.partition("#")
                full = (os.path.normpath(os.path.join(os.path.dirname(path), target))
                        if target else path)
                if not os.path.exists(full):
                    bad.append(f"{rel}:{n}: {link}: no such file")
                elif anchor and full.endswith(".md") and anchor not in anchors(full):
                    bad.append(f"{rel}:{n}: {link}: no heading '#{anchor}' in "
                               f"{os.path.relpath(full, root)}")
    for b in bad:
        print(b)
    if bad:
        print(f"doc links: {len(bad)} of {checked} broken")
        return 1
    print(f"doc links: {checked} relative links, all resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
