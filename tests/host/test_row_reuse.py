"""The per-futex list's rows given back and taken again, on the real kernel
(bpf/maps.h's row tables, loading/rowtables.py).

A process's futexes fill rows of the list. Once it is forgotten (as `serve`
forgets a gone process) its keys leave the index at one read, and its rows
are zeroed and given back at a read at least GIVE_BACK_AFTER_S later. The
next process's futexes then take those rows: the list's row counter does
not move, and that process's per-futex counts are its own, exactly as
tests/data/manyfutexes.c makes them (futex i: 1 + i % 3 calls; the hot
futex: one after each), with nothing left over from the rows' last owner.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from futextrace.kernel.layout import KIND
from futextrace.loading import exact
from tests.helpers import fidelity_ref

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="needs BTF")]

DATA = Path(__file__).resolve().parent.parent / "data"
NFUTEXES = 3000


def run(exe: Path, out: Path) -> dict:
    subprocess.run([str(exe), str(out), str(NFUTEXES)], check=True, timeout=120)
    return json.loads(out.read_text())


def listed(reader, pid: int) -> set[int]:
    """The futexes of `pid` the per-futex list holds (their addresses)."""
    out = reader.futex_list(set())
    return set(out["uaddr"][out["tgid"] == pid].tolist())


def bucket_counts(reader, pid: int) -> dict[int, int]:
    """The exact lookups per bucket of `pid`'s private hash (futex_list first:
    it reads the list's share of them)."""
    rows = reader.bucket_columns(set())
    tgid, kind, bucket, lookups = (rows[:, exact.BUCKET_FIELDS.index(f)] for f in ("tgid", "kind", "bucket", "lookups"))
    mine = (tgid == pid) & (kind == KIND["FT_PRIVATE"])
    out: Counter = Counter()
    for b, n in zip(bucket[mine].tolist(), lookups[mine].tolist()):
        out[b] += n
    return {b: n for b, n in out.items() if n}


def expected(wl: dict) -> dict[int, int]:
    """manyfutexes.c's lookups per bucket of its 64-slot private hash (the kernel's jhash2)."""
    mask, want = wl["slots"] - 1, Counter()
    for i in range(wl["futexes"]):
        want[fidelity_ref.private_bucket(wl["base"] + 4 * i, mask)] += 1 + i % 3
    want[fidelity_ref.private_bucket(wl["hot"], mask)] += wl["futexes"]
    return dict(want)


def addresses(wl: dict) -> set[int]:
    return {wl["base"] + 4 * i for i in range(wl["futexes"])} | {wl["hot"]}


def test_forgotten_rows_are_given_back_and_taken_again(tmp_path):
    from futextrace.loading.maparrays import ArrayReader
    from futextrace.loading.rowtables import GIVE_BACK_AFTER_S
    from futextrace.record.session import RecordOptions, TraceSession
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler: run scripts/bootstrap.sh"
    exe = tmp_path / f"ftrows{os.getpid() % 100000}"      # a name no other process has
    subprocess.run([cc, "-O2", "-o", str(exe), str(DATA / "manyfutexes.c")], check=True)
    session = reader = None
    try:
        session = TraceSession(RecordOptions(comms=[exe.name], method="tracepoint", announce=False))
        session.start()
        reader = ArrayReader(session.program)
        table = reader.rows("futexes")

        first = run(exe, tmp_path / "a.json")
        assert listed(reader, first["pid"]) == addresses(first)
        assert bucket_counts(reader, first["pid"]) == expected(first)
        used = table.used_rows()
        assert used == NFUTEXES + 1, used         # one row a futex, and no other process's

        # Forgotten: gone from the list at once, rows given back at a later read.
        out = reader.futex_list({first["pid"]})
        assert first["pid"] not in set(out["tgid"].tolist())
        time.sleep(GIVE_BACK_AFTER_S + 0.05)
        assert listed(reader, first["pid"]) == set()

        # The second process's futexes take the given-back rows, zeroed: its
        # exact counts (the list's share among them) are its own.
        second = run(exe, tmp_path / "b.json")
        assert second["pid"] != first["pid"]
        assert listed(reader, second["pid"]) == addresses(second)
        assert bucket_counts(reader, second["pid"]) == expected(second)
        assert table.used_rows() == used, "the second process's futexes took new rows, not the given-back ones"
        rows, keys, _ = table.read()
        assert set(keys["tgid"].tolist()) == {second["pid"]} and len(rows) == used
    finally:
        if reader is not None:
            reader.close()
        if session is not None:
            session.close()


def test_a_full_list_takes_new_futexes_again_once_rows_are_given_back(tmp_path):
    """A list one process filled (its CPUs' full flags set: no more inserts)
    takes the next process's futexes once the first is forgotten and its
    rows are given back: every row again, no more."""
    from futextrace.loading.maparrays import ArrayReader
    from futextrace.loading.rowtables import GIVE_BACK_AFTER_S
    from futextrace.record.session import RecordOptions, TraceSession
    capacity = 2000        # under NFUTEXES + 1: the first process fills the list
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler: run scripts/bootstrap.sh"
    exe = tmp_path / f"ftfull{os.getpid() % 100000}"
    subprocess.run([cc, "-O2", "-o", str(exe), str(DATA / "manyfutexes.c")], check=True)
    session = reader = None
    try:
        session = TraceSession(RecordOptions(comms=[exe.name], method="tracepoint", announce=False,
                                             max_futexes=capacity))
        session.start()
        reader = ArrayReader(session.program)
        first = run(exe, tmp_path / "a.json")
        assert len(listed(reader, first["pid"])) == capacity
        assert any(reader.counters([])["FUTEXES_FULL"]), "the full list set no CPU's flag"

        reader.futex_list({first["pid"]})
        time.sleep(GIVE_BACK_AFTER_S + 0.05)
        assert listed(reader, first["pid"]) == set()           # the read that gives the rows back
        assert not any(reader.counters([])["FUTEXES_FULL"])

        second = run(exe, tmp_path / "b.json")
        assert len(listed(reader, second["pid"])) == capacity
        assert reader.rows("futexes").used_rows() == capacity
    finally:
        if reader is not None:
            reader.close()
        if session is not None:
            session.close()
