"""The tracepoint method's task memo (bpf/trace_tp.bpf.c, TASK_MEMO) follows
every hash change of a task whose futex calls it answers from the memo: a
resize by another thread's prctl, and an exec. Expected sizes come from the
kernel (PR_FUTEX_HASH_GET_SLOTS in tests/data/memo_cases.c) and the call
counts from the workload itself."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.host import FT, limit, needs_bpf, needs_private_hash

pytestmark = [pytest.mark.root, needs_bpf, needs_private_hash]
DATA = Path(__file__).parent.parent / "data"
N = 20_000


@pytest.fixture(scope="module")
def memo_cases(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler: run scripts/bootstrap.sh"
    exe = tmp_path_factory.mktemp("memo") / "memo_cases"
    subprocess.run([cc, "-O2", "-pthread", "-o", str(exe), str(DATA / "memo_cases.c")], check=True)
    return exe


def run_case(exe: Path, tmp: Path, case: str) -> tuple[dict, dict]:
    """(the workload's own report, the lookups per hash of its process: {(kind, buckets): n})."""
    rec_path, wl_path = tmp / "rec.json", tmp / "wl.json"
    p = subprocess.run([*FT, "record", "-q", "--method", "tracepoint", "--json", str(rec_path), "--",
                        str(exe), case, str(wl_path), str(N)],
                       capture_output=True, text=True, timeout=limit(300))
    assert p.returncode == 0, p.stderr
    wl = json.loads(wl_path.read_text())
    proc = next(x for x in json.loads(rec_path.read_text())["processes"] if x["pid"] == wl["pid"])
    return wl, {(h["kind"], h["buckets"]): h["lookups"] for h in proc["hashes"]}


def test_resize_by_another_thread(memo_cases, tmp_path):
    """Main's N calls after another thread's prctl(SET_SLOTS, 128) are in the
    128-slot hash, not in the automatic hash main's memo held before."""
    wl, hashes = run_case(memo_cases, tmp_path, "prctl")
    assert wl["before"] != wl["after"] == 128, wl
    assert hashes.get(("private", 128)) == N, hashes
    assert N <= hashes.get(("private", wl["before"]), 0) <= N + 50, hashes


def test_first_thread_brings_a_hash(memo_cases, tmp_path):
    """Main's N calls after its first pthread_create (the kernel installs an
    automatic hash at the clone) are in that hash, not the global one."""
    wl, hashes = run_case(memo_cases, tmp_path, "thread")
    assert wl["before"] == 0 and wl["after"] >= 16, wl
    assert hashes.get(("private", wl["after"])) == N, hashes
    assert sum(n for (kind, _), n in hashes.items() if kind == "global") <= N + 50, hashes


def test_exec_drops_the_private_hash(memo_cases, tmp_path):
    """A single-threaded process with 64 slots execs: its N calls after the
    exec go to the global hash (the new mm has none), same task, same pid."""
    wl, hashes = run_case(memo_cases, tmp_path, "exec")
    assert (wl["before"], wl["after"]) == (64, 0), wl
    assert hashes.get(("private", 64)) == N, hashes
    assert sum(n for (kind, _), n in hashes.items() if kind == "global") == N, hashes
