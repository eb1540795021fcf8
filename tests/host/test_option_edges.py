"""Option edges of `record` (issue 27, item 8): each bad value is one line and a
non-zero exit before anything is attached; the start line says when the run
ends; a -p target that exits ends the run normally, with a note."""
from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from tests.helpers.host import needs_bpf, needs_private_hash, one_line_error
from tests.helpers.host import FT



def ft(*args, timeout=300):
    return subprocess.run([*FT, *map(str, args)], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, words", [
    (["record", "-d", "nan"], "finite number of seconds above 0"),
    (["record", "-d", "inf"], "finite number of seconds above 0"),
    (["record", "-d", "-1"], "finite number of seconds above 0"),
    (["record", "-d", "soon"], "is not a number of seconds"),
    (["record", "-i", "nan", "-d", "1"], "finite number of seconds above 0"),
    (["explain", "-p", "1", "-d", "nan"], "finite number of seconds above 0"),
    (["snapshot", "-d", "inf"], "finite number of seconds above 0"),
    (["record", "-q", "-d", "1"], "-q drops the text summary, and nothing else was asked for"),
    (["explain", "-q", "--", "true"], "-q drops the text summary, and nothing else was asked for"),
    (["record", "--no-such-option"], "No such option"),
])
def test_bad_option_is_one_line_exit_2(args, words):
    line = one_line_error(ft(*args), 2)
    assert words in line
    if "-q" not in args:    # click's own errors name the help to read
        assert line.endswith(f"(see 'futextrace {args[0]} --help')"), line


def test_json_to_a_directory_is_one_line(tmp_path):
    line = one_line_error(ft("record", "--json", tmp_path, "-d", "1"), 2)
    assert "is a directory" in line


@pytest.mark.root
@needs_bpf
@needs_private_hash
def test_duration_run_says_when_it_ends(tmp_path):
    res = ft("record", "-d", "1", "--json", tmp_path / "r.json", "--", "sleep", "5")
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[0] == "Tracing futex hash lookups for 1 s..."
    assert "Ctrl-C" not in res.stderr


@pytest.mark.root
@needs_bpf
@needs_private_hash
def test_quiet_with_json_is_accepted(tmp_path):
    res = ft("record", "-q", "-d", "0.5", "--json", tmp_path / "r.json")
    assert res.returncode == 0 and res.stdout == "", res.stderr
    assert json.loads((tmp_path / "r.json").read_text())["duration_s"] > 0


@pytest.mark.root
@needs_bpf
@needs_private_hash
def test_pid_that_exits_is_a_normal_end(tmp_path):
    target = subprocess.Popen(["sleep", "4"])
    try:
        t0 = time.monotonic()
        res = ft("record", "-p", target.pid, "-d", "60", "--json", tmp_path / "r.json")
        took = time.monotonic() - t0
    finally:
        target.kill()
    assert res.returncode == 0, res.stderr
    assert took < 60
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["target_exited"]["pid"] == target.pid and "error" not in rec
    notes = [ln for ln in res.stderr.splitlines() if ln.startswith("futextrace: note: ")]
    assert notes == [f"futextrace: note: {rec['target_exited']['note']}"]
    assert f"PID {target.pid} exited during tracing" in notes[0] and "the recording ends there" in notes[0]


@pytest.mark.root
@needs_bpf
@needs_private_hash
def test_note_names_the_target_whose_exit_ended_the_run(tmp_path):
    """Two targets: the second exits first, and the first follows it within a
    few ms, while futextrace still reads its maps. The note names the second
    (the exit that ended the run), not the first -p target dead by then."""
    first_to_exit = subprocess.Popen(["sleep", "2"])
    threading.Thread(target=first_to_exit.wait, daemon=True).start()   # reaped at once
    follower = subprocess.Popen(["sh", "-c", f"while kill -0 {first_to_exit.pid}; do sleep 0.005; done"],
                                stderr=subprocess.DEVNULL)
    try:
        res = ft("record", "-p", follower.pid, "-p", first_to_exit.pid, "-d", "60",
                 "--json", tmp_path / "r.json")
        follower.wait(timeout=10)
    finally:
        follower.kill()
        first_to_exit.kill()
    assert res.returncode == 0, res.stderr
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["target_exited"]["pid"] == first_to_exit.pid, rec["target_exited"]
    assert f"PID {first_to_exit.pid} exited during tracing (" in rec["target_exited"]["note"]
