#!/usr/bin/env python3
"""tests/style/include_layering.py — the modules' include graph has no cycle, and core/ (errors,
config, log, timer: the ground floor) includes no other dtrain module.

A module is a folder of src/ and its mirror in include/dtrain/ (src/main.cpp is the module `main`).
An edge A -> B is an `#include "dtrain/B/..."` in a file of A. Prints every offending include
(file:line) and exits 1; exits 0 with the module count otherwise.

usage: include_layering.py [--root DIR] [--allow A->B ...]
  --allow A->B  tolerates one more edge; an allowed edge (KNOWN or --allow) that no longer exists
                is reported, so that the allowance is removed.
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"dtrain/([A-Za-z0-9_]+)/')
SOURCES = (".cpp", ".hpp", ".h", ".cu", ".cuh")
# Edges tolerated for now, each with its reason (none: the NCCL allreduce moved to collectives/).
KNOWN = {}


def module_of(rel):
    parts = rel.split("/")
    if parts[0] == "src":
        return parts[1] if len(parts) > 2 else "main"
    return parts[2]  # include/dtrain/<module>/...


def edges(root):
    """{(a, b): [file:line, ...]} of every include from module a to module b != a."""
    found = {}
    for top in ("src", os.path.join("include", "dtrain")):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                a = module_of(rel)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for no, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) != a:
                            found.setdefault((a, m.group(1)), []).append(f"{rel}:{no}")
    return found


def cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--allow", action="append", default=[], metavar="A->B")
    args = ap.parse_args()
    found = edges(args.root)
    allowed = set(KNOWN) | {tuple(a.split("->")) for a in args.allow}
    for edge in sorted(allowed - set(found)):
        print(f"note: allowed edge {edge[0]} -> {edge[1]} no longer exists; remove the allowance")
    bad = 0
    for (a, b), where in sorted(found.items()):
        if a == "core":
            bad += 1
            print(f"core includes {b}/ (core is the ground floor: errors, config, log, timer): "
                  + ", ".join(where))
    graph = {}
    for a, b in found:
        if (a, b) not in allowed:
            graph.setdefault(a, set()).add(b)
    for comp in cycles(graph):
        bad += 1
        print("include cycle between modules " + ", ".join(comp) + ":")
        for a in comp:
            for b in comp:
                if b in graph.get(a, ()):
                    print(f"  {a} -> {b}: " + ", ".join(found[(a, b)]))
    if bad:
        return 1
    modules = {m for edge in found for m in edge}
    print(f"include layering: {len(modules)} modules, {len(found)} edges, no cycle, core includes "
          "only itself")
    return 0


if __name__ == "__main__":
    sys.exit(main())
