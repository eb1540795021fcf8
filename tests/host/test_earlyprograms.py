"""Early programs (loading/earlyprograms.py) on the real kernel: a warm start
of `record` takes the tp_btf programs its command line began loading before
its imports, and a start whose cache entry is not the one they were loaded
from (another option: another entry) takes none of them and keeps none of
them loaded: the one sys_enter program it holds is its own."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from tests.helpers.host import FT, limit
from tests.helpers.serve import progs_held_by

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not shutil.which("bpftool"), reason="needs bpftool")]


def programs_held(pid: int, name: str) -> int:
    """Programs whose name starts with `name` that process `pid` holds a file
    descriptor of (its fdinfo's prog_id, named by bpftool's list): its own,
    whatever other tracers run beside it."""
    out = subprocess.run(["bpftool", "-j", "prog", "list"], capture_output=True, text=True, check=True).stdout
    named = {p["id"] for p in json.loads(out) if p.get("name", "").startswith(name[:15])}
    return len(progs_held_by(pid) & named)


def record(cache, pid: int, out, *more: str, hold_s: float = 0.3, during=None) -> dict:
    """`record -p PID` with its own cache: its recording; `during(its pid)` runs once it is tracing."""
    env = {**os.environ, "FUTEXTRACE_CACHE": str(cache)}
    env.pop("FUTEXTRACE_NO_PROG_CACHE", None)
    p = subprocess.Popen([*FT, "record", "--method", "tracepoint", "-p", str(pid), "-d", str(hold_s),
                          "--json", str(out), *more], stderr=subprocess.PIPE, text=True, env=env)
    seen = None
    try:
        line = ""
        while not line.startswith("Tracing"):
            line = p.stderr.readline()
            assert line, p.stderr.read()
        seen = during(p.pid) if during else None
        assert p.wait(timeout=limit(120)) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    rec = json.loads(out.read_text())
    rec["_during"] = seen
    return rec


def test_a_warm_start_takes_its_early_programs_and_another_entry_none(tmp_path, sleeper):
    cache = tmp_path / "cache"
    first = record(cache, sleeper, tmp_path / "1.json")
    if not first["method"]["probes"][0].startswith("tp_btf:"):
        pytest.skip("no tp_btf here: no program is loaded ahead")
    hint = json.loads((cache / "prog" / "early-maps").read_text())["record programs"]
    assert first["compile_cache"] == "miss" and first["early_programs"] == 0
    assert [p[0] for p in hint["programs"][:2]] == ["ft_btf_sys_enter", "ft_btf_waitv_chunk"]

    warm = record(cache, sleeper, tmp_path / "2.json")
    assert warm["compile_cache"] == "hit"
    assert warm["early_programs"] == len(hint["programs"])

    # Another option, another entry: compiled, nothing taken from the hint's.
    other = record(cache, sleeper, tmp_path / "3.json", "--max-futexes", "4096")
    assert other["compile_cache"] == "miss" and other["early_programs"] == 0
    # Back to the first options: their own shape's hint, not the last start's.
    again = record(cache, sleeper, tmp_path / "4.json")
    assert again["compile_cache"] == "hit" and again["early_programs"] == len(hint["programs"])
    # The same shape with another value: the hint names the 8192 entry now. Its
    # programs, loaded ahead, are not the 4096 start's: closed, not kept.
    record(cache, sleeper, tmp_path / "5.json", "--max-futexes", "8192")
    back = record(cache, sleeper, tmp_path / "6.json", "--max-futexes", "4096", hold_s=2,
                  during=lambda pid: (time.sleep(0.5), programs_held(pid, "ft_btf_sys_enter"))[1])
    assert back["compile_cache"] == "hit" and back["early_programs"] == 0
    assert back["_during"] == 1, "a program loaded ahead for another entry was kept"
