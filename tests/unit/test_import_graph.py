"""futextrace's import graph (scripts/import-cycles.py): no cycle between its
modules, and no import of a futextrace module hidden inside a function, save
the few listed with a reason (matplotlib, for pictures only)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from tests.helpers.importgraph import ROOT, SCRIPT, load_script

def test_tree_has_no_cycle_and_no_hidden_import():
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr


def test_allowed_imports_have_reasons_and_exist():
    ic = load_script()
    _, hidden = ic.graph()
    present = {(m, t) for m, t, _ in hidden}
    for edge, reason in ic.ALLOWED.items():
        assert reason.strip(), edge
        assert edge in present, f"{edge} is allowed but no longer imported inside a function"


def write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_cycle_and_a_hidden_import_are_found(tmp_path):
    # a -> sub.b at the top, sub.b -> a inside a function (relative), c -> a inside a function.
    write(tmp_path, "futextrace/__init__.py", "")
    write(tmp_path, "futextrace/a.py", "from futextrace.sub import b\n")
    write(tmp_path, "futextrace/sub/__init__.py", "")
    write(tmp_path, "futextrace/sub/b.py", "def f():\n    from .. import a\n    return a\n")
    write(tmp_path, "futextrace/c.py", "import os\n\n\ndef g():\n    import futextrace.a\n")
    found = load_script().problems(tmp_path)
    assert "cycle: futextrace.a -> futextrace.sub.b -> futextrace.a" in found
    assert "function-level import: futextrace.sub.b line 2 imports futextrace.a" in found
    assert "function-level import: futextrace.c line 5 imports futextrace.a" in found
    assert len(found) == 3, found


def test_a_layered_package_passes(tmp_path):
    write(tmp_path, "futextrace/__init__.py", "")
    write(tmp_path, "futextrace/low.py", "import json\n\n\ndef f():\n    import matplotlib\n")
    write(tmp_path, "futextrace/high.py", "from futextrace import low\nfrom futextrace.low import f\n")
    ic = load_script()
    assert ic.problems(tmp_path) == []
    edges, hidden = ic.graph(tmp_path)
    assert edges["futextrace.high"] == {"futextrace.low"} and hidden == []


def test_analysis_imports_nothing_above_it():
    """analysis/ returns data: the packages that word, record or serve it sit above it."""
    edges, _ = load_script().graph()
    above = ("futextrace.output", "futextrace.record", "futextrace.snapshot", "futextrace.export",
             "futextrace.commands", "futextrace.bench")
    def inside(name, packages):   # futextrace.recording is not inside futextrace.record
        return any(name == p or name.startswith(p + ".") for p in packages)
    up = sorted((m, t) for m, ts in edges.items() if inside(m, ("futextrace.analysis",))
                for t in ts if inside(t, above))
    assert up == []


# docs/architecture.md: imports go down. Packages in one row import nothing of each other.
LAYERS = [("commands",), ("bench",), ("export", "output"), ("snapshot",), ("record",), ("acting", "analysis", "naming"),
          ("procs",), ("loading",), ("kernel",), ("workload",)]


def test_packages_import_only_below_them():
    edges, _ = load_script().graph()
    rank = {pkg: i for i, row in enumerate(LAYERS) for pkg in row}

    def package(module):
        parts = module.split(".")
        return parts[1] if len(parts) > 2 or parts[1:2] and parts[1] in rank else None
    found = {package(m) for m in edges} - {None}
    assert found == set(rank), f"packages not in LAYERS: {found ^ set(rank)}"
    up = sorted((m, t) for m, ts in edges.items() for t in ts
                if package(m) and package(t) and package(m) != package(t)
                and rank[package(t)] <= rank[package(m)])
    assert up == []


def test_output_imports_nothing_above_it():
    """output/ words and draws what it is given: it imports no recording machinery
    (record/), no benchmark (bench/), no exporter and no command. The constants both
    sides share sit below it (recording.BUCKET_NOT_VISIBLE, loading.iterator.ITERATOR,
    output/text/bench_text.ramp_warning for bench/ramp.py and output/plots/ramp.py)."""
    edges, _ = load_script().graph()
    above = ("futextrace.record", "futextrace.bench", "futextrace.export", "futextrace.commands")
    def inside(name, packages):   # futextrace.recording is not inside futextrace.record
        return any(name == p or name.startswith(p + ".") for p in packages)
    up = sorted((m, t) for m, ts in edges.items() if inside(m, ("futextrace.output",))
                for t in ts if inside(t, above))
    assert up == []
