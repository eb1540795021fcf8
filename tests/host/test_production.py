"""Production safety of `futextrace record` on the real kernel: nothing stays attached
after any way of ending, and bad input gets one line and the documented exit code.

Programs are compared by ID (`bpftool prog list` before, during, after), not by name:
other tools on the host may load programs with the same names meanwhile.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from futextrace.errors import EXIT_IO, EXIT_TARGET, EXIT_USAGE

from tests.helpers.host import FT as CLI
from tests.helpers.host import descendants, needs_bpf, programs_left, prog_ids, wait_until

pytestmark = [pytest.mark.root, needs_bpf]


@pytest.fixture(scope="module")
def workload():
    from futextrace.workload.build import workload_path
    return str(workload_path())


def _no_leftovers(ours: set[int]):
    """The programs our run added are gone (the kernel frees them shortly after the last fd)."""
    left = programs_left(ours, timeout=10)
    assert not left, f"BPF programs left attached: {sorted(left)}"


def _start(workload, seconds: float, before: set[int], preexec_fn=None):
    """Start a recording and return once its loop runs: the first -i line on stdout
    (the doctor's probe programs come and go earlier, during start-up)."""
    p = subprocess.Popen([*CLI, "record", "-i", "0.5", "--", workload, "-t", "2", "-r", str(seconds)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn)
    first = p.stdout.readline()
    assert "lookups/s" in first, p.stderr.read() if p.poll() is not None else first
    ours = prog_ids() - before
    assert ours, "futextrace runs but no program of its own is loaded"
    return p, ours


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=lambda s: s.name)
def test_signal_detaches_and_reports(workload, sig):
    before = prog_ids()
    p, ours = _start(workload, 60, before)
    kids = descendants(p.pid)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "Lookups:" in out and "Traceback" not in err
    assert not [k for k in kids if Path(f"/proc/{k}").exists()
                and "Z" not in Path(f"/proc/{k}/stat").read_text().split(") ")[-1][:1]], \
        "the traced command outlived the tracer"
    _no_leftovers(ours)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_signal_at_the_tracing_line_gives_the_recording(sig, tmp_path):
    """"Tracing..." promises that a stop signal now ends the run with its
    recording. Sent the moment the line is read, the signal used to land while the
    map reader's imports ran, before the handler: "futextrace: aborted", exit 130
    and nothing written (CI, stop 49, on a busy 2-CPU machine)."""
    sleeper = subprocess.Popen(["sleep", "60"])
    rec_path = tmp_path / "rec.json"
    try:
        p = subprocess.Popen([*CLI, "record", "-p", str(sleeper.pid), "--json", str(rec_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stderr.readline()
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        sleeper.kill()
    assert "Tracing" in line, line + err
    assert p.returncode == 0, err
    rec = json.loads(rec_path.read_text())
    assert rec["window"]["duration_ns"] > 0


def test_sighup_ignored_as_under_nohup_keeps_the_run(workload, tmp_path):
    """`nohup futextrace record ...`: a hangup must not end the run (here it
    ends at -d 5), as it ends one started without nohup."""
    out_json = tmp_path / "rec.json"
    p = subprocess.Popen([*CLI, "record", "-i", "0.5", "-d", "5", "--json", str(out_json), "--",
                          workload, "-t", "2", "-r", "60"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    first = p.stdout.readline()
    assert "lookups/s" in first, p.stderr.read() if p.poll() is not None else first
    p.send_signal(signal.SIGHUP)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    # The window counted is the one asked for: the hangup, ~0.5 s in, did not end it.
    assert json.loads(out_json.read_text())["duration_s"] > 4.9, err


def test_sigkill_leaves_nothing(workload):
    before = prog_ids()
    p, ours = _start(workload, 60, before)
    kids = descendants(p.pid)
    p.kill()
    p.wait(timeout=30)
    # The orphaned workload is ours to end (it also holds the pipe's write end).
    for k in kids:
        try:
            os.kill(k, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.communicate(timeout=30)
    _no_leftovers(ours)


def test_command_exit_detaches(workload):
    before = prog_ids()
    p = subprocess.Popen([*CLI, "record", "--", workload, "-t", "2", "-r", "3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ours = wait_until(lambda: prog_ids() - before, timeout=60)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "Lookups:" in out
    assert ours
    _no_leftovers(ours)


def test_live_view_rates_per_process(workload, tmp_path):
    """-i: every interval names the workload with its hash, and the intervals'
    lookups add up to the recording's total (the last, partial interval aside)."""
    lines, rec = tmp_path / "live.jsonl", tmp_path / "rec.json"
    p = subprocess.run([*CLI, "record", "-i", "0.5", "--jsonl", str(lines), "--json", str(rec), "--",
                        workload, "-t", "2", "-r", "3", "-b", "64"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(x) for x in lines.read_text().splitlines()]
    total = json.loads(rec.read_text())["totals"]["lookups"]
    wl_pid = json.loads(json.loads(rec.read_text())["command"]["stdout_tail"].strip().splitlines()[-1])["pid"]
    assert len(rows) >= 4
    busy = [r for r in rows if r["lookups"] > 100_000]
    assert len(busy) >= 3, rows
    for r in busy:
        top = r["processes"][0]
        assert (top["pid"], top["hash"]) == (wl_pid, "private 64"), r
        assert top["buckets_touched"] <= 64 and top["futexes"] >= 2
        assert abs(top["lookups_per_s"] * r["interval_s"] - top["lookups"]) < 1
    assert sum(r["lookups"] for r in rows) <= total
    assert sum(r["lookups"] for r in rows) >= 0.6 * total
    assert "PID" in p.stdout and "LOOKUPS/s" in p.stdout


@pytest.fixture
def not_a_recording(tmp_path):
    p = tmp_path / "other.json"
    p.write_text('{"schema": "something-else", "schema_version": 1}')
    return str(p)


BAD_INPUT = [
    ("missing-pid", ["record", "-p", "4194304", "-d", "1"], EXIT_TARGET, "no process with PID"),
    ("kernel-thread", ["record", "-p", "2", "-d", "1"], EXIT_TARGET, "kernel thread"),
    ("bad-cgroup", ["record", "--cgroup", "/no/such/cgroup", "-d", "1"], EXIT_TARGET,
     "not a cgroup v2 directory"),
    ("interval-0", ["record", "-i", "0", "-d", "1"], EXIT_USAGE, "interval"),
    ("interval-negative", ["record", "-i", "-1", "-d", "1"], EXIT_USAGE, "interval"),
    ("duration-0", ["record", "-d", "0"], EXIT_USAGE, "duration"),
    ("unwritable-output", ["record", "--json", "/nonexistent/x.json", "-d", "1"], EXIT_IO,
     "cannot write /nonexistent/x.json"),
    ("command-cannot-start", ["record", "--", "/nonexistent"], EXIT_TARGET, "cannot start"),
    ("not-a-recording", ["report", "{not_a_recording}"], EXIT_IO, "is not a futextrace recording"),
]


@pytest.mark.parametrize("name, args, code, words", BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_input_one_line(name, args, code, words, not_a_recording):
    args = [a.replace("{not_a_recording}", not_a_recording) for a in args]
    before = prog_ids()
    # Watch for programs while it runs: a failed start must not leave one behind either.
    p = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = set()
    while p.poll() is None:
        seen |= prog_ids() - before
        time.sleep(0.05)
    out, err = p.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert p.returncode == code, err
    assert len(lines) == 1, err
    assert lines[0].startswith("futextrace: error: ") and words in lines[0], lines[0]
    assert "Traceback" not in err
    _no_leftovers(seen)
    # The documented code is in --help.
    assert f"  {code}  " in subprocess.run([*CLI, args[0], "--help"], capture_output=True,
                                           text=True).stdout
