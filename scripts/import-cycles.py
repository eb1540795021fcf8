#!/usr/bin/env python3
"""Import cycles between futextrace's modules, and imports of futextrace
modules hidden inside functions (an edge of the graph nobody sees at the top).

    scripts/import-cycles.py [--graph]

Every `import`/`from … import` of a futextrace module counts, at module level
or inside a function; `from futextrace.pkg import name` counts as an edge to
futextrace.pkg.name when that is a module. A function-level import of a
futextrace module is reported unless ALLOWED names it (with its reason).
Exit status 1 when a cycle or an unlisted function-level import is found.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "futextrace"

# (importing module, imported module): function-level imports kept on purpose.
# Each needs a reason: only heavy dependencies qualify, optional ones (matplotlib)
# or those a resident tracer loads once attached (numpy, elftools: issue 44, a
# warm start attached within 0.3 s).
ALLOWED: dict[tuple[str, str], str] = {
    # plots/recording.py imports matplotlib (about half a second): `report` without
    # --plot/--html, and every other command, never load it.
    ("futextrace.commands.report", "futextrace.output.plots.recording"): "matplotlib, for pictures only",
    ("futextrace.output.report", "futextrace.output.plots.recording"): "matplotlib, for pictures only",
    # numpy (0.1-0.2 s) and elftools (0.05 s): the summary, the map reader and
    # the naming run after the attach, and `record` says "Tracing" without them.
    ("futextrace.commands.record", "futextrace.output.text.render"): "numpy, elftools: the summary, after the run",
    ("futextrace.record.recorder", "futextrace.loading.maparrays"): "numpy: the map reader, once attached",
    ("futextrace.record.live", "futextrace.record.live_arrays"): "numpy: the -i rows, once attached",
    ("futextrace.record.recorder", "futextrace.naming.recorded"): "elftools: the naming, after the run",
    ("futextrace.naming.capture", "futextrace.naming.elfsyms"): "elftools: build ids, at the first maps read",
    # serve says "serving" once attached; its map reader and numpy come with the first scrape.
    ("futextrace.export.serve_recorder", "futextrace.export.summary"): "numpy: the first scrape's read",
    ("futextrace.export.serve_recorder", "futextrace.loading.maparrays"): "numpy: the first scrape's read",
    ("futextrace.export.lockwaits", "futextrace.export.waitarrays"): "numpy: the first scrape's read",
}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file, for every .py under futextrace/."""
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(node: ast.ImportFrom, name: str, is_pkg: bool) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(name: str, path: Path, known: set[str]):
    """(imported module, line, at module level?) for each futextrace module `name` imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top = set(map(id, tree.body))
    for stmt in ast.walk(tree):
        if isinstance(stmt, ast.Import):
            targets = [a.name for a in stmt.names]
        elif isinstance(stmt, ast.ImportFrom):
            mod = _resolve(stmt, name, path.name == "__init__.py")
            subs = [f"{mod}.{a.name}" for a in stmt.names if f"{mod}.{a.name}" in known]
            targets = subs if len(subs) == len(stmt.names) else [mod] + subs
        else:
            continue
        for t in targets:
            if t.split(".")[0] == PACKAGE and t in known and t != name:
                yield t, stmt.lineno, id(stmt) in top


def graph(root: Path = ROOT):
    """(edges: module -> set of modules, hidden: [(module, imported, line)])."""
    mods = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    hidden = []
    for name, path in mods.items():
        for target, line, at_top in imports(name, path, set(mods)):
            edges[name].add(target)
            if not at_top:
                hidden.append((name, target, line))
    return edges, hidden


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan),
    each as one cycle through it, for the message."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(_cycle_in(sorted(comp), edges))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _cycle_in(comp: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A path from comp[0] back to itself inside the component (breadth first)."""
    members, start = set(comp), comp[0]
    prev: dict[str, str] = {}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges[v] & members):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def problems(root: Path = ROOT) -> list[str]:
    edges, hidden = graph(root)
    out = ["cycle: " + " -> ".join(c) for c in cycles(edges)]
    out += [f"function-level import: {m} line {line} imports {t}" for m, t, line in hidden
            if (m, t) not in ALLOWED]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", action="store_true", help="print every edge (module -> module)")
    args = ap.parse_args()
    if args.graph:
        edges, _ = graph()
        for m in sorted(edges):
            for t in sorted(edges[m]):
                print(f"{m} -> {t}")
    found = problems()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
