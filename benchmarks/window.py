#!/usr/bin/env python3
"""Is the reported window the counted one? recorded / the workload's own calls.

A steady C workload (tests/host/test_window.py's, one FUTEX_WAKE per ms, each
call's CLOCK_MONOTONIC stamps logged) runs; `futextrace record -p PID -d 1`
records it; the figure is the lookups recorded for it divided by the calls the
workload logged inside the reported window [monotonic_start_ns, + duration_s].
1.000 is right; above 1 the window is shorter than what was counted (rates
overstated). Idle, then with two busy-loop processes. Each TREE (a checkout,
default this one) runs with PYTHONPATH=TREE, so an older tree can be compared
side by side on the same host.

    sudo .venv/bin/python benchmarks/window.py [--runs 3] [TREE ...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.helpers.window import STEADY_C, calls  # noqa: E402


def one(tree: str, exe: Path, tmp: Path, busy: bool) -> tuple[int, int, float]:
    log, out = tmp / "calls.bin", tmp / "rec.json"
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 2)] if busy else []
    wl = subprocess.Popen([str(exe), str(log), "120", "1000"])
    try:
        time.sleep(0.3)
        subprocess.run([sys.executable, "-m", "futextrace.cli", "record", "-q", "--json", str(out),
                        "-p", str(wl.pid), "-d", "1"], env={**os.environ, "PYTHONPATH": tree}, cwd=tree,
                       check=True, capture_output=True)
    finally:
        wl.kill()
        wl.wait()
        for h in hogs:
            h.kill()
            h.wait()
    rec = json.loads(out.read_text())
    got = next(p["lookups"] for p in rec["processes"] if p["pid"] == wl.pid)
    start = rec["monotonic_start_ns"]
    end = start + rec["duration_s"] * 1e9
    own = sum(1 for before, after in calls(log) if before >= start and after <= end)
    return got, own, rec["duration_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("trees", nargs="*", default=[str(REPO)])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ft-window-") as d:
        tmp = Path(d)
        (tmp / "steady.c").write_text(STEADY_C)
        subprocess.run(["cc", "-O2", "-o", str(tmp / "steady"), str(tmp / "steady.c")], check=True)
        for tree in args.trees:
            for busy in (False, True):
                res = [one(tree, tmp / "steady", tmp, busy) for _ in range(args.runs)]
                cells = " ".join(f"{g}/{o}={g / o:.3f} (d {s:.3f} s)" for g, o, s in res)
                print(f"{tree} {'busy' if busy else 'idle'}: {cells}", flush=True)


if __name__ == "__main__":
    main()
