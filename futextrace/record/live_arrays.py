"""The `record -i` row's readings as numpy arrays (maparrays.ArrayReader.interval_arrays),
turned into what record/live.py's processes() reads.

With dicts, a 32,768-futex workload cost `record -i 1` a second of CPU per
one-second interval and 130 MiB of RSS (a dict per futex and per futex and
CPU, every interval). Here the per-futex list stays in arrays: only the
per-process results and the per-bucket counts (bounded by the hash sizes in
use, not by futexes) become Python objects. tests/unit/test_live_arrays.py
checks both paths give the same rows.
"""
from __future__ import annotations

import numpy as np

from futextrace.loading.sortkeys import byte_keys, layout

# Sortable byte strings (loading/sortkeys.py): a futex's key, and its hash's.
FUTEX = layout(("tgid", ">u4"), ("kind", ">u4"), ("hash_mask", ">u4"), ("uaddr", ">u8"))
HASH = layout(("tgid", ">u4"), ("kind", ">u4"), ("hash_mask", ">u4"))


class FutexTouches:
    """Per process, how many futexes of the per-futex list were looked up since
    the last reading, in the hash (kind, hash_mask) that took most of those
    lookups: processes()' `futexes` for it. Keeps the last reading's keys and
    cumulative lookups, sorted, to match the next one against."""

    def __init__(self):
        self._keys = byte_keys({f: np.zeros(0, dtype=np.uint64) for f in FUTEX.names}, FUTEX)
        self._lookups = np.zeros(0, dtype=np.uint64)

    def update(self, futexes: dict[str, np.ndarray]) -> dict[int, int]:
        keys = byte_keys(futexes, FUTEX)
        order = np.argsort(keys, kind="stable")
        keys, lookups = keys[order], futexes["lookups"][order].astype(np.uint64)
        before = np.zeros(len(keys), dtype=np.uint64)
        if len(self._keys):
            at = np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)
            found = self._keys[at] == keys
            before[found] = self._lookups[at[found]]
        self._keys, self._lookups = keys, lookups
        grew = lookups > before
        return _busiest_hash_counts(keys[grew], (lookups - before)[grew])


def _busiest_hash_counts(keys: np.ndarray, delta: np.ndarray) -> dict[int, int]:
    """tgid -> futexes in its hash with the most lookups (`keys`: FUTEX byte
    strings, sorted, so each hash's futexes are together; a tie goes to the
    first hash in (kind, hash_mask) order)."""
    if not len(keys):
        return {}
    fields = keys.view(FUTEX)
    hashes = byte_keys({f: fields[f] for f in HASH.names}, HASH)
    change = np.ones(len(hashes), dtype=bool)
    change[1:] = hashes[1:] != hashes[:-1]
    starts = np.flatnonzero(change)
    sums = np.add.reduceat(delta, starts)
    counts = np.diff(np.append(starts, len(hashes)))
    out: dict[int, tuple[int, int]] = {}
    for tgid, total, n in zip(fields["tgid"][starts].tolist(), sums.tolist(), counts.tolist()):
        if tgid not in out or total > out[tgid][0]:
            out[tgid] = (total, n)
    return {tgid: n for tgid, (_, n) in out.items()}


def bucket_counts_of(b: dict[str, np.ndarray]) -> dict[tuple, tuple[int, tuple]]:
    """live.bucket_counts' form, (tgid, kind, (node, bucket), hash_mask) ->
    (cumulative lookups, (node, bucket)), from nodebuckets.group's arrays."""
    out = {}
    for tgid, kind, mask, node, bucket, lookups in zip(
            *(b[f].tolist() for f in ("tgid", "kind", "hash_mask", "node", "bucket", "lookups"))):
        where = (node, bucket)
        out[(tgid, kind, where, mask)] = (lookups, where)
    return out
