"""serve reads the lock_waits map in batches and makes rows only of the entries
that changed since its last read (loading/contention.py read_waits with a memo):
the exporter's WaitBook must come out exactly as when fed every row. Pure
Python: batch lookups stand in for the kernel with ctypes buffers."""
from __future__ import annotations

import ctypes as ct
import random

from futextrace.analysis.contention import WaitBook
from futextrace.loading import contention

NCPU = 3


class Key(ct.Structure):
    _fields_ = [("tgid", ct.c_uint32), ("hash_mask", ct.c_uint32), ("bucket", ct.c_uint32),
                ("pad", ct.c_uint32), ("uaddr", ct.c_uint64)]


class Stat(ct.Structure):
    _fields_ = [("waits", ct.c_uint64), ("wait_ns", ct.c_uint64), ("max_ns", ct.c_uint64)]


class Table:
    """What read_waits uses of BCC's PerCpuHash, over a dict."""
    Key, sLeaf, Leaf, max_entries = Key, Stat, Stat * NCPU, 64

    def __init__(self):
        self.entries: dict[tuple, list[list[int]]] = {}

    def batch(self):
        keys = b"".join(bytes(Key(t, m, b, 0, u)) for t, m, b, u in self.entries)
        values = b"".join(bytes(Stat(*v)) for per_cpu in self.entries.values() for v in per_cpu)
        return memoryview(keys), memoryview(values), len(self.entries)


def test_changed_rows_feed_the_wait_book_as_every_row_does(monkeypatch):
    rng, table = random.Random(7), Table()
    monkeypatch.setattr(contention, "lookup_batch", lambda t: t.batch())
    bcc = {"lock_waits": table}
    every, changed, memo = WaitBook(), WaitBook(), {}
    for step in range(40):
        for _ in range(rng.randrange(6)):      # waits grow on a few entries, new ones come
            key = (rng.choice([10, 11, 12]), 15, rng.randrange(8), rng.choice([0, 0x1000, 0x2000, 0x3000]))
            per_cpu = table.entries.setdefault(key, [[0, 0, 0] for _ in range(NCPU)])
            cpu, ns = rng.randrange(NCPU), rng.randrange(1, 500)
            per_cpu[cpu] = [per_cpu[cpu][0] + 1, per_cpu[cpu][1] + ns, max(per_cpu[cpu][2], ns)]
        if step % 13 == 12:                    # the exporter forgets a process
            gone = {rng.choice([10, 11, 12])}
            table.entries = {k: v for k, v in table.entries.items() if k[0] not in gone}
            every.forget(gone)
            changed.forget(gone)
            contention.forget_waits(memo, gone)
        rows = contention.read_waits(bcc)
        assert every.feed(rows) == changed.feed(contention.read_waits(bcc, memo))
        assert len(memo) == len(table.entries)
    assert every.high == changed.high and every.futexes == changed.futexes
