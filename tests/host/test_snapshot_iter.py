"""`futextrace snapshot` from the BPF task iterator, against the real kernel.

Every process is started BEFORE the tracer, one per case, and reports its own
state: PR_FUTEX_HASH_GET_SLOTS and the return of its own SET_SLOTS call, and
its thread count from /proc/self/task, read by the process itself after it
set itself up. Nothing expected here comes from futextrace's formulas.
"""
from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.helpers.holders import one_of_each, start
from tests.helpers.host import FT

pytestmark = pytest.mark.root
# Under QEMU/TCG (tests/vm) one command takes minutes (kernel model, BCC compile).
CLI_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def procs():
    with one_of_each() as ps:
        yield ps


def snapshot(*args) -> dict:
    p = subprocess.run([*FT, "snapshot", "--json", "-", *args], capture_output=True, text=True,
                       timeout=CLI_TIMEOUT_S)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def check_row(row: dict, own: dict, mode: str):
    assert row["threads"] == own["threads"]
    if mode in ("custom", "auto"):
        assert own["slots"] > 0 and (mode != "custom" or own["set"] == 0)
        assert (row["kind"], row["buckets"], row["mode"]) == ("private", own["slots"], mode)
        assert row["refcount"] == "per-cpu" and row["pending"] is None
    else:
        assert own["slots"] == 0
        assert row["kind"] == "global" and not row["buckets"]
        # Global by prctl only where the process's own SET_SLOTS(0) succeeded.
        assert row["mode"] == ("custom" if own["set"] == 0 else "auto")


def test_snapshot_reads_each_process_state_from_the_kernel(procs):
    snap = snapshot(*[a for p in procs.values() for a in ("-p", str(p.pid))])
    assert snap["method"] == "iterator"
    rows = {r["pid"]: r for r in snap["processes"]}
    for mode, p in procs.items():
        check_row(rows[p.pid], p.own, mode)
    threads = [r["threads"] for r in snap["processes"]]
    assert threads == sorted(threads, reverse=True)


def test_snapshot_without_pids_lists_hashed_and_global_by_prctl(procs):
    snap = snapshot()
    rows = {r["pid"]: r for r in snap["processes"]}
    for mode in ("custom", "auto", "global"):
        check_row(rows[procs[mode].pid], procs[mode].own, mode)
    assert procs["idle"].pid not in rows    # no private hash and no prctl: not listed
    threads = [r["threads"] for r in snap["processes"]]
    assert threads == sorted(threads, reverse=True)


def test_snapshot_text_has_the_columns(procs):
    p = subprocess.run([*FT, "snapshot", "-p", str(procs["custom"].pid)], capture_output=True,
                       text=True, timeout=CLI_TIMEOUT_S)
    assert p.returncode == 0, p.stderr
    head, row = p.stdout.splitlines()[:2]
    assert head.split() == ["PID", "COMM", "THREADS", "BUCKETS", "HASH", "REFCOUNT", "PENDING"]
    assert row.split()[0] == str(procs["custom"].pid) and " 64 " in row and "custom" in row


def test_snapshot_bad_pid_is_one_line():
    p = subprocess.run([*FT, "snapshot", "-p", "999999999"], capture_output=True, text=True,
                       timeout=CLI_TIMEOUT_S)
    assert p.returncode == 4 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def test_watch_sees_a_process_come_and_go_from_proc_events():
    """The exit status in the "gone" line exists only in the proc connector's
    exit event: a poll of /proc cannot know it."""
    w = subprocess.Popen([*FT, "snapshot", "--watch", "-d", "40", "-i", "60", "--json", "-"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(w.stdout.readline())
        assert "proc connector" in first["why"] and not first["why"].startswith("polling"), first["why"]
        p = start("custom", 32, exit_after=1.5, code=3)
        seen = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "gone" not in seen:
            ev = json.loads(w.stdout.readline())
            if ev["pid"] == p.pid:
                seen.setdefault(ev["change"], ev)
        p.wait()
        assert (seen["new"]["buckets"], seen["new"]["mode"]) == (p.own["slots"], "custom")
        assert seen["gone"]["exit_status"] >> 8 == p.returncode == 3
        # Re-read on the events, not on the 60 s period (slack for a loaded machine).
        assert seen["gone"]["t"] - seen["new"]["t"] < 20
    finally:
        w.kill()
        w.wait()


def test_record_notices_the_target_exit_with_its_status():
    """The status in the note exists only in the proc connector's exit event."""
    p = start("auto", 2, code=5)
    r = subprocess.Popen([*FT, "record", "-p", str(p.pid), "-d", "900", "-i", "0.5", "-q"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        r.stdout.readline()              # the first live line: attached and watching
        t0 = time.monotonic()
        p.stdin.close()                  # the target exits now
        _out, err = r.communicate(timeout=CLI_TIMEOUT_S)
        took = time.monotonic() - t0
    finally:
        r.kill()
        p.kill()
        p.wait()
    assert r.returncode == 0, err       # the recording is complete: a normal end, with a note
    assert f"futextrace: note: PID {p.pid} exited during tracing (exit status 5)" in err
    assert took < 300, took              # not the 900 s duration


def test_snapshot_falls_back_to_watching_where_iterators_are_refused(procs):
    from futextrace.kernel import model as kmodel
    from futextrace.output.text.hashes_text import render
    from futextrace.snapshot.hashes import read_hashes
    model = kmodel.load()
    model.iter_btf_ids = {}       # as on a kernel whose BTF has no bpf_iter_task
    snap = read_hashes([procs["custom"].pid], duration=0.5, model=model)
    assert snap["method"] == "watch"
    assert "task iterator is unavailable (no bpf_iter_task" in snap["why"]
    assert [r["pid"] for r in snap["processes"]] == [procs["custom"].pid]
    assert "watched futex calls" in render(snap)
