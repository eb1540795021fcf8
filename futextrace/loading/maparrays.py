"""The maps as numpy arrays: the reader `futextrace serve` runs every scrape.

ArrayReader is a MapReader (loading/maps.py: the same maps, the same
interface) that also gives the exact per-bucket counts (the `buckets` row
table, the per-futex list's share, the caches) as exact.BUCKET_FIELDS rows
and the bounded per-futex list (its row table and the lookup cache) as numpy
structured arrays with the layout of bpf/futextrace.h (BCC's ctypes view);
export/summary.py turns them into what the exporter serves. The numpy
functions here mirror loading/exact.py; tests/unit/test_exact.py checks that
both agree.

Rows of processes the exporter forgot are deleted from the tables as they
are read (a table filled with dead processes leaves no room for live ones and
makes every read longer); their lookups are kept in `deleted`, so the
system-wide counters never go backwards.
"""
from __future__ import annotations

import ctypes as ct

import numpy as np

from futextrace.kernel.layout import KIND
from futextrace.loading import exact, lockwaits, nodebuckets
from futextrace.loading.batchread import BatchBuffers, lookup_batch
from futextrace.loading.maps import MapReader
from futextrace.loading.rowtables import RowTable, row_totals

KEY_FIELDS = ("tgid", "kind", "uaddr", "hash_mask")   # a futex's key (exact.futex_key)


