"""The window a recording reports is the window it counted (issue 27, item 3).

A steady workload, written here in C, makes one FUTEX_WAKE every PERIOD_US and
logs each call's CLOCK_MONOTONIC stamps taken just before and just after the
syscall. The expected count is the workload's own: the calls whose syscall
falls inside the recording's `window` (docs/json-schema.md). A lookup is
counted at sys_enter, which lies between a call's two stamps, and counting
began somewhere inside the window's start bracket and ended inside its end
bracket, so

    sure     = calls with before >= start_hi and after <= end_lo
    possible = calls with after >= start_lo and before <= end_hi

must hold sure <= recorded <= possible. The brackets are one attach or detach
syscall (tens of microseconds), so possible - sure is a call or two, checked
too: a window stretched by the 0.2-1 s between the attach and the start of the
old poll loop (100-500 extra calls at this rate) fails by a wide margin. Run
on the idle host and with both CPUs held by busy loops, for -p, -- COMMAND,
--comm and the first -i interval.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.host import FT, in_vm_guest, limit, needs_bpf, needs_private_hash
from tests.helpers.window import STEADY_C, calls

pytestmark = [pytest.mark.root, needs_bpf, needs_private_hash]

PERIOD_US = 1000          # 1000 calls a second
# Ambiguous calls beyond the brackets' own: a call preempted between its stamp
# and its syscall at each edge and, with every CPU busy, the missed periods that
# clock_nanosleep(TIMER_ABSTIME) then fires back to back (CI saw 5 against 4).
# Still far below the 100-500 calls of a window stretched by the start-up gap.
SLACK = 8
# An attach or detach taking longer than 50 ms is a defect on a real CPU; -d 1
# may overshoot by a poll's wake-up and the detach. Single-threaded QEMU/TCG
# guests (tests/vm) run everything 10x slower or worse (conftest.limit).
SLOW = 10 if in_vm_guest() else 1
BRACKET_MAX_NS = 50_000_000 * SLOW
OVERSHOOT_S = 0.15 * SLOW

@pytest.fixture(scope="module")
def steady(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("steady")
    src, exe = d / "ftsteady.c", d / "ftsteady"
    src.write_text(STEADY_C)
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src)], check=True)
    return exe


@pytest.fixture(params=["idle", "busy"])
def load(request):
    """Nothing, or one busy loop per online CPU (both CPUs on the build machines)."""
    procs = []
    if request.param == "busy":
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                 for _ in range(os.cpu_count() or 2)]
        time.sleep(0.3)
    yield request.param
    for p in procs:
        p.kill()
        p.wait()


def bounds(log: Path, start: list[int], end: list[int]) -> tuple[int, int]:
    """(sure, possible): the workload's calls inside the window, from its own log."""
    cs = calls(log)
    sure = sum(1 for b, a in cs if b >= start[1] and a <= end[0])
    possible = sum(1 for b, a in cs if a >= start[0] and b <= end[1])
    return sure, possible


def run(args, timeout=120) -> subprocess.CompletedProcess:
    p = subprocess.run([*FT, "record", "-q", *args], capture_output=True, text=True,
                       timeout=limit(timeout))
    assert "Traceback" not in p.stderr, p.stderr
    return p


