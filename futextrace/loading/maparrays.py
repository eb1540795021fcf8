"""The maps as numpy arrays: the reader `futextrace serve` runs every scrape.

ArrayReader is a MapReader (loading/maps.py: the same maps, the same
interface, the `futexes` map read in batches) that also gives the exact
per-bucket counts (the `buckets` map, the futexes map's share, the caches) as
exact.BUCKET_FIELDS rows and the bounded per-futex list (the futexes map and
the lookup cache) as numpy structured arrays with the layout of
bpf/futextrace.h (BCC's ctypes view); export/summary.py turns them into what
the exporter serves. The numpy functions here mirror loading/exact.py;
tests/unit/test_exact.py checks that both agree.

Entries of processes the exporter forgot are deleted from the maps as they
are read (a map filled with dead processes leaves no room for live ones and
makes every read longer); their lookups are kept in `deleted`, so the
system-wide counters never go backwards.
"""
from __future__ import annotations

import ctypes as ct

import numpy as np

from futextrace.kernel.layout import KIND
from futextrace.loading import bcclite, exact, lockwaits
from futextrace.loading.batchread import lookup_batch
from futextrace.loading.maps import MapReader, batched_futex_map, bucket_entry, walk_futex_map

KEY_FIELDS = ("tgid", "kind", "uaddr", "hash_mask")   # a futex's key (exact.futex_key)


