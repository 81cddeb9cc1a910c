#!/usr/bin/env python3
"""Checks that the folders of src/ include each other without a cycle.

Each folder of src/ is a stage or a shared layer (docs/layout.md). A header of include/kharness/
counts as the folder that implements it: the folder of the .cpp file of the same name
(kharness/solution.hpp: src/core/solution.cpp), else the folder of its name (kharness/export.hpp:
src/export/), else the folder of the src/ file whose first #include is that header. An include from folder
A of a header of folder B is an edge A -> B; a cycle among the folders is reported with the files
that make it, and the script exits 1.

    scripts/check-layers.py [ROOT]      ROOT: the repository (default: this script's parent)
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def first_include(text):
    m = INCLUDE.search(text)
    return m.group(1) if m else None


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else __file__).resolve()
    if root.is_file():
        root = root.parent.parent
    src = root / "src"
    files = [p for p in src.rglob("*") if p.suffix in (".cpp", ".hpp")]
    owner = {}  # "kharness/x.hpp" -> folder
    for p in files:  # src/core/solution.cpp implements kharness/solution.hpp
        if p.suffix == ".cpp" and p.parent != src and (root / "include/kharness" / (p.stem + ".hpp")).exists():
            owner.setdefault("kharness/" + p.stem + ".hpp", p.parent.name)
    for d in src.iterdir():  # kharness/export.hpp: src/export/
        if d.is_dir() and (root / "include/kharness" / (d.name + ".hpp")).exists():
            owner.setdefault("kharness/" + d.name + ".hpp", d.name)
    for p in files:  # else the file that begins with it
        if p.suffix != ".cpp" or p.parent == src:
            continue
        inc = first_include(p.read_text(errors="replace"))
        if inc and inc.startswith("kharness/") and inc not in owner:
            owner[inc] = p.parent.name
    edges = {}  # (a, b) -> example "file: include"
    for p in files:
        if p.parent == src:
            continue  # main.cpp
        a = p.parent.name
        for inc in INCLUDE.findall(p.read_text(errors="replace")):
            if inc.startswith("kharness/"):
                b = owner.get(inc)
            elif "/" in inc and (src / inc).exists():
                b = inc.split("/")[0]
            else:
                b = None
            if b and b != a:
                edges.setdefault((a, b), f"{p.relative_to(root)} includes {inc}")
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    # Tarjan's strongly connected components.
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
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
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    if not comps:
        print(f"layers: {len(graph)} folders of src/, no include cycle")
        return 0
    for comp in comps:
        print("layers: include cycle among " + ", ".join(comp) + ":")
        for (a, b), why in sorted(edges.items()):
            if a in comp and b in comp:
                print(f"  {a} -> {b}: {why}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
