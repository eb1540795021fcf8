"""The exact count: where one bucket's lookups are at a read, and their sum.

The BPF side puts each lookup's count in exactly one of four tiers at any
moment (the flush rule, stated once in bpf/futextrace.h beside the structs):

  futex_cache   the lookup cache: per-CPU slots, one futex each, not yet flushed
  bucket_cache   the per-bucket cache: per-CPU slots, one bucket each, not yet flushed
  futexes  the bounded per-futex list: per-CPU counts under the bucket each CPU computed
  buckets  the per-bucket map: bucket_cache slots taken over

So a bucket's exact count is the sum of the four (bucket_entries), and a
futex's count is its `futexes` entry plus the lookup-cache slots of that same
futex, but only when the `futexes` map lists it (listed_futexes): a cached
futex the map does not hold was turned away at its first lookup and is
counted per bucket only, as bucket_stat.unlisted.

Plain data in, plain data out (the shapes record/aggregate.py documents):
  bucket entry: {tgid, kind, hash_mask, bucket, node, per_cpu: [[lookups, atomic, kernel_checked, unlisted], ...]}
  futex entry:  {tgid, kind, uaddr, hash_mask, per_cpu: [[lookups, atomic, bucket, node, kernel_bucket], ...]}
  cache row:    (cpu, tgid, kind, hash_mask, bucket, node, [lookups, atomic, kernel_checked, unlisted])
The exporter's numpy path (loading/maparrays.py) mirrors these functions;
tests/unit/test_exact.py checks that both give the same counts.
"""
from __future__ import annotations

UNKNOWN = 0xFFFFFFFF   # a bucket the kernel did not report (tracepoint method)
# A row of one bucket entry's counts, CPUs summed (bucket_rows; the exporter's arrays).
BUCKET_FIELDS = ("tgid", "kind", "hash_mask", "bucket", "lookups", "atomic", "unlisted")


def futex_key(e: dict) -> tuple:
    """What identifies a futex in the `futexes` map and the lookup cache."""
    return (e["tgid"], e["kind"], e["uaddr"], e["hash_mask"])


def bucket_entries(bucket_map: list[dict], futex_map: list[dict], cache_rows, ncpus: int) -> list[dict]:
    """The exact per-bucket counts as bucket entries, one tier after the
    other: the `buckets` map's entries, the `futexes` map's share (futex_share)
    and both caches' slots (cache_rows: MapReader.cached_bucket_rows())."""
    return list(bucket_map) + futex_share(futex_map) + cache_share(cache_rows, ncpus)


def futex_share(futex_map: list[dict]) -> list[dict]:
    """Bucket entries from futex entries: each CPU's counts under the bucket
    that CPU computed (a listed futex is never unlisted). Also the whole of the
    exact counts in recordings made before the `buckets` map."""
    out = []
    for e in futex_map:
        for cpu, (lookups, atomic, bucket, node, kernel_bucket) in enumerate(e["per_cpu"]):
            if lookups:
                per_cpu = [[0, 0, 0, 0] for _ in e["per_cpu"]]
                per_cpu[cpu] = [lookups, atomic, lookups if kernel_bucket != UNKNOWN else 0, 0]
                out.append({"tgid": e["tgid"], "kind": e["kind"], "hash_mask": e["hash_mask"],
                            "bucket": bucket, "node": node, "per_cpu": per_cpu})
    return out


def cache_share(cache_rows, ncpus: int) -> list[dict]:
    """Bucket entries from the slots of both caches (counts not yet flushed)."""
    out = []
    for cpu, tgid, kind, hash_mask, bucket, node, counts in cache_rows:
        per_cpu = [[0, 0, 0, 0] for _ in range(ncpus)]
        per_cpu[cpu] = counts
        out.append({"tgid": tgid, "kind": kind, "hash_mask": hash_mask,
                    "bucket": bucket, "node": node, "per_cpu": per_cpu})
    return out


def cache_bucket_rows(cache_rows) -> list[tuple]:
    """bucket_rows(cache_share(cache_rows, n)) without the per-CPU lists (a
    slot's counts are one CPU's): what a reader that sums CPUs anyway needs."""
    return [(tgid, kind, hash_mask, bucket, counts[0], counts[1], counts[3])
            for _cpu, tgid, kind, hash_mask, bucket, _node, counts in cache_rows]


def listed_futexes(futex_map: list[dict], cached: list[dict]) -> list[dict]:
    """The per-futex counts: the `futexes` map's entries and the cached
    futexes it lists (duplicate keys are added by aggregate.merge_futexes).
    A cached futex the map does not hold stays out: it is counted per bucket
    only (unlisted at its first lookup)."""
    listed = {futex_key(f) for f in futex_map}
    return list(futex_map) + [c for c in cached if futex_key(c) in listed]


def entry_totals(e: dict) -> tuple[int, int, int]:
    """(lookups, atomic, unlisted) of one bucket entry, CPUs summed (entries
    from dumps made before the first-seen filter have no `unlisted`)."""
    lookups = atomic = unlisted = 0
    for v in e["per_cpu"]:
        lookups += v[0]
        atomic += v[1]
        unlisted += v[3] if len(v) > 3 else 0
    return lookups, atomic, unlisted


def bucket_rows(entries: list[dict]) -> list[tuple]:
    """One BUCKET_FIELDS row per bucket entry (CPUs summed; entries of one
    bucket are added by whoever groups them)."""
    return [(e["tgid"], e["kind"], e["hash_mask"], e["bucket"], *entry_totals(e)) for e in entries]