class ArrayReader(MapReader):
    def __init__(self, program):
        super().__init__(program, futex_read=batched_futex_map)
        self.deleted = {"private": 0, "atomic": 0, "global": 0}   # lookups of deleted entries
        self._map_share = np.zeros((0, len(exact.BUCKET_FIELDS)), dtype=np.uint64)
        self._cache_share = self._map_share
        self._dtypes: dict[str, np.dtype] = {}   # numpy's view of BCC's ctypes types: 4 ms each to build
        # lock_waits as last read: its keys (whole, sorted), their waits and wait ns, tgids
        self._waits_last = (np.zeros(0, dtype="V1"), *(np.zeros(0, dtype=np.uint64) for _ in range(3)))

    def lock_wait_rows(self) -> list[dict]:
        """The lock_waits rows (lockwaits.read_waits's) whose waits or wait time
        changed since the last call, in the map's order ([] where the lock
        tracepoints are not attached): the exporter's WaitBook would skip the
        others, their high-water marks holding them already. Read in one batch
        and compared with numpy: a contended workload keeps 16,000 entries in
        the map and changes thousands of them a second."""
        if not lockwaits.attached(self.program):
            return []
        table = self.program.bpf["lock_waits"]
        batch = lookup_batch(table)
        if batch is None:
            return lockwaits.read_waits(self.program.bpf)
        kb, vb, n = batch
        keys = np.frombuffer(kb, dtype=self._dtype("lock_waits.Key", table.Key), count=n)
        sd = self._dtype("lock_waits.sLeaf", table.sLeaf)
        ncpu = ct.sizeof(table.Leaf) // sd.itemsize
        stats = np.frombuffer(vb, dtype=sd, count=n * ncpu).reshape(n, ncpu)
        waits = stats["waits"].sum(axis=1, dtype=np.uint64)
        ns = stats["wait_ns"].sum(axis=1, dtype=np.uint64)
        whole = np.frombuffer(kb, dtype=np.dtype((np.void, keys.itemsize)), count=n)
        same = self._unchanged_waits(whole, waits, ns)
        order = np.argsort(whole)
        self._waits_last = (whole[order].copy(), waits[order], ns[order], keys["tgid"][order].copy())
        pick = np.flatnonzero(~same & (waits > 0))
        k = keys[pick]
        return [{"tgid": t, "hash_mask": m, "bucket": b, "uaddr": u, "waits": w, "wait_ns": x, "max_ns": y}
                for t, m, b, u, w, x, y in zip(k["tgid"].tolist(), k["hash_mask"].tolist(), k["bucket"].tolist(),
                                               k["uaddr"].tolist(), waits[pick].tolist(), ns[pick].tolist(),
                                               stats["max_ns"][pick].max(axis=1).tolist())]

    def _unchanged_waits(self, whole: np.ndarray, waits: np.ndarray, ns: np.ndarray) -> np.ndarray:
        """Which entries the last read had with the same waits and wait time."""
        last_keys, last_waits, last_ns, _ = self._waits_last
        if not len(last_keys):
            return np.zeros(len(whole), dtype=bool)
        at = np.minimum(np.searchsorted(last_keys, whole), len(last_keys) - 1)
        return (last_keys[at] == whole) & (last_waits[at] == waits) & (last_ns[at] == ns)

    def delete_lock_waits(self, tgids: set[int]) -> None:
        """Drop these processes' entries from the map, and from the last read:
        their rows come again if they are still there."""
        super().delete_lock_waits(tgids)
        keep = ~np.isin(self._waits_last[3], np.fromiter(tgids, dtype=np.uint64))
        self._waits_last = tuple(a[keep] for a in self._waits_last)

    def _dtype(self, name: str, ctype) -> np.dtype:
        if name not in self._dtypes:
            self._dtypes[name] = np.dtype(ctype)
        return self._dtypes[name]

    def futex_arrays(self, forgotten: set[int]) -> tuple[np.ndarray, np.ndarray]:
        """(keys, per-CPU stats) of the map and the per-CPU cache; the map's
        entries of `forgotten` processes deleted (their lookups in `deleted`)."""
        table = self.program.bpf["futexes"]
        kd, sd = self._dtype("futexes.Key", table.Key), self._dtype("futexes.sLeaf", table.sLeaf)
        ncpu = ct.sizeof(table.Leaf) // ct.sizeof(table.sLeaf)
        batch = lookup_batch(table)
        if batch is None:   # no batch lookups: BCC's walk, into the same arrays
            keys, stats = futex_arrays_of(walk_futex_map(table), kd, sd, ncpu)
            kb = keys.tobytes()
        else:
            kb, vb, n = batch
            keys = np.frombuffer(kb, dtype=kd, count=n)
            stats = np.frombuffer(vb, dtype=sd, count=n * ncpu).reshape(n, ncpu)
        keys, stats = self._delete_forgotten(table, kb, keys, stats, forgotten)
        self._map_share = futex_share_columns(keys, stats)   # the map's share of the exact counts
        ck, cs = self._cache_arrays(kd, sd, ncpu)
        listed = in_map(ck, keys)   # a cached futex the list turned away is counted as unlisted
        return np.concatenate([keys, ck[listed]]), np.concatenate([stats, cs[listed]])

    def _cache_arrays(self, kd: np.dtype, sd: np.dtype, ncpu: int) -> tuple[np.ndarray, np.ndarray]:
        """The used slots of the per-CPU cache in front of the map, read
        through its memory mapping (slot i belongs to CPU i // futex_cache_slots)."""
        leaf = self._dtype("futex_cache.Leaf", self.program.bpf["futex_cache"].Leaf)
        view = np.frombuffer(self.lookup_cache_buffer(), dtype=leaf)
        slots = view.copy()        # a copy: the mapping cannot close while a view exists
        del view
        used = np.flatnonzero(slots["st"]["lookups"])
        # Their share of the exact per-bucket counts, as exact.cache_bucket_rows gives it.
        k, st = slots["key"][used], slots["st"][used]
        self._cache_share = _columns(k["tgid"], k["kind"], k["hash_mask"], st["bucket"], st["lookups"],
                                     st["atomic_lookups"], np.zeros(len(used), dtype=np.uint64))
        keys = np.zeros(len(used), dtype=kd)
        stats = np.zeros((len(used), ncpu), dtype=sd)
        for name in kd.names:
            keys[name] = slots["key"][name][used]
        rows, cpus = np.arange(len(used)), used // self.program.futex_cache_slots
        for name in sd.names:
            stats[name][rows, cpus] = slots["st"][name][used]
        return keys, stats

    def _delete_forgotten(self, table, kb: bytes, keys, stats, forgotten: set[int]):
        """Delete the futexes of forgotten processes from the map, their
        lookups added to `deleted` (the map holds exact counts: the flush rule
        in bpf/futextrace.h sends a cache slot to it or to `bucket_cache`, never both); the arrays without them."""
        if not forgotten:
            return keys, stats
        gone = np.isin(keys["tgid"], np.fromiter(forgotten, dtype=np.uint64))
        lib = bcclite.lib()
        for i in np.flatnonzero(gone).tolist():
            key = table.Key.from_buffer_copy(kb, i * keys.itemsize)
            if lib.bpf_delete_elem(table.map_fd, ct.byref(key)) != 0:
                gone[i] = False   # already gone: counted as read, dropped at the next read
        lookups = stats["lookups"].sum(axis=1, dtype=np.uint64)
        atomic = stats["atomic_lookups"].sum(axis=1, dtype=np.uint64)
        for kind in np.unique(keys["kind"][gone]).tolist():
            sel = gone & (keys["kind"] == kind)
            self._count_deleted(kind, int(lookups[sel].sum()), int(atomic[sel].sum()))
        return keys[~gone], stats[~gone]

    def bucket_columns(self, forgotten: set[int]) -> np.ndarray:
        """The exact per-bucket counts, one exact.BUCKET_FIELDS row per line of a
        uint64 array: the tiers of exact.bucket_entries with CPUs summed: the
        `buckets` map (entries of `forgotten` processes deleted, their lookups in
        `deleted`), the futexes map's share and the lookup cache's (read with
        numpy by futex_arrays(), which must run first), and the per-bucket
        cache's slots not yet flushed. Rows of one bucket are added by whoever
        groups them, so their order is free."""
        table, kept = self.program.bpf["buckets"], []
        for k, vals in table.items():
            if k.tgid in forgotten:
                self._count_deleted(k.kind, sum(v.lookups for v in vals), sum(v.atomic_lookups for v in vals))
                del table[k]
                continue
            kept.append(bucket_entry(k, vals))
        bmap = np.array(exact.bucket_rows(kept), dtype=np.uint64).reshape(-1, len(exact.BUCKET_FIELDS))
        return np.concatenate([bmap, self._map_share, self._cache_share, self._bucket_cache_share()])

    def _bucket_cache_share(self) -> np.ndarray:
        """The per-bucket cache's used slots as rows (exact.cache_bucket_rows's),
        read through its memory mapping."""
        leaf = self._dtype("bucket_cache.Leaf", self.program.bpf["bucket_cache"].Leaf)
        view = np.frombuffer(self._mapping("bucket_cache"), dtype=leaf)
        slots = view[np.flatnonzero(view["st"]["lookups"])]   # fancy indexing copies
        del view
        k, st = slots["key"], slots["st"]
        return _columns(k["tgid"], k["kind"], k["hash_mask"], k["bucket"], st["lookups"], st["atomic_lookups"],
                        st["unlisted"])

    def _count_deleted(self, kind: int, lookups: int, atomic: int) -> None:
        if kind == KIND["FT_PRIVATE"]:
            self.deleted["private"] += lookups
            self.deleted["atomic"] += atomic
        else:
            self.deleted["global"] += lookups


