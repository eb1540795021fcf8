"""explain's `try` lines (output/text/explain_advice.py try_commands): where a size is
suggested, the exact commands to try it and to compare; nothing else changes."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

from futextrace.analysis import lockwaits as C
from futextrace.output.text import explain_text as T
from futextrace.output.text.explain_advice import try_commands
from tests.helpers.fidelity_ref import private_bucket

DATA = Path(__file__).parent.parent / "data"
BASE = 0x7E0000000000


def _colliding(pid: int) -> dict:
    """A contention section: two futexes of one bucket (16 buckets) waiting 40 ms/s each."""
    a = BASE + 64
    b = next(BASE + 64 * i for i in range(2, 1000) if private_bucket(BASE + 64 * i, 15) == private_bucket(a, 15))
    rows = [{"tgid": pid, "hash_mask": 15, "bucket": private_bucket(a, 15), "uaddr": u, "waits": 1000,
             "wait_ns": 40_000_000, "max_ns": 40_000} for u in (a, b)]
    return C.section(rows, {}, 1.0, "attached (tp_btf)", {pid: "w"})


def _rec() -> dict:
    rec = json.loads((DATA / "recording-tp-auto.json").read_text())
    rec["contention"] = _colliding(rec["processes"][0]["pid"])
    return rec


def test_try_lines_for_a_running_process_name_pid_size_duration_and_file():
    rec = _rec()
    rec.pop("command")            # as `explain -p PID`: the process still runs
    pid = rec["processes"][0]["pid"]
    expl = T.explained(rec, "e.json")
    r = next(p for p in expl["processes"] if p["pid"] == pid)["recommendation"]
    n = r["slots"]
    assert n and n > 16
    secs = f"{rec['duration_s']:.1f}"
    assert r["try"] == [f"futextrace set -p {pid} --slots {n}",
                        f"futextrace run --slots {n} -- COMMAND",
                        f"futextrace record -p {pid} -d {secs} --json after.json; "
                        "futextrace diff e.json after.json"]
    text = T.render(expl).splitlines()
    i = text.index(f"    {r['c_line']}")
    assert text[i + 1].startswith(f"    try it:   futextrace set -p {pid} --slots {n}  ")
    assert text[i + 1].endswith("(on the running process; acts on a live process, see README)")
    assert text[i + 2].strip() == f"futextrace run --slots {n} -- COMMAND       (a new run of the program)"
    assert text[i + 3] == f"    compare:  {r['try'][2]}"


def test_a_program_explain_ran_has_exited_so_only_a_new_run_is_offered():
    """No `set -p` or `record -p` of a PID that is gone (explain -- CMD ran it to its end)."""
    rec = _rec()
    pid, argv = rec["processes"][0]["pid"], rec["command"]["argv"]
    assert rec["command"]["pid"] == pid
    expl = T.explained(rec, "e.json")
    r = expl["processes"][0]["recommendation"]
    n = r["slots"]
    assert r["try"] == [f"futextrace run --slots {n} -- {shlex.join(argv)}",
                        f"futextrace record --slots {n} --json after.json -- {shlex.join(argv)}; "
                        "futextrace diff e.json after.json"]
    text = T.render(expl).splitlines()
    i = text.index(f"    {r['c_line']}")
    assert text[i + 1] == f"    try it:   {r['try'][0]}       (a new run of the program)"
    assert text[i + 2] == f"    compare:  {r['try'][1]}"
    assert not any(f"-p {pid}" in ln for ln in text[i + 1:i + 3])


def test_without_a_file_name_before_json_and_nothing_else_changes():
    rec = _rec()
    expl = T.explained(rec)
    r = expl["processes"][0]["recommendation"]
    assert r["try"][-1].endswith("futextrace diff before.json after.json")
    with_try = T.render(expl).splitlines()
    r.pop("try")
    without = T.render(expl).splitlines()
    assert len(with_try) == len(without) + 2
    assert [ln for ln in with_try if not ln.lstrip().startswith(("try it:", "compare:", "futextrace run"))] \
        == without


def test_global_hash_flag_and_no_size_no_lines():
    rec = _rec()
    cmds = try_commands(0, 7, rec, "-")
    assert cmds[0] == "futextrace set -p 7 --global"
    assert cmds[1] == "futextrace run --global -- COMMAND"          # pid 7 is not the recorded command
    assert cmds[2].endswith("futextrace diff before.json after.json")   # "-": stdout, no file
    assert try_commands(None, 7, rec, "x.json") == []
    plain = json.loads((DATA / "recording-tp-auto.json").read_text())   # no contention: no size
    assert all("try" not in (p["recommendation"] or {}) for p in T.explained(plain, "x.json")["processes"])
