"""serve reads the lock_waits map in one batch and makes rows only of the
entries whose waits changed since its last read (ArrayReader.lock_wait_rows):
the exporter's WaitBook must come out exactly as when fed every row
(lockwaits.read_waits, the same batch read into rows). Pure Python: batch
lookups stand in for the kernel with ctypes buffers."""
from __future__ import annotations

import ctypes as ct
import random
from types import SimpleNamespace

from futextrace.analysis.lockwaits import WaitBook
from futextrace.loading import lockwaits, maparrays
from futextrace.loading.maparrays import ArrayReader

NCPU = 3


class Key(ct.Structure):
    _fields_ = [("tgid", ct.c_uint32), ("hash_mask", ct.c_uint32), ("bucket", ct.c_uint32),
                ("pad", ct.c_uint32), ("uaddr", ct.c_uint64)]


class Stat(ct.Structure):
    _fields_ = [("waits", ct.c_uint64), ("wait_ns", ct.c_uint64), ("max_ns", ct.c_uint64)]


class Table:
    """What the readers use of BCC's PerCpuHash, over a dict (insertion order: the map's)."""
    Key, sLeaf, Leaf, max_entries = Key, Stat, Stat * NCPU, 64

    def __init__(self):
        self.entries: dict[tuple, list[list[int]]] = {}

    def batch(self):
        keys = b"".join(bytes(Key(t, m, b, 0, u)) for t, m, b, u in self.entries)
        values = b"".join(bytes(Stat(*v)) for per_cpu in self.entries.values() for v in per_cpu)
        return memoryview(keys), memoryview(values), len(self.entries)

    def keys(self):
        return [Key(t, m, b, 0, u) for t, m, b, u in self.entries]

    def __delitem__(self, k):
        del self.entries[(k.tgid, k.hash_mask, k.bucket, k.uaddr)]


def grow(rng: random.Random, table: Table) -> None:
    """Waits on a few entries, some of them new."""
    for _ in range(rng.randrange(6)):
        key = (rng.choice([10, 11, 12]), 15, rng.randrange(8), rng.choice([0, 0x1000, 0x2000, 0x3000]))
        per_cpu = table.entries.setdefault(key, [[0, 0, 0] for _ in range(NCPU)])
        cpu, ns = rng.randrange(NCPU), rng.randrange(1, 500)
        per_cpu[cpu] = [per_cpu[cpu][0] + 1, per_cpu[cpu][1] + ns, max(per_cpu[cpu][2], ns)]


def test_changed_rows_feed_the_wait_book_as_every_row_does(monkeypatch):
    rng, table = random.Random(7), Table()
    monkeypatch.setattr(lockwaits, "lookup_batch", lambda t, *_: t.batch())
    monkeypatch.setattr(maparrays, "lookup_batch", lambda t, *_: t.batch())
    bcc = {"lock_waits": table}
    reader = ArrayReader(SimpleNamespace(bpf=bcc, contention="attached"))
    every, changed = WaitBook(), WaitBook()
    for step in range(60):
        grow(rng, table)
        if step % 13 == 12:                    # the exporter forgets a process
            gone = {rng.choice([10, 11, 12])}
            reader.delete_lock_waits(gone)
            every.forget(gone)
            changed.forget(gone)
        rows, fewer = lockwaits.read_waits(bcc), reader.lock_wait_rows()
        assert [r for r in rows if r in fewer] == fewer          # the map's order kept
        assert every.feed(rows) == changed.feed(fewer)
    assert every.high == changed.high and every.futexes == changed.futexes


def test_an_unchanged_map_gives_no_rows(monkeypatch):
    table = Table()
    monkeypatch.setattr(maparrays, "lookup_batch", lambda t, *_: t.batch())
    reader = ArrayReader(SimpleNamespace(bpf={"lock_waits": table}, contention="attached"))
    assert reader.lock_wait_rows() == []          # an empty map too
    grow(random.Random(1), table)
    grow(random.Random(2), table)
    assert len(reader.lock_wait_rows()) == len(table.entries) > 0
    assert reader.lock_wait_rows() == []