def check(rec: dict, pid: int, log: Path, want_s: float | None, ran_from_start: bool = True) -> None:
    w = rec["window"]
    recorded = next((p["lookups"] for p in rec["processes"] if p["pid"] == pid), 0)
    sure, possible = bounds(log, w["start_ns"], w["end_ns"])
    what = (f"recorded {recorded}, the workload's own log: {sure}..{possible} calls in the window "
            f"{w}")
    assert sure <= recorded <= possible, what
    # Tight: only the calls inside the two brackets (each one attach or detach
    # syscall: tens of microseconds idle, a few ms when the kernel waits for an
    # RCU grace period on a busy host) and a preempted call at each edge are
    # ambiguous; each bracket is far below the 0.2-1 s the old window was off by.
    widths = [(b[1] - b[0]) for b in (w["start_ns"], w["end_ns"])]
    assert max(widths) < BRACKET_MAX_NS, what
    assert possible - sure <= SLACK + sum(x // (PERIOD_US * 1000) + 1 for x in widths), what
    # duration_s is that window: its brackets' middles.
    mid = lambda b: (b[0] + b[1]) / 2   # noqa: E731
    assert rec["duration_s"] == pytest.approx((mid(w["end_ns"]) - mid(w["start_ns"])) / 1e9, abs=1e-6)
    assert rec["monotonic_start_ns"] == pytest.approx(mid(w["start_ns"]), abs=1)
    if want_s is not None:   # -d 1 counts for 1 s, not 1 s plus the start-up
        assert want_s <= rec["duration_s"] < want_s + OVERSHOOT_S, rec["duration_s"]
    # The workload really ran (a launched command only from its exec on).
    assert sure > (0.5 * rec["duration_s"] * 1e6 / PERIOD_US if ran_from_start else 100), what


def test_window_pid(steady, load, tmp_path):
    log, out = tmp_path / "calls.bin", tmp_path / "rec.json"
    wl = subprocess.Popen([str(steady), str(log), "60", str(PERIOD_US)])
    try:
        p = run(["--json", str(out), "-p", str(wl.pid), "-d", "1"])
        assert p.returncode == 0, p.stderr
    finally:
        wl.kill()
        wl.wait()
    check(json.loads(out.read_text()), wl.pid, log, 1.0)


def test_window_command(steady, load, tmp_path):
    """-- COMMAND, stopped by -d: the command starts after the attach; the window
    still starts at the attach and ends at the detach."""
    log, out = tmp_path / "calls.bin", tmp_path / "rec.json"
    p = run(["--json", str(out), "-d", "2", "--", str(steady), str(log), "60", str(PERIOD_US)])
    assert p.returncode == 0, p.stderr
    rec = json.loads(out.read_text())
    check(rec, rec["command"]["pid"], log, 2.0, ran_from_start=False)


def test_window_comm(steady, load, tmp_path):
    log, out = tmp_path / "calls.bin", tmp_path / "rec.json"
    wl = subprocess.Popen([str(steady), str(log), "60", str(PERIOD_US)])
    try:
        p = run(["--json", str(out), "--comm", steady.name, "-d", "1"])
        assert p.returncode == 0, p.stderr
    finally:
        wl.kill()
        wl.wait()
    check(json.loads(out.read_text()), wl.pid, log, 1.0)


def test_first_interval(steady, load, tmp_path):
    """The first -i row counts from the attach, like the others: its end is the
    middle of its map read (row t, from t = 0), read_s long."""
    log, out, rows = tmp_path / "calls.bin", tmp_path / "rec.json", tmp_path / "rows.jsonl"
    wl = subprocess.Popen([str(steady), str(log), "60", str(PERIOD_US)])
    try:
        p = run(["--json", str(out), "--jsonl", str(rows), "-p", str(wl.pid), "-d", "1.3", "-i", "0.5"])
        assert p.returncode == 0, p.stderr
    finally:
        wl.kill()
        wl.wait()
    rec = json.loads(out.read_text())
    first = json.loads(rows.read_text().splitlines()[0])
    assert first["interval_s"] == pytest.approx(first["t"], abs=1e-3)
    t0 = rec["window"]["t0_ns"]
    # t is rounded to 1 ms: widen the read by that on each side.
    mid = t0 + first["t"] * 1e9
    half = first["read_s"] * 1e9 / 2 + 1e6
    end = [int(mid - half), int(mid + half)]
    recorded = next((r["lookups"] for r in first["processes"] if r["pid"] == wl.pid), 0)
    sure, possible = bounds(log, rec["window"]["start_ns"], end)
    what = f"first row {recorded}, the workload's own log: {sure}..{possible}; row {first}"
    assert sure <= recorded <= possible, what
    assert possible - sure <= SLACK + 2 + first["read_s"] * 1e6 / PERIOD_US, what
    # The tick is 0.5 s after the attach, never before; a starved poll loop may
    # wake late (the row then says so in t and interval_s, as checked above).
    assert 0.5 <= first["t"] < 1.0 + 0.5 * (SLOW - 1), first


def test_ctrl_c_window(steady, tmp_path):
    """SIGINT ends the recording: the window still ends at the detach."""
    log, out = tmp_path / "calls.bin", tmp_path / "rec.json"
    wl = subprocess.Popen([str(steady), str(log), "60", str(PERIOD_US)])
    try:
        rec_p = subprocess.Popen([*FT, "record", "-q", "--json", str(out), "-p", str(wl.pid)],
                                 stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + limit(60)
        while "Tracing" not in (line := rec_p.stderr.readline()) and time.monotonic() < deadline:
            assert line, "record ended before attaching"
        time.sleep(0.7)
        rec_p.send_signal(signal.SIGINT)
        assert rec_p.wait(timeout=limit(60)) == 0, rec_p.stderr.read()
    finally:
        wl.kill()
        wl.wait()
    check(json.loads(out.read_text()), wl.pid, log, None)
