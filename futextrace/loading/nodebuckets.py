"""The exact per-bucket counts with each bucket's NUMA node, as numpy arrays:
what a `record -i` row reads every interval (record/live.py), without a dict
per futex or per bucket entry.

exact.bucket_entries gives the same counts as dicts, one entry per futex and
CPU (a 32,768-futex workload made 37,000 of them, 50 MiB, every second);
the exporter's rows (maparrays.ArrayReader.bucket_columns) leave the node
out, since a metric's bucket needs none. An interval row keys a bucket by
(node, bucket), as exact.bucket_entries does: a global futex used from two
nodes' CPUs has a bucket in each node's table.

Each tier gives columns TIER_FIELDS; group() adds them up per bucket.
tests/unit/test_nodebuckets.py checks the sums against sums made in the test
from the raw tiers.
"""
from __future__ import annotations

import numpy as np

TIER_FIELDS = ("tgid", "kind", "hash_mask", "node", "bucket", "lookups")
GROUP_FIELDS = TIER_FIELDS[:-1]


def _tier(tgid, kind, hash_mask, node, bucket, lookups) -> dict[str, np.ndarray]:
    return {"tgid": np.asarray(tgid, dtype=np.int64), "kind": np.asarray(kind, dtype=np.int64),
            "hash_mask": np.asarray(hash_mask, dtype=np.int64), "node": np.asarray(node, dtype=np.int64),
            "bucket": np.asarray(bucket, dtype=np.int64), "lookups": np.asarray(lookups, dtype=np.uint64)}


def futex_map_tier(keys: np.ndarray, stats: np.ndarray) -> dict[str, np.ndarray]:
    """The futexes map's share (exact.futex_share): each CPU's lookups of an
    entry under the bucket and node that CPU computed. `stats`: (n, ncpu)."""
    entry, cpu = np.nonzero(stats["lookups"])
    return _tier(keys["tgid"][entry], keys["kind"][entry], keys["hash_mask"][entry],
                 stats["node"][entry, cpu], stats["bucket"][entry, cpu], stats["lookups"][entry, cpu])


def futex_cache_tier(keys: np.ndarray, stats: np.ndarray) -> dict[str, np.ndarray]:
    """The lookup cache's used slots (one CPU's each): counts not yet flushed."""
    return _tier(keys["tgid"], keys["kind"], keys["hash_mask"], stats["node"], stats["bucket"], stats["lookups"])


def bucket_tier(keys: np.ndarray, lookups: np.ndarray) -> dict[str, np.ndarray]:
    """The `buckets` map's entries or the per-bucket cache's slots: a
    struct bucket_key each, with its lookups (CPUs summed)."""
    return _tier(keys["tgid"], keys["kind"], keys["hash_mask"], keys["node"], keys["bucket"], lookups)


def group(tiers: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The tiers' rows added up per (tgid, kind, hash_mask, node, bucket):
    one row per bucket, sorted by those fields."""
    cols = {f: np.concatenate([t[f] for t in tiers]) if tiers else np.zeros(0, dtype=np.int64)
            for f in TIER_FIELDS}
    if not len(cols["tgid"]):
        return {f: cols[f][:0] for f in TIER_FIELDS}
    order = np.lexsort([cols[f] for f in reversed(GROUP_FIELDS)])
    cols = {f: c[order] for f, c in cols.items()}
    change = np.zeros(len(order), dtype=bool)
    change[0] = True
    for f in GROUP_FIELDS:
        change[1:] |= cols[f][1:] != cols[f][:-1]
    starts = np.flatnonzero(change)
    out = {f: cols[f][starts] for f in GROUP_FIELDS}
    out["lookups"] = np.add.reduceat(cols["lookups"], starts)
    return out
