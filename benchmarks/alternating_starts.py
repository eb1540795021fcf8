#!/usr/bin/env python3
"""Warm starts of `serve -p PID` and `serve` taken in turn: seconds from the
command's start to "serving".

Each shape (the command and its option names) has its own early maps and
programs hint (loading/earlymaps.py). Keyed by the command alone, each of these
starts found the other shape's hint and took the early programs of another
cache entry, which it closed and loaded again: 0.33-0.35 s a start where the
same start repeated took 0.17-0.18 (benchmarks/results/alternating-starts-*.txt).

    sudo .venv/bin/python benchmarks/alternating_starts.py --starts 8

It runs `python -m futextrace.cli` from the current directory, so running it
from another checkout measures that checkout. One unmeasured start of each
shape first, so every start measured is warm. Not a test: it prints figures.
"""
from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from footprint import free_port  # noqa: E402  (footprint.py's own)


def start(extra: list[str]) -> float | None:
    """Seconds from Popen to the "serving" line; the exporter is then stopped."""
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "futextrace.cli", "serve", "--listen", f"127.0.0.1:{free_port()}",
                          *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = None
    try:
        for line in p.stderr:
            if "serving" in line:
                took = time.monotonic() - t0
                break
        time.sleep(0.3)
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
    time.sleep(0.5)
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--starts", type=int, default=8, help="measured starts of each shape")
    a = ap.parse_args()
    sleeper = subprocess.Popen(["sleep", "3600"])
    shapes = {"serve -p": ["-p", str(sleeper.pid)], "serve": []}
    took: dict[str, list] = {name: [] for name in shapes}
    try:
        for extra in shapes.values():
            start(extra)
        for _ in range(a.starts):
            for name, extra in shapes.items():
                took[name].append(start(extra))
    finally:
        sleeper.kill()
        sleeper.wait()
    for name, times in took.items():
        if None in times:
            print(f"{name}: a start never said 'serving'")
            return 1
        print(f"{name:9s} median {statistics.median(times):.3f} min {min(times):.3f} max {max(times):.3f} s:  "
              + " ".join(f"{t:.3f}" for t in times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
