"""`record -- CMD` passes the command's stdout and stderr through, live and in
order, says when it has attached, reports the command's status and how long
attaching took, and can run the tracer at a real-time priority."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.host import FT

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="needs BTF")]

TRACING = "Tracing futex hash lookups... Hit Ctrl-C to end."

# Interleaves the two streams with pauses, so each line is written on its own.
SCRIPT = """
for i in 1 2 3 4 5; do echo "out $i"; echo "err $i" >&2; sleep 0.05; done
exit 7
"""


def test_command_output_passes_through_in_order(tmp_path):
    rec = tmp_path / "rec.json"
    p = subprocess.run([*FT, "record", "--json", str(rec), "--", "sh", "-c", SCRIPT],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out, err = p.stdout.splitlines(), p.stderr.splitlines()
    assert out[:5] == [f"out {i}" for i in range(1, 6)], p.stdout
    assert "Lookups:" in p.stdout            # our summary comes after the command's output
    # Ours first (attached before the command ran), then the command's, then its status.
    assert err[0] == TRACING, p.stderr
    assert err[1:6] == [f"err {i}" for i in range(1, 6)], p.stderr
    assert err[6:] == ["futextrace: sh exited with status 7"], p.stderr
    data = json.loads(rec.read_text())
    assert data["command"]["exit_status"] == 7
    assert data["command"]["stdout_tail"] == "".join(f"out {i}\n" for i in range(1, 6))


def test_stdout_tail_is_bounded(tmp_path):
    """Only the last 4 KiB of a long output is kept; all of it is passed on."""
    rec = tmp_path / "rec.json"
    script = "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done"
    p = subprocess.run([*FT, "record", "-q", "--json", str(rec), "--", "sh", "-c", script],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [f"line-{i}" for i in range(2000)]
    tail = json.loads(rec.read_text())["command"]["stdout_tail"]
    assert len(tail.encode()) == 4096 and tail.endswith("line-1999\n")


def test_attach_time_in_the_recording(tmp_path):
    rec = tmp_path / "rec.json"
    p = subprocess.run([*FT, "record", "-q", "--json", str(rec), "--", "true"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    data = json.loads(rec.read_text())
    phases = data["attach_phases_s"]
    assert set(phases) == {"startup", "model", "compile", "attach"}
    assert all(v >= 0 for v in phases.values())
    # attach_s runs from the process's start: it covers every phase.
    assert sum(phases.values()) <= data["attach_s"] + 0.05
    assert 0 < data["attach_s"] < 120
    assert isinstance(data["kernel"]["model_cached"], bool)


def test_model_cache_is_used_and_equal(tmp_path):
    """Second run of the same boot reads the model from the cache, and it is
    the model a fresh build gives."""
    from futextrace.kernel import model as kmodel
    cache = tmp_path / "cache"
    env = {**os.environ, "FUTEXTRACE_CACHE": str(cache)}
    for expect_cached in (False, True):
        rec = tmp_path / "rec.json"
        p = subprocess.run([*FT, "record", "-q", "--json", str(rec), "--", "true"],
                           capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stderr
        assert json.loads(rec.read_text())["kernel"]["model_cached"] is expect_cached
    cached = list((cache / "model").glob("*.json"))
    assert len(cached) == 1
    fresh = kmodel.load().to_dict()
    kept = json.loads(cached[0].read_text())
    kept["topology"] = fresh["topology"]         # re-read on every use, never from the cache
    assert kept == fresh


def test_damaged_model_cache_is_rebuilt(tmp_path, monkeypatch):
    from futextrace.kernel import modelcache
    monkeypatch.setenv("FUTEXTRACE_CACHE", str(tmp_path))
    key = modelcache.cache_key()
    (tmp_path / "model").mkdir(exist_ok=True)     # the BTF digest may be kept there already
    (tmp_path / "model" / f"{key}.json").write_text('{"release": ')
    model, cached = modelcache.load_running()
    assert not cached and model.private_hash is not None
    _, cached = modelcache.load_running()
    assert cached


def test_rt_priority_runs_tracer_fifo_command_normal(tmp_path):
    """--rt-priority: the tracer runs SCHED_FIFO, the traced command does not
    inherit it (SCHED_RESET_ON_FORK)."""
    probe = ("import os; print(os.sched_getscheduler(0), "
             "open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[38])")
    p = subprocess.run([*FT, "record", "-q", "--rt-priority", "10", "--", sys.executable, "-c", probe],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    own, parent = p.stdout.split()
    assert int(own) == os.SCHED_OTHER
    assert int(parent) == os.SCHED_FIFO


def test_rt_priority_out_of_range():
    p = subprocess.run([*FT, "record", "--rt-priority", "100", "--", "true"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == ["futextrace: error: --rt-priority must be between 1 and 99"]


def test_missing_command_fails_before_attaching():
    """A plainly missing command fails before anything is compiled or attached."""
    p = subprocess.run([*FT, "record", "--", "/nonexistent/cmd"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 4
    assert p.stderr.strip().splitlines() == [
        "futextrace: error: cannot start '/nonexistent/cmd': no such executable file"]


SPIN = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass"
SPIN_S = 40     # the spinner's own limit; each test ends it as soon as it can


def _start_rt_spinner() -> subprocess.Popen:
    """A SCHED_FIFO thread spinning on CPU 0 (the tracer is pinned there too)."""
    return subprocess.Popen(["chrt", "-f", "10", "taskset", "-c", "0", sys.executable, "-c",
                             SPIN.format(s=SPIN_S)])


def _record_on_cpu0(extra: list[str]) -> subprocess.Popen:
    return subprocess.Popen(["taskset", "-c", "0", *FT, "record", "-q", *extra, "--", "true"],
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.skipif(not shutil.which("chrt") or not shutil.which("taskset"), reason="needs util-linux")
def test_rt_threads_holding_every_cpu_are_named():
    """The tracer starved by a real-time thread says what it waits for."""
    spinner = _start_rt_spinner()
    try:
        p = _record_on_cpu0([])
        first = p.stderr.readline()
    finally:
        spinner.kill()
        spinner.wait()
    rest = p.communicate(timeout=120)[1]
    assert p.returncode == 0, first + rest
    # Counted from the process's start: the imports are most of a starved start.
    assert re.search(r"still compiling/attaching after \d+ s: 1 runnable SCHED_FIFO/RR threads", first), first
    assert "--rt-priority" in first


@pytest.mark.skipif(not shutil.which("chrt") or not shutil.which("taskset"), reason="needs util-linux")
def test_rt_priority_attaches_beside_rt_threads():
    """With --rt-priority above the spinner's, the tracer attaches and ends
    while the spinner still holds the CPU."""
    spinner = _start_rt_spinner()
    try:
        p = _record_on_cpu0(["--rt-priority", "20"])
        err = p.communicate(timeout=SPIN_S + 60)[1]
        still_spinning = spinner.poll() is None
    finally:
        spinner.kill()
        spinner.wait()
    assert p.returncode == 0, err
    assert "still compiling" not in err, err
    assert still_spinning, "the tracer only finished once the real-time spinner had ended"


def test_json_on_stdout_sends_the_command_output_to_stderr():
    """`--json -`: our stdout is the recording, parseable as one JSON document;
    the command's stdout still reaches the user, on stderr, and its tail is kept."""
    p = subprocess.run([*FT, "record", "--json", "-", "-q", "--", "sh", "-c", SCRIPT],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["command"]["stdout_tail"].splitlines() == [f"out {i}" for i in range(1, 6)]
    err = p.stderr.splitlines()
    assert [line for line in err if line.startswith("out ")] == [f"out {i}" for i in range(1, 6)], p.stderr
    assert [line for line in err if line.startswith("err ")] == [f"err {i}" for i in range(1, 6)], p.stderr
