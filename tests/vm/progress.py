"""Which in-guest test ran, finished or hung: a line per test start and finish.

In the guest, pytest loads this file as a plugin (`-p progress`) and appends to
$FUTEXTRACE_PROGRESS as each test starts and ends, flushed at once: junit.xml is
written only when pytest ends, so a guest killed at its time limit leaves none,
but the progress file still tells which test was running and for how long.

    session <monotonic s>                      once, when pytest starts
    start <monotonic s> <nodeid>
    end <monotonic s> <outcome> <nodeid>       outcome: passed, failed, skipped, error

On the host, `read_progress` turns that file into a `Progress` (what finished,
with durations; what started and never ended).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

ENV = "FUTEXTRACE_PROGRESS"


# --- the in-guest plugin ------------------------------------------------------
class _Writer:
    def __init__(self, path: str):
        self.f = open(path, "a", buffering=1)      # line-buffered: each line reaches the host

    def line(self, *words) -> None:
        self.f.write(" ".join(str(w) for w in words) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())


_writer: _Writer | None = None


def pytest_configure(config):
    global _writer
    path = os.environ.get(ENV)
    if path:
        _writer = _Writer(path)
        _writer.line("session", f"{time.monotonic():.3f}")


def pytest_runtest_logstart(nodeid, location):
    if _writer:
        _writer.line("start", f"{time.monotonic():.3f}", nodeid)


def pytest_runtest_logreport(report):
    """One `end` per test: its first failing phase, or its call's outcome."""
    if not _writer:
        return
    failed = report.outcome == "failed"
    if report.when == "call" or (report.when == "setup" and (failed or report.outcome == "skipped")) \
            or (report.when == "teardown" and failed):
        outcome = report.outcome if report.when == "call" or not failed else "error"
        _writer.line("end", f"{time.monotonic():.3f}", outcome, report.nodeid)


# --- the host-side reader -------------------------------------------------------
@dataclass
class Progress:
    finished: list[tuple[str, str, float]] = field(default_factory=list)   # (nodeid, outcome, s)
    running: list[tuple[str, float]] = field(default_factory=list)         # (nodeid, started at)
    session_start: float | None = None

    def hung(self) -> str | None:
        """'<nodeid> (started N s into the run)' for the last test that started and never ended."""
        if not self.running:
            return None
        nodeid, t0 = self.running[-1]
        when = f"{t0 - self.session_start:.0f} s into the run" if self.session_start is not None else "?"
        return f"{nodeid} (started {when}, never finished)"

    def slowest(self, n: int = 10) -> list[tuple[str, str, float]]:
        return sorted(self.finished, key=lambda f: -f[2])[:n]

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for _, outcome, _ in self.finished:
            counts[outcome] = counts.get(outcome, 0) + 1
        done = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "none"
        hung = self.hung()
        return f"tests finished: {done}" + (f"; still running: {hung}" if hung else "")


def parse_progress(text: str) -> Progress:
    """Tolerates a torn last line (the guest may die mid-write)."""
    prog, started = Progress(), {}
    for line in text.splitlines():
        kind = line.split(" ", 1)[0]
        # A node ID may hold spaces (parametrize IDs): split off only the fields before it.
        parts = line.split(" ", {"session": 1, "start": 2, "end": 3}.get(kind, 0))
        try:
            t = float(parts[1])
        except (IndexError, ValueError):
            continue
        if kind == "session" and len(parts) == 2:
            prog.session_start = t
        elif kind == "start" and len(parts) == 3:
            started[parts[2]] = t
        elif kind == "end" and len(parts) == 4:
            t0 = started.pop(parts[3], t)
            prog.finished.append((parts[3], parts[2], t - t0))
    prog.running = sorted(started.items(), key=lambda kv: kv[1])
    return prog


def read_progress(path: Path) -> Progress | None:
    return parse_progress(path.read_text(errors="replace")) if path.exists() else None
