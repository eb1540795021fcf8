"""The tests' own layout: what they share is in tests/helpers/ (one FT, one set of
skip guards and command helpers), and no test file imports another test file or
reaches into a folder through sys.path."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PATH_TRICK = "sys.path" + ".insert"


def sources():
    return [p for p in TESTS.rglob("test_*.py")]


def imported_modules(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_no_test_file_imports_another():
    bad = {str(p.relative_to(TESTS)): sorted(m for m in imported_modules(p) if m.split(".")[-1].startswith("test_"))
           for p in sources()}
    assert {k: v for k, v in bad.items() if v} == {}


def test_one_ft_and_no_path_tricks_outside_the_vm_harness():
    for p in sources():
        text = p.read_text()
        assert "\nFT = " not in text, f"{p.name}: use tests.helpers.host.FT"
        if p.parent.name != "vm" and p != Path(__file__):   # tests/vm imports its harness (kernels, vmguest)
            assert PATH_TRICK not in text, f"{p.name}: import from tests.helpers instead"
