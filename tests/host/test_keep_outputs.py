"""A failed run never destroys the last recording (issue 27, item 2).

Each case runs the real CLI against an existing keep.json / keep.jsonl (and a
report's HTML page) and checks the files are byte for byte what they were,
with no temporary file left beside them; a run that succeeds replaces them
whole. Output paths: futextrace/output/jsonio.py.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.host import FT, REPO, descendants, limit, needs_bpf, needs_private_hash, wait_until

pytestmark = [pytest.mark.root, needs_bpf, needs_private_hash]

OLD = '{"kept": "the last recording"}\n'


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.fixture
def keep(tmp_path) -> dict[str, Path]:
    files = {"json": tmp_path / "keep.json", "jsonl": tmp_path / "keep.jsonl"}
    for f in files.values():
        f.write_text(OLD)
        os.chmod(f, 0o640)
    return files


def untouched(keep: dict[str, Path]) -> None:
    for f in keep.values():
        assert f.read_text() == OLD, f
        assert f.stat().st_mode & 0o777 == 0o640
    litter = [p.name for p in keep["json"].parent.iterdir() if p.name.endswith(".tmp")]
    assert litter == [], litter


def record(keep, *args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([*FT, "record", "-q", "--json", str(keep["json"]), "--jsonl", str(keep["jsonl"]),
                           *args], capture_output=True, text=True, timeout=limit(timeout), cwd=REPO)


@pytest.mark.parametrize("args", [
    pytest.param(lambda: ["-p", str(dead_pid()), "-d", "1"], id="stale-pid"),
    pytest.param(lambda: ["-d", "0"], id="d0"),
    pytest.param(lambda: ["-d", "-1"], id="d-negative"),
    pytest.param(lambda: ["--", "/nonexistent/command"], id="missing-command"),
    pytest.param(lambda: ["--cgroup", "/no/such/cgroup", "-d", "1"], id="bad-cgroup"),
])
def test_failed_start_keeps_the_files(keep, args):
    p = record(keep, *args())
    assert p.returncode != 0, p.stderr
    assert "Traceback" not in p.stderr
    untouched(keep)


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_ctrl_c_during_start_up_keeps_the_files(keep, inherited):
    """SIGINT while the programs compile (before anything is recorded): half a
    second after record has forked the command it releases after the attach
    (targets.StoppedChild, forked before the model and the compile). "ignored":
    started with SIGINT ignored, as a non-interactive shell starts a background
    job; Python then installs no handler, and a clean run under such a shell
    once lost the signal and traced on to the command's end."""
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if inherited == "ignored" else None
    start = time.monotonic()
    p = subprocess.Popen([*FT, "record", "-q", "--json", str(keep["json"]), "--jsonl", str(keep["jsonl"]),
                          "-i", "1", "--", "sleep", "30"], cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=ignore,
                         # a full compile (no program cache): the attach is seconds away, not a race
                         env={**os.environ, "FUTEXTRACE_NO_PROG_CACHE": "1"})
    wait_until(lambda: descendants(p.pid) or p.poll() is not None, limit(60), step=0.01)
    assert descendants(p.pid), "record never forked its command"
    forked = time.monotonic() - start
    time.sleep(0.5)   # into the model and the compile (~2.5 s with no program cache)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=limit(120))
    seen = f"forked at +{forked:.2f} s, SIGINT at +{forked + 0.5:.2f} s, exit {p.returncode} at " \
           f"+{time.monotonic() - start:.2f} s, stderr {err!r}"
    assert "Tracing" not in err, f"attached before the signal, or the signal was lost: {seen}"
    assert p.returncode == 130, seen
    untouched(keep)


def test_a_successful_run_replaces_them_whole(keep, tmp_path):
    p = record(keep, "-d", "1.2", "-i", "0.5")
    assert p.returncode == 0, p.stderr
    rec = json.loads(keep["json"].read_text())
    assert rec["schema"] == "futextrace-recording"
    rows = [json.loads(line) for line in keep["jsonl"].read_text().splitlines()]
    assert len(rows) == 2 and all("lookups" in r for r in rows)
    # The mode of the file it replaced, not mkstemp's 0600.
    assert keep["json"].stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_complete_run_without_intervals_leaves_an_empty_stream(keep):
    p = record(keep, "-d", "0.3", "-i", "5")
    assert p.returncode == 0, p.stderr
    assert keep["jsonl"].read_text() == ""
    assert json.loads(keep["json"].read_text())["schema"] == "futextrace-recording"


def test_jsonl_replaces_the_old_file_at_its_first_line(keep):
    """A stream: the old file stays until the first interval line exists, then the
    new file is in place and grows (it can be followed with tail -F)."""
    p = subprocess.Popen([*FT, "record", "-q", "--jsonl", str(keep["jsonl"]), "-i", "0.3", "-d", "60"],
                         cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stderr.readline().startswith("Tracing"), "record did not attach"
        deadline = time.monotonic() + limit(30)
        while keep["jsonl"].read_text() == OLD and time.monotonic() < deadline:
            time.sleep(0.05)
        first = keep["jsonl"].read_text()
        assert first != OLD and json.loads(first.splitlines()[0])["t"] > 0
        time.sleep(1.0)
        assert len(keep["jsonl"].read_text().splitlines()) > len(first.splitlines())
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=limit(60))


def test_report_html_to_a_bad_place_keeps_the_page(tmp_path):
    """report --html over an existing page: a recording that fails to load keeps it."""
    page = tmp_path / "run.html"
    page.write_text("<p>old</p>")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    p = subprocess.run([*FT, "report", str(bad), "--html", str(page)], capture_output=True, text=True,
                       timeout=limit(120), cwd=REPO)
    assert p.returncode != 0
    assert page.read_text() == "<p>old</p>"


def test_unwritable_directory_fails_before_tracing(tmp_path):
    p = subprocess.run([*FT, "record", "-q", "--json", str(tmp_path / "no" / "such" / "x.json"), "-d", "1"],
                       capture_output=True, text=True, timeout=limit(120), cwd=REPO)
    assert p.returncode == 5 and "Tracing" not in p.stderr, p.stderr
    assert p.stderr.strip().startswith("futextrace: error: cannot write"), p.stderr
