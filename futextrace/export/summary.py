"""The futexes map summarised with numpy: what a scrape needs, cheaply.

record/aggregate.py's build_recording makes the full recording from a list of
dicts; on a full map (65536 futexes, 2-CPU build machine) that is ~1 s of CPU
per read (cProfile: merging duplicate keys with a CpuStat per CPU and futex
0.35 s, unpacking 0.3 s, hash summaries and histograms 0.3 s). The exporter
serves only, per process, its lookups by hash and the spread of its busiest
private hash. This computes those fields of the recording (the names of
docs/json-schema.md, so reading.from_recording serves them unchanged) from
arrays: keys and per-CPU stats straight from the map's batch buffers.

The rules are aggregate.py's: the cache and the map may both hold a futex
(counts added); futexes without lookups are not counted; a bucket's spread is
over all the hash's buckets; collisions are futexes sharing a bucket
(futexes - 1, summed over buckets).
"""
from __future__ import annotations

import numpy as np

from futextrace.kernel.layout import KIND
from futextrace.kernel.sizing import buckets_of
from futextrace.loading.exact import BUCKET_FIELDS
from futextrace.loading.maparrays import KEY_FIELDS
from futextrace.record.aggregate import KIND_NAMES, filter_estimates

PRIVATE = KIND["FT_PRIVATE"]


