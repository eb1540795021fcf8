#!/usr/bin/env python3
"""List Python functions longer than a limit (default 60 lines) in futextrace/.

    scripts/long-functions.py [--limit N] [PATH...]

A function's length runs from its `def` (decorators excluded) to its last line,
docstring and comments included. Exit status 1 when any is found, so CI could
use it; the project keeps a few whole on purpose (see docs/architecture.md).
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def long_functions(path: Path, limit: int):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                yield node.lineno, node.name, length


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=60)
    ap.add_argument("paths", nargs="*", default=[str(Path(__file__).resolve().parent.parent / "futextrace")])
    args = ap.parse_args()
    found = 0
    for root in map(Path, args.paths):
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            for line, name, length in long_functions(path, args.limit):
                print(f"{_shown(path)}:{line}: {name} is {length} lines")
                found += 1
    print(f"{found} function(s) over {args.limit} lines", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
