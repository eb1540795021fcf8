"""analysis.lockwaits.WaitBook's arithmetic on numpy columns, for the exporter.

A contended workload changes thousands of lock_waits rows a second; turned
into dicts and fed one at a time, the WaitBook took about a third of a
1,024-futex workload's scrape (3 of 11 ms, and the dicts). Here the
high-water marks are sorted arrays and a read's rows are matched against
them in one searchsorted. The rules are the
WaitBook's: a row counts only where its waits or wait time grew past its
mark, a bucket's cause is cause_of over the futexes that have waited on it,
and nothing is counted twice. tests/unit/test_waitarrays.py feeds both the
same rows.
"""
from __future__ import annotations

import numpy as np

from futextrace.analysis.lockwaits import cause_of
from futextrace.loading.sortkeys import byte_keys, layout

# Sortable byte strings (loading/sortkeys.py): a mark's key, and its bucket's.
KEY = layout(("tgid", ">u4"), ("hash_mask", ">u4"), ("bucket", ">u4"), ("uaddr", ">u8"))
BUCKET = layout(("tgid", ">u4"), ("hash_mask", ">u4"), ("bucket", ">u4"))


class ArrayWaitBook:
    """The exporter's cumulative wait marks, one row per (tgid, hash_mask,
    bucket, uaddr) that has waited, sorted by it."""

    def __init__(self):
        self.keys = byte_keys({f: np.zeros(0, dtype=np.uint64) for f in KEY.names}, KEY)
        self.waits = np.zeros(0, dtype=np.uint64)
        self.ns = np.zeros(0, dtype=np.uint64)

    def feed(self, rows: dict[str, np.ndarray]) -> dict[tuple, tuple[int, int, str]]:
        """(tgid, mask, bucket) -> (new waits, new wait ns, cause), buckets that
        waited only: WaitBook.feed's answer. `rows`: columns tgid, hash_mask,
        bucket, uaddr, waits, wait_ns of one read (a map's keys: each once)."""
        keys = byte_keys(rows, KEY)
        waits, ns = rows["waits"].astype(np.uint64), rows["wait_ns"].astype(np.uint64)
        at = np.searchsorted(self.keys, keys)
        found = at < len(self.keys)
        found[found] = self.keys[at[found]] == keys[found]
        w0, n0 = np.zeros(len(keys), dtype=np.uint64), np.zeros(len(keys), dtype=np.uint64)
        w0[found], n0[found] = self.waits[at[found]], self.ns[at[found]]
        grew = (waits > w0) | (ns > n0)
        if not grew.any():
            return {}
        dw = np.where(waits > w0, waits - w0, 0)[grew]
        dn = np.where(ns > n0, ns - n0, 0)[grew]
        old = grew & found
        self.waits[at[old]] = np.maximum(w0[old], waits[old])
        self.ns[at[old]] = np.maximum(n0[old], ns[old])
        new = grew & ~found
        if new.any():
            merged = np.concatenate([self.keys, keys[new]])
            order = np.argsort(merged, kind="stable")
            self.keys = merged[order]
            self.waits = np.concatenate([self.waits, np.maximum(w0[new], waits[new])])[order]
            self.ns = np.concatenate([self.ns, np.maximum(n0[new], ns[new])])[order]
        return self._per_bucket(keys[grew], dw, dn)

    def _per_bucket(self, keys: np.ndarray, dw: np.ndarray, dn: np.ndarray) -> dict[tuple, tuple[int, int, str]]:
        """The grown rows' deltas added up per bucket, with each bucket's cause
        from every futex its marks hold."""
        fields = keys.view(KEY)
        buckets = byte_keys({f: fields[f] for f in BUCKET.names}, BUCKET)
        order = np.argsort(buckets, kind="stable")
        buckets, dw, dn = buckets[order], dw[order], dn[order]
        starts = np.flatnonzero(np.concatenate([[True], buckets[1:] != buckets[:-1]]))
        sum_w, sum_n = np.add.reduceat(dw, starts), np.add.reduceat(dn, starts)
        mine = self.keys.view(KEY)
        marks = byte_keys({f: mine[f] for f in BUCKET.names}, BUCKET)
        lo = np.searchsorted(marks, buckets[starts], side="left")
        hi = np.searchsorted(marks, buckets[starts], side="right")
        out = {}
        uaddr, named = mine["uaddr"], buckets[starts].view(BUCKET)
        for t, m, b, w, n, a, z in zip(named["tgid"].tolist(), named["hash_mask"].tolist(), named["bucket"].tolist(),
                                       sum_w.tolist(), sum_n.tolist(), lo.tolist(), hi.tolist()):
            # A bucket's marks are sorted by futex, each futex once, 0 (not named)
            # first: its first three futexes tell cause_of all it needs (two named).
            out[(t, m, b)] = (w, n, cause_of(set(uaddr[a:min(z, a + 3)].tolist())))
        return out

    def forget(self, tgids: set[int]) -> None:
        """Processes no longer followed: their marks go."""
        keep = ~np.isin(self.keys.view(KEY)["tgid"], np.fromiter(tgids, dtype=np.uint64))
        self.keys, self.waits, self.ns = self.keys[keep], self.waits[keep], self.ns[keep]


def columns_of(rows: list[dict]) -> dict[str, np.ndarray]:
    """lock_waits rows as dicts (lockwaits.read_waits's) as columns."""
    fields = ("tgid", "hash_mask", "bucket", "uaddr", "waits", "wait_ns")
    return {f: np.array([r[f] for r in rows], dtype=np.uint64) for f in fields}