class ArrayReader(MapReader):
    def __init__(self, program):
        super().__init__(program)
        self.deleted = {"private": 0, "atomic": 0, "global": 0}   # lookups of deleted entries
        # The futexes map's and the lookup cache's share of the exact counts, as
        # columns that bucket_columns writes into its rows (then drops: they may
        # be views of a row table's mapping, which cannot close while they exist).
        self._map_share: list = NO_ROWS
        self._cache_share: list = NO_ROWS
        self._futex_index = AddressIndex()       # the per-futex list's rows by address, kept between reads
        self._dtypes: dict[str, np.dtype] = {}   # numpy's view of BCC's ctypes types: 4 ms each to build
        self._buffers = BatchBuffers()           # the batch reads' buffers, kept between scrapes
        # lock_waits as last read: its keys (whole, sorted), their waits and wait ns, tgids
        self._waits_last = (np.zeros(0, dtype="V1"), *(np.zeros(0, dtype=np.uint64) for _ in range(3)))
        self._waits_raw: tuple[bytes, bytes] | None = None   # the map's bytes as last read
        self._waits_order: tuple[bytes, np.ndarray] | None = None   # its keys' bytes then, and their sort order

    def lock_wait_rows(self) -> list[dict]:
        """lock_wait_columns's rows as dicts (lockwaits.read_waits's form)."""
        cols = self.lock_wait_columns()
        if isinstance(cols, list):
            return cols
        names = ("tgid", "hash_mask", "bucket", "uaddr", "waits", "wait_ns", "max_ns")
        return [dict(zip(names, row)) for row in zip(*(cols[f].tolist() for f in names))]

    def lock_wait_columns(self) -> dict[str, np.ndarray] | list[dict]:
        """The lock_waits rows whose waits or wait time changed since the last
        call, as columns (tgid, hash_mask, bucket, uaddr, waits, wait_ns,
        max_ns) in the map's order ([] where the lock tracepoints are not
        attached; read_waits's dicts where the kernel has no batch lookup): a
        WaitBook would skip the others, their high-water marks holding them
        already. Read in one batch and compared with numpy: a contended
        workload keeps 16,000 entries in the map and changes thousands of them
        a second."""
        if not lockwaits.attached(self.program):
            return []
        table = self.program.bpf["lock_waits"]
        batch = self._batch(table)
        if batch is None:
            return lockwaits.read_waits(self.program.bpf)
        kb, vb, n = batch
        raw = (bytes(kb), bytes(vb))
        if raw == self._waits_raw:
            return []   # not one byte changed since the last read: no row changed
        self._waits_raw = raw
        keys = np.frombuffer(kb, dtype=self._dtype("lock_waits.Key", table.Key), count=n)
        sd = self._dtype("lock_waits.sLeaf", table.sLeaf)
        ncpu = ct.sizeof(table.Leaf) // sd.itemsize
        stats = np.frombuffer(vb, dtype=sd, count=n * ncpu).reshape(n, ncpu)
        waits = stats["waits"].sum(axis=1, dtype=np.uint64)
        ns = stats["wait_ns"].sum(axis=1, dtype=np.uint64)
        if self._waits_order is not None and raw[0] == self._waits_order[0]:
            # The same keys in the same order (no entry added or deleted): compared
            # row by row, and the last read's sort order still holds.
            order = self._waits_order[1]
            last_keys, last_waits, last_ns, last_tgids = self._waits_last
            same = np.zeros(n, dtype=bool)
            same[order] = (last_waits == waits[order]) & (last_ns == ns[order])
            self._waits_last = (last_keys, waits[order], ns[order], last_tgids)
        else:
            whole = np.frombuffer(kb, dtype=np.dtype((np.void, keys.itemsize)), count=n)
            same = self._unchanged_waits(whole, waits, ns)
            order = np.argsort(whole)
            self._waits_last = (whole[order].copy(), waits[order], ns[order], keys["tgid"][order].copy())
            self._waits_order = (raw[0], order)
        pick = np.flatnonzero(~same & (waits > 0))
        k = keys[pick]
        return {"tgid": k["tgid"], "hash_mask": k["hash_mask"], "bucket": k["bucket"], "uaddr": k["uaddr"],
                "waits": waits[pick], "wait_ns": ns[pick], "max_ns": stats["max_ns"][pick].max(axis=1)}

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
        self._waits_raw = self._waits_order = None
        keep = ~np.isin(self._waits_last[3], np.fromiter(tgids, dtype=np.uint64))
        self._waits_last = tuple(a[keep] for a in self._waits_last)

    def release_buffers(self) -> None:
        """The batch buffers' pages handed back (BatchBuffers.release) and the
        row tables unmapped (RowTable.release): every result of a read is a
        copy, none a view of them."""
        self._buffers.release()
        for table in self._rows.values():
            table.release()

    def _batch(self, table):
        """lookup_batch into this reader's buffers, its bytes counted."""
        batch = lookup_batch(table, self._buffers)
        if batch is not None:
            self.bytes_read["syscall"] += len(batch[0]) + len(batch[1])
        return batch

    def _dtype(self, name: str, ctype) -> np.dtype:
        if name not in self._dtypes:
            self._dtypes[name] = np.dtype(ctype)
        return self._dtypes[name]

    def futex_list(self, forgotten: set[int]) -> dict[str, np.ndarray]:
        """summary.merge of the map's and the per-CPU cache's futexes (the
        map's entries of `forgotten` processes deleted, their lookups in
        `deleted`), without sorting the map: its keys are unique, so only the
        cache's slots of futexes it holds are added, each into its own row
        (found by map_positions); a cached futex the list turned away is
        counted as unlisted, not here."""
        return merged_list(*self._futex_tiers(forgotten), self._futex_index)

    def _futex_tiers(self, forgotten: set[int]):
        """The per-futex list's keys, per-CPU stats and entry_totals; the cache's used
        slots' keys and stats (one CPU's each, its number in `cpu`)."""
        table = self.rows("futexes")
        kd, sd = table.key_dtype, table.stat_dtype
        keys, stats = self._read_rows(table, forgotten)
        totals = entry_totals(stats)
        self._map_share = futex_share_parts(keys, stats, totals)   # the map's share of the exact counts
        return (keys, stats, totals, *self._cache_slots(kd, sd))

    def _cache_slots(self, kd: np.dtype, sd: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        """The used slots of the per-CPU cache in front of the map, read
        through its memory mapping (slot i belongs to CPU i // futex_cache_slots):
        their keys, and their stats with their CPU, one row a slot (not a row
        of every CPU's: at 32 CPUs that was 30 MB of zeros a read)."""
        leaf = self._dtype("futex_cache.Leaf", self.program.bpf["futex_cache"].Leaf)
        view = np.frombuffer(self.lookup_cache_buffer(), dtype=leaf)
        self.bytes_read["mapping"] += view.nbytes
        used = np.flatnonzero(view["st"]["lookups"])
        slots = view[used]        # a copy (fancy indexing): the mapping cannot close while a view exists
        del view
        # Their share of the exact per-bucket counts, as exact.cache_bucket_rows gives it.
        k, st = slots["key"], slots["st"]
        self._cache_share = [k["tgid"], k["kind"], k["hash_mask"], st["bucket"], st["lookups"],
                             st["atomic_lookups"], 0]
        keys = np.zeros(len(used), dtype=kd)
        for name in kd.names:
            keys[name] = k[name]
        stats = np.zeros(len(used), dtype=np.dtype([(name, sd[name]) for name in sd.names] + [("cpu", np.int64)]))
        for name in sd.names:
            stats[name] = st[name]
        stats["cpu"] = used // self.program.futex_cache_slots
        return keys, stats

    def _read_rows(self, table: RowTable, forgotten: set[int]) -> tuple[np.ndarray, np.ndarray]:
        """A row table's keys and per-CPU stats (rows, ncpu), the rows of
        `forgotten` processes deleted (their lookups added to `deleted`: the
        tables hold exact counts, the flush rule in bpf/futextrace.h sends a
        count to one tier only) and those deleted earlier given back, the
        lookups counted into them since then added to `deleted` too."""
        for keys, lookups, atomic in table.give_back():
            self._count_deleted_rows(keys, lookups, atomic)
        rows, keys, stats = table.read()
        self._scanned(table)
        if not forgotten:
            return keys, stats
        gone = np.flatnonzero(np.isin(keys["tgid"], np.fromiter(forgotten, dtype=np.uint64)))
        done = table.delete(rows[gone], keys[gone], stats[gone])
        gone = gone[done]         # a key not there any more: dropped at the next read
        self._count_deleted_rows(keys[gone], *row_totals(stats[gone]))
        keep = np.ones(len(keys), dtype=bool)
        keep[gone] = False
        return keys[keep], stats[keep]

    def _count_deleted_rows(self, keys: np.ndarray, lookups: np.ndarray, atomic: np.ndarray) -> None:
        for kind in np.unique(keys["kind"]).tolist():
            sel = keys["kind"] == kind
            self._count_deleted(kind, int(lookups[sel].sum()), int(atomic[sel].sum()))

    def bucket_columns(self, forgotten: set[int]) -> np.ndarray:
        """The exact per-bucket counts, one exact.BUCKET_FIELDS row per line of a
        uint64 array: the tiers of exact.bucket_entries with CPUs summed: the
        `buckets` map (entries of `forgotten` processes deleted, their lookups in
        `deleted`), the futexes map's share and the lookup cache's (read with
        numpy by futex_list(), which must run first), and the per-bucket
        cache's slots not yet flushed. Rows of one bucket are added by whoever
        groups them, so their order is free."""
        k, stats = self._read_rows(self.rows("buckets"), forgotten)
        lookups, atomic, unlisted = (stats[f].sum(axis=1, dtype=np.uint64)
                                     for f in ("lookups", "atomic_lookups", "unlisted"))
        bmap = [k["tgid"], k["kind"], k["hash_mask"], k["bucket"], lookups, atomic, unlisted]
        # The futexes map's share first: its rows keep their places from one read to the next
        # (summary.SortHint), the buckets map's move when one is inserted.
        rows = _stacked([self._map_share, bmap, self._cache_share, self._bucket_cache_share()])
        self._map_share = self._cache_share = NO_ROWS
        return rows

    def interval_arrays(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """What a `record -i` row reads (record/live.py): the per-futex list
        (futex_list's arrays) and the exact per-bucket counts with each
        bucket's node (nodebuckets.group's arrays), read as the exporter reads
        the maps: batches and memory mappings into numpy, no dict per futex."""
        keys, stats, totals, ck, cs = self._futex_tiers(set())
        futexes = merged_list(keys, stats, totals, ck, cs, self._futex_index)
        tiers = [nodebuckets.futex_map_tier(keys, stats), nodebuckets.futex_cache_tier(ck, cs)]
        bkeys, stats = self._read_rows(self.rows("buckets"), set())
        blookups = stats["lookups"].sum(axis=1, dtype=np.uint64)
        slots = self._bucket_cache_slots()
        tiers += [nodebuckets.bucket_tier(bkeys, blookups), nodebuckets.bucket_tier(slots["key"], slots["st"]["lookups"])]
        self._map_share = self._cache_share = NO_ROWS      # not used here
        return futexes, nodebuckets.group(tiers)

    def interval_counters(self, buckets: dict[str, np.ndarray]) -> dict[str, list[int]]:
        """counters() with interval_arrays's per-bucket counts: the BPF side's
        counters, CPUs summed, PRIVATE and GLOBAL with every bucket's lookups added."""
        out = {name: [sum(v)] for name, v in self.counters([]).items()}
        private = buckets["kind"] == KIND["FT_PRIVATE"]
        out["PRIVATE"][0] += int(buckets["lookups"][private].sum())
        out["GLOBAL"][0] += int(buckets["lookups"][~private].sum())
        return out

    def _bucket_cache_slots(self) -> np.ndarray:
        """The per-bucket cache's used slots (copies), read through its memory mapping."""
        leaf = self._dtype("bucket_cache.Leaf", self.program.bpf["bucket_cache"].Leaf)
        view = np.frombuffer(self._mapping("bucket_cache"), dtype=leaf)
        self.bytes_read["mapping"] += view.nbytes
        slots = view[np.flatnonzero(view["st"]["lookups"])]   # fancy indexing copies
        del view    # the mapping cannot close while a view exists
        return slots

    def _bucket_cache_share(self) -> list:
        """The per-bucket cache's used slots as columns of rows (exact.cache_bucket_rows's)."""
        slots = self._bucket_cache_slots()
        k, st = slots["key"], slots["st"]
        return [k["tgid"], k["kind"], k["hash_mask"], k["bucket"], st["lookups"], st["atomic_lookups"], st["unlisted"]]

    def _count_deleted(self, kind: int, lookups: int, atomic: int) -> None:
        if kind == KIND["FT_PRIVATE"]:
            self.deleted["private"] += lookups
            self.deleted["atomic"] += atomic
        else:
            self.deleted["global"] += lookups


NO_ROWS = [np.zeros(0, dtype=np.uint64)] * len(exact.BUCKET_FIELDS)   # columns of no rows


def _columns(*cols) -> np.ndarray:
    """Equal-length columns (the first an array; a number stands for a column
    of it) as the rows of one uint64 array, stored column by column (Fortran
    order): each column is written, and later read, as one contiguous run
    (row by row, a full map's columns cost ~4 ms a scrape)."""
    return _stacked([list(cols)])


def _stacked(parts: list[list]) -> np.ndarray:
    """The rows of several sets of columns (each as _columns takes them) in one
    uint64 array, column by column: each column written once, straight from
    where it is (a full scrape's share of the futexes map copied into an array
    of its own first, then into this one, was 3.6 MB more fresh heap, ~900 page
    faults, a read)."""
    sizes = [len(p[0]) for p in parts]
    out = np.empty((sum(sizes), len(parts[0])), dtype=np.uint64, order="F")
    at = 0
    for p, n in zip(parts, sizes):
        for i, c in enumerate(p):
            out[at:at + n, i] = c
        at += n
    return out


def futex_share_parts(keys: np.ndarray, stats: np.ndarray, totals: tuple | None = None) -> list:
    """exact.bucket_rows(exact.futex_share(...)) of the futexes map's arrays,
    with numpy (a full map every scrape), as rows added up per bucket the
    same (never unlisted): a row per futex entry whose CPUs
    all computed one bucket (a private futex's bucket is its key's), their
    counts summed, in the map's order, then a row per CPU of the others (a
    global futex seen on CPUs of different nodes). A row per futex, not per
    CPU, stays at the same place from one read to the next, which
    summary.SortHint needs, and there are fewer of them with more CPUs.
    Mirrors loading/exact.py; tests/unit/test_exact.py checks the sums agree.
    The rows' columns, as _columns takes them (views of `keys` where no row
    is left out): bucket_columns writes them into its own array."""
    lookups, bucket, atomic = stats["lookups"], stats["bucket"], stats["atomic_lookups"]
    total, total_atomic, top, low = totals if totals is not None else entry_totals(stats)
    any_cpu = total > 0
    if any_cpu.all() and (top == low).all():
        # Every entry counted, each on one bucket (a full list of private
        # futexes): the same rows as below, with no gather.
        return [keys["tgid"], keys["kind"], keys["hash_mask"], top, total, total_atomic, 0]
    one, many = np.flatnonzero(any_cpu & (top == low)), np.flatnonzero(any_cpu & (top != low))
    entry, cpu = np.nonzero(lookups[many])
    entry = many[entry]
    rows = np.concatenate([one, entry])
    return [keys["tgid"][rows], keys["kind"][rows], keys["hash_mask"][rows],
            np.concatenate([top[one], bucket[entry, cpu]]),
            np.concatenate([total[one], lookups[entry, cpu]]),
            np.concatenate([total_atomic[one], atomic[entry, cpu]]), 0]


def futex_share_columns(keys: np.ndarray, stats: np.ndarray, totals: tuple | None = None) -> np.ndarray:
    """futex_share_parts as the rows of one uint64 array."""
    return _columns(*futex_share_parts(keys, stats, totals))


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


def merged_list(keys: np.ndarray, stats: np.ndarray, totals: tuple | None, ck: np.ndarray,
                cs: np.ndarray, index: AddressIndex | None = None) -> dict[str, np.ndarray]:
    """summary.merge of the map's (keys, stats; `totals`: entry_totals(stats),
    or None) and the cache's slots it holds (`cs`: a slot's stats, or per
    CPU), without sorting the map: its keys are unique, so each cached slot
    of a futex the map holds is added into that futex's row (found by
    map_positions, with `index` if one is kept between reads); the others
    are counted as unlisted, not here. Rows in the map's order
    (tests/unit/test_exact.py checks the sums)."""
    lookups, atomic, bucket, _ = totals if totals is not None else entry_totals(stats)
    lookups, atomic, bucket = lookups.copy(), atomic.copy(), bucket.astype(np.uint64)
    pos = map_positions(ck, keys, index)
    listed = np.flatnonzero(pos >= 0)
    at = pos[listed]
    slot = cs[listed] if cs.ndim == 1 else None
    slot_lookups, slot_atomic, slot_bucket = ((slot["lookups"], slot["atomic_lookups"], slot["bucket"])
                                              if slot is not None else entry_totals(cs[listed])[:3])
    np.add.at(lookups, at, slot_lookups.astype(np.uint64))
    np.add.at(atomic, at, slot_atomic.astype(np.uint64))
    np.maximum.at(bucket, at, np.where(slot_lookups > 0, slot_bucket, 0).astype(np.uint64))
    if lookups.all():    # every row counted (a full list): no gather
        out = {f: keys[f].astype(np.uint64) for f in KEY_FIELDS}
        out.update(lookups=lookups, atomic=atomic, bucket=bucket)
        return out
    seen = np.flatnonzero(lookups)
    out = {f: keys[f][seen].astype(np.uint64) for f in KEY_FIELDS}
    out.update(lookups=lookups[seen], atomic=atomic[seen], bucket=bucket[seen])
    return out


def entry_totals(stats: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per entry of per-CPU stats (n, ncpu): lookups and atomic lookups over
    its CPUs, and the highest and lowest bucket its CPUs computed (those
    with lookups; the others hold zeros). CPU by CPU, whole columns at a
    time: numpy's reductions along a short axis go row by row."""
    lookups, bucket, atomic = stats["lookups"], stats["bucket"], stats["atomic_lookups"]
    n = len(stats)
    top, low = np.zeros(n, dtype=np.int64), np.full(n, 1 << 40, dtype=np.int64)
    total, total_atomic = np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.uint64)
    for c in range(stats.shape[1] if stats.ndim == 2 else 0):
        seen = lookups[:, c] > 0
        b = bucket[:, c].astype(np.int64)      # a bucket is never negative: 0 stands for "none" in top
        np.maximum(top, np.where(seen, b, 0), out=top)
        b[~seen] = 1 << 40
        np.minimum(low, b, out=low)
        total += lookups[:, c]
        total_atomic += atomic[:, c]
    return total, total_atomic, top, low


class AddressIndex:
    """The map's rows sorted by address, kept from one read to the next: a
    full list's keys rarely change between reads (a row's key is written
    once), so one comparison finds the last sort still good."""

    def __init__(self):
        self.addrs: np.ndarray | None = None
        self.order = self.sorted = np.zeros(0, dtype=np.int64)

    def of(self, addrs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(order, addrs[order]) of the map's addresses."""
        if self.addrs is None or not np.array_equal(addrs, self.addrs):
            self.addrs = addrs.copy()
            self.order = np.argsort(addrs, kind="stable")
            self.sorted = addrs[self.order]
        return self.order, self.sorted


def map_positions(cached: np.ndarray, mapped: np.ndarray, index: AddressIndex | None = None) -> np.ndarray:
    """The row of `mapped` (keys unique, as a map's are) holding each cached
    key, -1 where none does: >= 0 is exact.listed_futexes's rule with numpy
    (tests/unit/test_exact.py checks that both agree). With an `index` kept
    between reads, the cache's few addresses are looked up among the map's
    (sorted once); without one, the map's addresses among the cache's
    (sorted), so only the map's rows sharing an address with a cached key
    are compared whole: one pass over the map, no sort of it."""
    pos = np.full(len(cached), -1, dtype=np.int64)
    if not len(cached) or not len(mapped):
        return pos
    if index is not None:
        return _positions_among(cached, mapped, *index.of(mapped["uaddr"]))
    addrs = np.sort(cached["uaddr"])
    at = np.minimum(np.searchsorted(addrs, mapped["uaddr"]), len(addrs) - 1)
    rows = np.flatnonzero(addrs[at] == mapped["uaddr"])
    if len(rows):
        near = mapped[rows]
        order = np.argsort(near["uaddr"])
        near = _positions_among(cached, near, order, near["uaddr"][order])
        pos[near >= 0] = rows[near[near >= 0]]
    return pos


def _positions_among(cached: np.ndarray, mapped: np.ndarray, order: np.ndarray,
                     addrs: np.ndarray) -> np.ndarray:
    """map_positions among `mapped`, sorted by address (`order`, and `addrs`:
    their addresses in that order): among the map's rows with a cached
    key's address (one, mostly: other processes may use it too) the whole
    keys are compared."""
    pos = np.full(len(cached), -1, dtype=np.int64)
    first = np.searchsorted(addrs, cached["uaddr"])
    todo = np.arange(len(cached))
    j = 0
    while len(todo):   # the j-th map row with the address of each cached key still unmatched
        at = first[todo] + j
        ok = at < len(addrs)
        todo, at = todo[ok], at[ok]
        same_addr = addrs[at] == cached["uaddr"][todo]
        todo, row = todo[same_addr], order[at[same_addr]]
        hit = np.ones(len(todo), dtype=bool)
        for f in KEY_FIELDS:
            hit &= mapped[f][row] == cached[f][todo]
        pos[todo[hit]] = row[hit]
        todo = todo[~hit]
        j += 1
    return pos