class SortHint:
    """The order one sort found at the last read, to start the next one from.
    The rows come in nearly the same order at each read (the maps' order,
    then the caches'), and most of them with the same values: the maps'
    keys and buckets rarely change, the caches' rows do at every read. Rows
    at the same place with the same value as at the last read are still in
    the last order's sequence, so only the others are sorted (a full map's
    exact counts: ~10,000 cache rows among ~94,000), and merged in: 1-3 ms,
    where numpy's stable sort from the last order took ~3 (every cache row
    out of place) and a fresh sort 5. Rows all the same as at the last read
    get the last order and runs back. Only the speed depends on it: any
    order is sorted."""

    def __init__(self):
        self.order: np.ndarray | None = None
        self.packed: np.ndarray | None = None   # the last read's rows, packed
        self.starts: np.ndarray | None = None   # where their runs begin in that order

    def runs(self, packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """_runs of these packed rows: the last read's, where they are the same."""
        last, was = self.order, self.packed
        if last is None:
            order = np.argsort(packed)
        else:
            n, m = len(packed), min(len(packed), len(was))
            same = np.zeros(n, dtype=bool)
            np.equal(packed[:m], was[:m], out=same[:m])
            if n == len(was) and same.all():
                return last, self.starts
            kept = last[last < m]
            kept = kept[same[kept]]                  # sorted still: their values are the last read's
            moved = np.flatnonzero(~same)
            moved = moved[np.argsort(packed[moved])]
            order = np.insert(kept, np.searchsorted(packed[kept], packed[moved], side="right"), moved)
        self.order, self.packed, self.starts = order, packed, _starts([packed[order]])
        return order, self.starts


class SortHints(dict):
    """A SortHint per sort of summary.py, kept by the caller between reads."""

    def __missing__(self, name: str) -> SortHint:
        hint = self[name] = SortHint()
        return hint


def _runs(cols: list[np.ndarray], hint: SortHint | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(order, starts): the rows sorted by cols, and where each run of equal
    cols begins in that order. Rows in the order of np.lexsort(cols[::-1])
    up to the order within a run of equal rows (which every caller only sums
    or takes the max of): one argsort of the columns packed into a uint64
    where their values fit (tgid, mask, bucket do). A lexsort of three
    columns of a full map cost 5 ms a scrape; numpy's quicksort of one
    uint64 column (vectorised) well under 1."""
    widths = [int(c.max()).bit_length() if len(c) else 0 for c in cols]
    if len(cols) < 2 or sum(widths) > 64 or any(c.dtype.kind not in "ui" or (len(c) and c.min() < 0) for c in cols):
        order = np.lexsort(cols[::-1])
        return order, _starts([c[order] for c in cols])
    packed = np.zeros(len(cols[0]), dtype=np.uint64)
    for c, w in zip(cols, widths):      # in place: a full map's temporaries were 5 MB of fresh heap a read
        np.left_shift(packed, np.uint64(w), out=packed)
        np.bitwise_or(packed, c, out=packed, dtype=np.uint64, casting="unsafe")
    if hint is not None:
        return hint.runs(packed)
    order = np.argsort(packed)
    return order, _starts([packed[order]])      # one column to compare: the packed rows, sorted


def merge(keys: np.ndarray, stats: np.ndarray) -> dict[str, np.ndarray]:
    """One row per distinct key with lookups: tgid, kind, uaddr, hash_mask,
    lookups, atomic, bucket (CPUs and duplicate keys summed).
    keys: structured (n,), stats: structured (n, ncpu)."""
    lookups = stats["lookups"].sum(axis=1, dtype=np.uint64)
    atomic = stats["atomic_lookups"].sum(axis=1, dtype=np.uint64)
    # The bucket as a CPU that saw the futex wrote it (the others hold zeros).
    bucket = np.where(stats["lookups"] > 0, stats["bucket"], 0).max(axis=1) if len(keys) else np.zeros(0)
    if not len(keys):
        empty = np.zeros(0, dtype=np.uint64)
        return {f: empty for f in KEY_FIELDS + ("lookups", "atomic", "bucket")}
    order, starts = _runs([keys[f] for f in KEY_FIELDS])
    out = {f: keys[f][order[starts]].astype(np.uint64) for f in KEY_FIELDS}
    out["lookups"] = np.add.reduceat(lookups[order], starts)
    out["atomic"] = np.add.reduceat(atomic[order], starts)
    out["bucket"] = np.maximum.reduceat(bucket[order], starts).astype(np.uint64)
    seen = out["lookups"] > 0
    return {f: v[seen] for f, v in out.items()}


def _private_spread(f: dict[str, np.ndarray], b: dict[str, np.ndarray],
                    hint: SortHint | None = None) -> dict[tuple[int, int], dict]:
    """(tgid, hash_mask) of each private hash -> distinct futexes, collisions
    (futexes sharing a bucket) and the futexes beyond the list: per bucket,
    its entries in the per-futex list `f` plus the first-seen filter's count
    of the others (`unlisted` of the per-bucket counts `b`)."""
    fp, bp = f["kind"] == PRIVATE, (b["kind"] == PRIVATE) & (b["unlisted"] > 0)
    tgid = np.concatenate([f["tgid"][fp], b["tgid"][bp]])
    mask = np.concatenate([f["hash_mask"][fp], b["hash_mask"][bp]])
    bucket = np.concatenate([f["bucket"][fp], b["bucket"][bp]])
    n = np.concatenate([np.ones(int(fp.sum()), dtype=np.uint64), b["unlisted"][bp]])
    unlisted = np.concatenate([np.zeros(int(fp.sum()), dtype=np.uint64), b["unlisted"][bp]])
    if not len(tgid):
        return {}
    order, starts = _runs([tgid, mask, bucket], hint)  # one run per bucket
    futexes = np.add.reduceat(n[order], starts)
    beyond = np.add.reduceat(unlisted[order], starts)
    htgid, hmask = tgid[order[starts]], mask[order[starts]]
    hstarts = _starts([htgid, hmask])                   # one run per hash: the buckets are sorted by hash
    used = np.diff(np.append(hstarts, len(htgid)))
    nfutex = np.add.reduceat(futexes, hstarts)
    nbeyond = np.add.reduceat(beyond, hstarts)
    return {(t, m): {"collisions": int(nfutex[i] - used[i]), "distinct_futexes": int(nfutex[i]),
                     "unlisted": int(nbeyond[i])}
            for i, (t, m) in enumerate(zip(htgid[hstarts].tolist(), hmask[hstarts].tolist()))}


def bucket_counts(rows) -> dict[str, np.ndarray]:
    """The exact per-bucket counts (the `buckets` map and the cache's slots),
    rows of BUCKET_FIELDS (tuples, or the lines of a uint64 array), as arrays."""
    cols = np.asarray(rows, dtype=np.uint64).reshape(-1, len(BUCKET_FIELDS))
    return dict(zip(BUCKET_FIELDS, cols.T))


def _hash_spread(tgid: np.ndarray, mask: np.ndarray, per_bucket: np.ndarray) -> dict[tuple[int, int], dict]:
    """(tgid, hash_mask) of each private hash -> busiest bucket over the mean
    and buckets used, from its buckets' exact counts (one row per bucket,
    the map's and the cache's rows of one bucket added), sorted by hash."""
    if not len(tgid):
        return {}
    hstarts = _starts([tgid, mask])
    total = np.add.reduceat(per_bucket, hstarts)
    busiest = np.maximum.reduceat(per_bucket, hstarts)
    used = np.add.reduceat((per_bucket > 0).astype(np.int64), hstarts)
    out = {}
    for i, (t, m) in enumerate(zip(tgid[hstarts].tolist(), mask[hstarts].tolist())):
        mean = int(total[i]) / max(buckets_of(m), int(used[i]))
        out[(t, m)] = {"max_over_mean": int(busiest[i]) / mean if mean else 0.0, "used": int(used[i])}
    return out


def _starts(sorted_cols: list[np.ndarray]) -> np.ndarray:
    """Where each run of equal rows begins in columns already sorted."""
    change = np.zeros(len(sorted_cols[0]), dtype=bool)
    change[:1] = True
    for c in sorted_cols:
        change[1:] |= c[1:] != c[:-1]
    return np.flatnonzero(change)


def processes(b: dict[str, np.ndarray], f: dict[str, np.ndarray], comms, global_buckets: int,
              seen: dict, hints: SortHints | None = None) -> list[dict]:
    """The recording's `processes`, with the hash fields reading.py uses:
    each process's hashes busiest first (kind, buckets, lookups, and for
    private ones the bucket spread). Lookups and spread come from the exact
    per-bucket counts `b`; futexes and collisions from the per-futex list `f`
    and the first-seen filter's counts beyond it, as estimates where
    aggregate.py makes them (`seen`: MapReader.seen_filter()). `hints`: the
    caller's SortHints, kept from one read to the next (speed only)."""
    if not len(b["tgid"]):
        return []
    # Global hashes are one hash whatever the node (aggregate.py's rows zero their mask).
    mask = np.where(b["kind"] == PRIVATE, b["hash_mask"], 0)
    # One sort, by hash and bucket: a run of buckets is a run of hashes too.
    order, bstarts = _runs([b["tgid"], b["kind"], mask, b["bucket"]], hints["buckets"] if hints is not None else None)
    per_bucket = np.add.reduceat(b["lookups"][order], bstarts)
    first = order[bstarts]   # each bucket's first row
    bt, bk, bm = (c[first] for c in (b["tgid"], b["kind"], mask))
    starts = _starts([bt, bk, bm])
    lookups = np.add.reduceat(per_bucket, starts).tolist()
    priv = bk == PRIVATE
    spread = _hash_spread(bt[priv], bm[priv], per_bucket[priv])
    listed = _private_spread(f, b, hints["futexes"] if hints is not None else None)
    by_tgid: dict[int, list[dict]] = {}
    for t, k, m, n in zip(bt[starts].tolist(), bk[starts].tolist(), bm[starts].tolist(), lookups):
        if not n:
            continue
        kind = KIND_NAMES.get(k, str(k))
        h = {"kind": kind, "buckets": buckets_of(m) if k == PRIVATE else global_buckets, "lookups": n}
        if k == PRIVATE:
            fl = listed.get((t, m), {"collisions": 0, "distinct_futexes": 0, "unlisted": 0})
            h.update(imbalance=spread[(t, m)], collisions=fl["collisions"],
                     distinct_futexes=fl["distinct_futexes"], futex_detail={"futexes_unlisted": fl["unlisted"]})
            est = filter_estimates(fl["distinct_futexes"], fl["collisions"], fl["unlisted"], seen)
            if est:
                h["estimates"] = est
        by_tgid.setdefault(t, []).append(h)
    procs = [{"pid": t, "comm": comms(t), "lookups": sum(h["lookups"] for h in hs),
              "hashes": sorted(hs, key=lambda h: -h["lookups"])} for t, hs in by_tgid.items()]
    return sorted(procs, key=lambda p: -p["lookups"])


def lookups_by_kind(f: dict[str, np.ndarray]) -> tuple[int, int, int]:
    """(private lookups, their atomic share, global lookups) of the exact
    per-bucket counts (or any rows with kind, lookups and atomic)."""
    priv = f["kind"] == PRIVATE
    return (int(f["lookups"][priv].sum()), int(f["atomic"][priv].sum()),
            int(f["lookups"][~priv].sum()))
