"""What `futextrace record` writes on this kernel is declared by
futextrace/recording.py: every key of a recording made with -i, a launched
command that resizes its hash and waits on bucket locks, is walked against the
TypedDicts (tests/helpers/recording_types.py), and so is each --jsonl line."""
from __future__ import annotations

import json
import subprocess

import pytest

from futextrace.recording import Interval, Recording
from futextrace.workload.build import workload_path
from tests.helpers.host import FT, bpf_missing, limit
from tests.helpers.recording_types import problems

pytestmark = pytest.mark.root


def test_a_fresh_recording_is_declared(tmp_path):
    if bpf_missing():
        pytest.skip(bpf_missing())
    out, lines = tmp_path / "rec.json", tmp_path / "rec.jsonl"
    p = subprocess.run([*FT, "record", "-q", "-i", "0.3", "--json", str(out), "--jsonl", str(lines), "--",
                        str(workload_path()), "-t", "4", "-f", "64", "-b", "32", "-r", "1"],
                       capture_output=True, text=True, timeout=limit(600))
    assert p.returncode == 0, p.stderr
    rec = json.loads(out.read_text())
    assert rec["intervals"] and rec["command"] and rec["window"] and rec["contention"]
    assert problems(rec, Recording) == []
    rows = [json.loads(line) for line in lines.read_text().splitlines()]
    assert rows and [problems(r, Interval) for r in rows] == [[] for _ in rows]