def _columns(*cols: np.ndarray) -> np.ndarray:
    """Equal-length columns as the rows of one uint64 array."""
    out = np.empty((len(cols[0]), len(cols)), dtype=np.uint64)
    for i, c in enumerate(cols):
        out[:, i] = c
    return out


def futex_share_columns(keys: np.ndarray, stats: np.ndarray) -> np.ndarray:
    """exact.bucket_rows(exact.futex_share(...)) of the futexes map's arrays,
    with numpy (a full map every scrape), as the rows of a uint64 array: a row
    per futex entry and CPU with lookups, under the bucket that CPU computed,
    never unlisted. Mirrors loading/exact.py; tests/unit/test_exact.py checks
    that both agree."""
    entry, cpu = np.nonzero(stats["lookups"])
    st = stats[entry, cpu]
    return _columns(keys["tgid"][entry], keys["kind"][entry], keys["hash_mask"][entry], st["bucket"],
                    st["lookups"], st["atomic_lookups"], np.zeros(len(entry), dtype=np.uint64))


def futex_share_rows(keys: np.ndarray, stats: np.ndarray) -> list[tuple]:
    """futex_share_columns as a list of row tuples (exact.bucket_rows's form)."""
    return list(map(tuple, futex_share_columns(keys, stats).tolist()))


def futex_arrays_of(futexes: list[dict], kd: np.dtype, sd: np.dtype, ncpu: int) -> tuple[np.ndarray, np.ndarray]:
    """Futex entries (MapReader.futex_map's dicts) as (keys, per-CPU stats) arrays."""
    keys = np.zeros(len(futexes), dtype=kd)
    stats = np.zeros((len(futexes), ncpu), dtype=sd)
    fields = ("lookups", "atomic_lookups", "bucket", "node", "kernel_bucket")
    for i, f in enumerate(futexes):
        for name in KEY_FIELDS:
            keys[name][i] = f[name]
        for cpu, v in enumerate(f["per_cpu"][:ncpu]):
            for name, x in zip(fields, v):
                stats[name][i, cpu] = x
    return keys, stats


def in_map(cached: np.ndarray, mapped: np.ndarray) -> np.ndarray:
    """Which cached futex keys the map holds too (whole keys compared, on
    the few whose address matches one in the map): exact.listed_futexes's
    rule with numpy (tests/unit/test_exact.py checks that both agree)."""
    near = np.isin(cached["uaddr"], mapped["uaddr"])
    if not near.any():
        return near
    sel = np.isin(mapped["uaddr"], cached["uaddr"][near])
    near[near] = np.isin(_whole_keys(cached[near]), _whole_keys(mapped[sel]))
    return near


def _whole_keys(keys: np.ndarray) -> np.ndarray:
    """Each key's KEY_FIELDS as one opaque 32-byte value, compared whole by np.isin."""
    return np.ascontiguousarray(_columns(*(keys[f] for f in KEY_FIELDS))).view(
        np.dtype((np.void, 8 * len(KEY_FIELDS)))).ravel()
