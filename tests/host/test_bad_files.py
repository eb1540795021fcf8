"""Inputs and outputs that hurt: special files given to `report`, full disks,
a closed stdout and a broken pipe under `record`. Each gets one
`futextrace: error:` line with the documented exit code, no traceback, and
leaves no BPF program of ours loaded (compared by ID, see test_production.py).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from futextrace.errors import EXIT_IO

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not shutil.which("bpftool"), reason="needs bpftool"),
              pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="needs BTF")]

CLI = f"{sys.executable} -m futextrace.cli"
ERROR = "futextrace: error: "


def prog_ids() -> set[int]:
    out = subprocess.run(["bpftool", "-j", "prog", "list"], capture_output=True, text=True,
                         check=True).stdout
    return {p["id"] for p in json.loads(out or "[]")}


def run_watched(shell_cmd: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, set[int]]:
    """Run `shell_cmd` (bash, for redirections and pipes); return its result and
    every program that appeared while it ran (the candidates for leftovers)."""
    before = prog_ids()
    p = subprocess.Popen(["bash", "-c", shell_cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    seen: set[int] = set()
    end = time.monotonic() + timeout
    while p.poll() is None and time.monotonic() < end:
        seen |= prog_ids() - before
        time.sleep(0.05)
    out, err = p.communicate(timeout=10)
    return subprocess.CompletedProcess(shell_cmd, p.returncode, out, err), seen


def assert_one_error(res: subprocess.CompletedProcess, code: int, words: str, seen: set[int]):
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith(ERROR)]
    assert res.returncode == code, res.stderr
    assert "Traceback" not in res.stderr and "Exception" not in res.stderr, res.stderr
    assert len(errors) == 1 and words in errors[0], res.stderr
    # Besides the error, at most the "Tracing..." line of a run that had attached.
    others = [ln for ln in res.stderr.splitlines() if not ln.startswith(ERROR)]
    assert all(ln.startswith("Tracing futex hash lookups") for ln in others), res.stderr
    left = seen & prog_ids()
    for _ in range(100):
        if not left:
            break
        time.sleep(0.1)
        left &= prog_ids()
    assert not left, f"BPF programs left loaded: {sorted(left)}"


@pytest.fixture(scope="module")
def workload():
    from futextrace.workload.build import workload_path
    return str(workload_path())


@pytest.fixture
def special(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    sparse = tmp_path / "huge.json"
    with open(sparse, "wb") as f:
        f.truncate(4 << 30)          # 4 GiB of hole: over the cap, costs no disk
    return {"/dev/zero": "/dev/zero", "fifo": str(fifo), "directory": str(tmp_path),
            "huge": str(sparse)}


@pytest.mark.parametrize("which, words", [
    ("/dev/zero", "is a character device"),
    ("fifo", "is a FIFO"),
    ("directory", "is a directory"),
    ("huge", "MiB, more than the"),
])
def test_report_refuses_special_files(special, which, words):
    """Refused at once: no read of /dev/zero until memory runs out, no wait for a FIFO writer."""
    t0 = time.monotonic()
    res, seen = run_watched(f"{CLI} report {special[which]}", timeout=30)
    assert time.monotonic() - t0 < 20
    assert_one_error(res, EXIT_IO, words, seen)


def test_jsonl_full_disk_keeps_the_recording(workload, tmp_path):
    """--jsonl to a full disk ends the run at the first interval; the --json
    recording of what was traced until then is still written."""
    rec = tmp_path / "rec.json"
    res, seen = run_watched(f"{CLI} record -q -i 0.5 --jsonl /dev/full --json {rec} -- "
                            f"{workload} -t 2 -r 30")
    assert_one_error(res, EXIT_IO, "cannot write /dev/full: No space left on device", seen)
    data = json.loads(rec.read_text())
    assert data["duration_s"] < 20 and data["totals"]["lookups"] > 0


def test_json_full_disk():
    res, seen = run_watched(f"{CLI} record -q --json /dev/full -- true")
    assert_one_error(res, EXIT_IO, "cannot write /dev/full: No space left on device", seen)


def test_summary_to_full_disk():
    res, seen = run_watched(f"{CLI} record -- true >/dev/full")
    assert_one_error(res, EXIT_IO, "cannot write stdout: No space left on device", seen)


def test_closed_stdout_fails_before_attaching():
    res, seen = run_watched(f"{CLI} record -- true >&-")
    assert_one_error(res, EXIT_IO, "stdout is closed", seen)
    assert not seen, "it attached although nothing could be shown"


def test_closed_stdout_is_fine_with_quiet_json(tmp_path):
    """-q --json FILE shows nothing on stdout; the command's own output is dropped
    and never lands in the JSON file (which could take the free fd 1)."""
    rec = tmp_path / "rec.json"
    res, _ = run_watched(f"{CLI} record -q --json {rec} -- echo marker-text >&-")
    assert res.returncode == 0, res.stderr
    text = rec.read_text()
    assert text.startswith("{"), text[:100]
    assert json.loads(text)["command"]["stdout_tail"] == "marker-text\n"


def test_broken_pipe_keeps_the_recording(workload, tmp_path):
    """`| head -c1` while the live view prints: the run ends, --json is kept."""
    rec = tmp_path / "rec.json"
    res, seen = run_watched(f"set -o pipefail; {CLI} record -i 0.5 --json {rec} -- "
                            f"{workload} -t 2 -r 30 | head -c1 >/dev/null")
    assert_one_error(res, EXIT_IO, "cannot write stdout: Broken pipe", seen)
    data = json.loads(rec.read_text())
    assert data["duration_s"] < 20 and data["totals"]["lookups"] > 0
