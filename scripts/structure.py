#!/usr/bin/env python3
"""The structure figures of lock-runtime/src that issue 48 set goals for, measured the same way
each time: `python3 scripts/structure.py [--dups]`.

- lines: the crate's and backend/'s, and the largest files (goal: none over 700);
- traits: the methods of every trait the crate defines (goal: at most 12 each);
- names: a struct, enum, trait or type name defined in two places (goal: none);
- cycles: modules (top level, a directory counted as one) that import each other, directly or
  through others, from code (doc comments do not count) (goal: none);
- dead code: how many `allow(dead_code)` attributes remain;
- --dups: every pair of places that share six or more consecutive lines (blank lines, comments
  and lone brackets ignored): read them to tell boilerplate (signatures, clones) from logic.
"""

import collections
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lock-runtime", "src")


def sources():
    for directory, _, files in os.walk(ROOT):
        for name in sorted(files):
            if name.endswith(".rs"):
                path = os.path.join(directory, name)
                yield os.path.relpath(path, ROOT), open(path, encoding="utf-8").read()


def main():
    files = dict(sources())
    lines = {path: text.count("\n") for path, text in files.items()}
    backend = sum(n for path, n in lines.items() if path.startswith("backend/"))
    print(f"lines: crate {sum(lines.values())}, backend/ {backend}")
    for path, n in sorted(lines.items(), key=lambda item: -item[1])[:5]:
        print(f"  {n:5} {path}")

    print("traits (methods):")
    for path, text in files.items():
        for m in re.finditer(r"\n(?:pub(?:\([^)]*\))? )?trait (\w+)[^{]*\{", text):
            depth, i = 1, m.end()
            while depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            body = text[m.end():i]
            methods = re.findall(r"\n    (?:async )?fn (\w+)", body)
            print(f"  {m.group(1)} ({path}): {len(methods)}")

    defined = collections.defaultdict(list)
    for path, text in files.items():
        for m in re.finditer(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?(struct|enum|trait|type)\s+(\w+)", text):
            # Associated types a trait names (and its impls repeat), not definitions.
            if m.group(2) not in ("Output", "Error", "Stream", "Future", "Item", "Target", "TlsConnect"):
                defined[m.group(2)].append(path)
    twice = {name: paths for name, paths in defined.items() if len(paths) > 1}
    print(f"names defined twice: {len(twice)}")
    for name, paths in sorted(twice.items()):
        print(f"  {name}: {', '.join(paths)}")

    graph = collections.defaultdict(set)
    for path, text in files.items():
        module = path.split("/")[0].removesuffix(".rs")
        code = "\n".join(l for l in text.split("\n") if not l.strip().startswith("//"))
        for m in re.finditer(r"crate::(\w+)", code):
            if m.group(1) != module and (m.group(1) + ".rs" in os.listdir(ROOT) or os.path.isdir(os.path.join(ROOT, m.group(1)))):
                graph[module].add(m.group(1))
    cycles = strongly_connected(graph)
    print(f"import cycles: {len(cycles)}")
    for cycle in cycles:
        print("  " + " ".join(sorted(cycle)))

    dead = sum(text.count("allow(dead_code)") for text in files.values())
    print(f"allow(dead_code): {dead}")

    if "--dups" in sys.argv:
        duplicates(files)


def strongly_connected(graph):
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def duplicates(files, width=6):
    trivial = {"}", "{", "});", "})", ")", "];", "},", "),"}
    windows = collections.defaultdict(list)
    for path, text in files.items():
        kept = [(i + 1, l.strip()) for i, l in enumerate(text.split("\n"))]
        kept = [(i, l) for i, l in kept if l and not l.startswith("//") and l not in trivial]
        for k in range(len(kept) - width + 1):
            windows[tuple(l for _, l in kept[k:k + width])].append((path, kept[k][0]))
    pairs = collections.defaultdict(list)
    for places in windows.values():
        for a in places:
            for b in places:
                if a < b:
                    pairs[(a[0], b[0])].append((a[1], b[1]))
    count = 0
    for (first, second), starts in sorted(pairs.items()):
        starts.sort()
        runs = []
        for a, b in starts:
            if runs and a - runs[-1][1][0] <= 3 and abs(b - runs[-1][1][1]) <= 3:
                runs[-1][1] = (a, b)
            else:
                runs.append([(a, b), (a, b)])
        for (a0, b0), (a1, b1) in runs:
            count += 1
            print(f"  {first}:{a0}-{a1 + width - 1}  ~  {second}:{b0}-{b1 + width - 1}")
    print(f"places sharing {width}+ lines: {count}")


if __name__ == "__main__":
    main()
