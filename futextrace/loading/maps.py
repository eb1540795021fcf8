"""The one reader of a loaded Program's maps (and of what the kernel counts
about it), as plain data: the per-CPU counters, every bucket of the exact
counts (the `buckets_*` row table), every futex of the bounded per-futex list
(`futexes_*`), the per-CPU caches in front of both, the first-seen filter,
the bucket-lock waits, and probe runs the kernel skipped. The tracing session
(record/session.py) only attaches, polls and closes; `record` and `serve`
read through a MapReader.

The caches, the first-seen filter and the row tables (loading/rowtables.py)
are read through their memory mappings. `serve` reads the same maps into
numpy arrays (loading/maparrays.py's ArrayReader).

The layouts come from BCC's ctypes view of bpf/futextrace.h; the plain data is
what record/aggregate.py documents and turns into a recording.
"""
from __future__ import annotations

import ctypes as ct
import mmap
import os

import numpy as np

from futextrace.kernel.layout import COUNTER, KIND
from futextrace.loading import callsites, exact, lockwaits
from futextrace.loading.loader import MAX_BUCKETS, SEEN_K, SEEN_WORDS_PER_KEY
from futextrace.loading.rowtables import ROWS_BUCKETS, ROWS_FUTEXES, RowTable

TRACEFS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
FUTEX_STAT_FIELDS = ("lookups", "atomic_lookups", "bucket", "node", "kernel_bucket")   # futex_entry's per_cpu
BUCKET_STAT_FIELDS = ("lookups", "atomic_lookups", "kernel_checked", "unlisted")      # bucket_entry's per_cpu


class MapReader:
    """Reads one loaded Program's maps; close() drops the memory mappings."""

    def __init__(self, program):
        self.program = program
        self._maps: dict[str, mmap.mmap] = {}     # memory mappings of the caches and the filter
        self._rows: dict[str, RowTable] = {}      # the row tables, mapped at the first read
        self._seen_last: tuple[np.ndarray, float] | None = None   # the filter's words at the last read, and its rate
        # Bytes read from the maps, cumulative: copied by bpf(2) (the buffers it filled),
        # and scanned through memory mappings (no copy by the kernel).
        self.bytes_read = {"syscall": 0, "mapping": 0}

    def read(self) -> tuple[list[dict], list[dict]]:
        """(per-futex list: map and cache, exact per-bucket counts), reading
        the futexes map once for both."""
        fmap = self.futex_map()
        return self.futexes(fmap), self.buckets(fmap)

    def dump(self) -> dict:
        """Everything the maps hold, as plain data (see record/aggregate.py)."""
        futexes, buckets = self.read()
        return {"counters": self.counters(buckets), "buckets": buckets, "futexes": futexes,
                "futex_capacity": self.program.max_futexes, "seen_filter": self.seen_filter(),
                "missed_runs": self.missed_runs(), **self.lock_waits()}

    def lookup_cache_buffer(self) -> mmap.mmap:
        """The lookup cache's memory mapping (made at the first read): its
        slots in struct cache_slot's layout, CPU n's at [n * futex_cache_slots]."""
        return self._mapping("futex_cache")

    def close(self) -> None:
        while self._maps:
            self._maps.popitem()[1].close()
        while self._rows:
            self._rows.popitem()[1].close()

    def rows(self, name: str) -> RowTable:
        """The row table `futexes` or `buckets` (bpf/maps.h), mapped once."""
        if name not in self._rows:
            which, size = ((ROWS_FUTEXES, self.program.max_futexes) if name == "futexes"
                           else (ROWS_BUCKETS, MAX_BUCKETS))
            self._rows[name] = RowTable(self.program, name, which, size)
        return self._rows[name]

    def _scanned(self, table: RowTable) -> None:
        """Count the bytes a row table's reads scanned since the last call."""
        self.bytes_read["mapping"] += table.bytes_scanned
        table.bytes_scanned = 0

    def counters(self, buckets: list[dict]) -> dict[str, list[int]]:
        """Per-CPU counters. The BPF side counts in PRIVATE and GLOBAL only the
        lookups no map could hold (the hot path does not touch a counter); the
        lookups of every bucket (map and cache) are added here, so both count all."""
        table = self.program.bpf["counters"]
        out = {}
        for name, idx in COUNTER.items():
            if name == "FTC_NR":
                continue
            out[name.removeprefix("FTC_")] = list(table[ct.c_int(idx)])
            self.bytes_read["syscall"] += ct.sizeof(table.Leaf)
        for b in buckets:
            col = out["PRIVATE" if b["kind"] == KIND["FT_PRIVATE"] else "GLOBAL"]
            for cpu, v in enumerate(b["per_cpu"][:len(col)]):
                col[cpu] += v[0]   # lookups
        return out

    def buckets(self, futex_map: list[dict]) -> list[dict]:
        """The exact per-bucket counts (exact.bucket_entries): the `buckets` map,
        the `futexes` map's entries by bucket (`futex_map`: futex_map()'s output,
        read once by the caller), and both caches' slots (counts not yet flushed)."""
        return exact.bucket_entries(self.bucket_map(), futex_map, self.cached_bucket_rows(),
                                    self.program.ncpu_ids)

    def bucket_map(self) -> list[dict]:
        """The exact counts' rows (not the caches), as bucket entries."""
        return self._entries("buckets", ("tgid", "kind", "hash_mask", "bucket", "node"), BUCKET_STAT_FIELDS)

    def _entries(self, name: str, key_fields: tuple, stat_fields: tuple) -> list[dict]:
        """A row table's rows as plain data: `key_fields` of each key, and
        `per_cpu`, each CPU's `stat_fields` as a list."""
        table = self.rows(name)
        _, keys, stats = table.read()
        self._scanned(table)
        per_cpu = np.stack([stats[f].astype(np.int64) for f in stat_fields], axis=-1).tolist()
        key_rows = list(zip(*(keys[f].tolist() for f in key_fields)))
        del keys, stats
        table.release()     # plain data now: the read's views are gone
        return [{**dict(zip(key_fields, k)), "per_cpu": v} for k, v in zip(key_rows, per_cpu)]

    def cached_bucket_rows(self):
        """(cpu, tgid, kind, hash_mask, bucket, node, [lookups, atomic, kernel_checked, unlisted])
        of every used slot of both caches: the counts not yet flushed to a map."""
        for idx, s in self._cache_items():
            st = s.st
            yield (idx // self.program.futex_cache_slots, s.key.tgid, s.key.kind, s.key.hash_mask, st.bucket, st.node,
                   [st.lookups, st.atomic_lookups, st.lookups if st.kernel_bucket != exact.UNKNOWN else 0, 0])
        for idx, s in self._bucket_cache_items():
            yield (idx // self.program.bucket_cache_slots, s.key.tgid, s.key.kind, s.key.hash_mask, s.key.bucket, s.key.node,
                   [s.st.lookups, s.st.atomic_lookups, s.st.kernel_checked, s.st.unlisted])

    def _cache_items(self):
        """(index, slot) of every used slot of the lookup cache, read through
        its memory mapping: one pass over the lookup counts, no syscalls."""
        return self._used_slots("futex_cache")

    def _bucket_cache_items(self):
        """(index, slot) of every used slot of the per-bucket cache (the same way)."""
        return self._used_slots("bucket_cache")

    def _mapping(self, name: str) -> mmap.mmap:
        table = self.program.bpf[name]
        if name not in self._maps:
            size = ct.sizeof(table.Leaf) * table.max_entries
            self._maps[name] = mmap.mmap(table.map_fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        return self._maps[name]

    def _used_slots(self, name: str):
        buf = self._mapping(name)
        leaf = self.program.bpf[name].Leaf
        # The u64 `st.lookups` of each slot, located through BCC's ctypes view of futextrace.h.
        at = leaf.st.offset + dict(leaf._fields_)["st"].lookups.offset
        words = ct.sizeof(leaf) // 8
        # numpy for the scan: the lookup cache has up to FUTEX_CACHE_BUDGET / 64 slots.
        used = np.flatnonzero(np.frombuffer(buf, dtype=np.uint64)[at // 8::words]).tolist()
        return [(i, leaf.from_buffer_copy(buf, i * words * 8)) for i in used]

    def seen_filter(self) -> dict:
        """The first-seen filter's size and its false-positive rate now: the
        chance that a new futex's bits are all set already. Its two words lie
        in lines picked independently, and each of its SEEN_K bits in a word
        lands as set as that word is: the square of the mean over words."""
        table = self.program.bpf["seen"]
        if "seen" not in self._maps:
            self._maps["seen"] = mmap.mmap(table.map_fd, 8 * table.max_entries, mmap.MAP_SHARED, mmap.PROT_READ)
        view = np.frombuffer(self._maps["seen"], dtype=np.uint64)
        self.bytes_read["mapping"] += view.nbytes
        # The rate depends on each word's count of bits set and on nothing else:
        # those counts (a byte a word) are kept and compared, not the words (a
        # copy of 4 MiB the exporter held for good).
        counts = np.bitwise_count(view)
        del view    # the mapping cannot close while a view exists
        last = self._seen_last
        if last is not None and np.array_equal(counts, last[0]):
            rate = last[1]      # the same counts, the same rate (compared: under 1 ms, computed: 10+)
        else:
            # (bits / 64) ** SEEN_K per word through a 65-entry table of the same numpy
            # expression: the same values, so the same mean, without a power per word.
            share = (np.arange(65) / 64.0) ** SEEN_K
            rate = float(np.mean(share[counts])) ** SEEN_WORDS_PER_KEY
            self._seen_last = (counts, rate)
        return {"words": len(counts), "bits_per_key": SEEN_K * SEEN_WORDS_PER_KEY,
                "words_per_key": SEEN_WORDS_PER_KEY, "false_positive_rate": rate}

    def futex_map(self) -> list[dict]:
        """The per-futex list's rows (not the cache), as plain data: part of the exact counts."""
        return self._entries("futexes", ("tgid", "kind", "uaddr", "hash_mask"), FUTEX_STAT_FIELDS)

    def futexes(self, futex_map: list[dict]) -> list[dict]:
        """Per-futex counts: `futex_map` (futex_map()'s output) and the lookup
        cache's unflushed counts of the futexes it lists (exact.listed_futexes)."""
        nslots, ncpus = self.program.futex_cache_slots, self.program.ncpu_ids
        cached = []
        for idx, s in self._cache_items():
            per_cpu = [type(s.st)()] * ncpus
            per_cpu[idx // nslots] = s.st
            cached.append(futex_entry(s.key, per_cpu))
        return exact.listed_futexes(futex_map, cached)

    def missed_runs(self) -> int:
        """Hits the kernel dropped on our probes, shown and never silent: a run
        of our program skipped because one was already running on that CPU
        (Program.missed_runs), or a kprobe the kernel itself missed
        (kprobe_profile, when BCC created the probe through tracefs)."""
        missed = self.program.missed_runs()
        kprobes = self.program.method == "kprobe"
        return missed + (_kprobe_profile_misses(f"_bcc_{os.getpid()}") if kprobes else 0)

    def lock_waits(self) -> dict:
        """The bucket-lock waits' part of the dump (loading/lockwaits.py)."""
        return lockwaits.dump(self.program)

    def lock_wait_rows(self) -> list[dict]:
        """The lock_waits map's rows ([] where the lock tracepoints are not attached)."""
        return lockwaits.read_waits(self.program.bpf) if lockwaits.attached(self.program) else []

    def call_sites(self) -> list[dict]:
        """The user stacks of first lookups and lock waits (loading/callsites.py)."""
        return callsites.read(self.program)

    def delete_lock_waits(self, tgids: set[int]) -> None:
        """Drop these processes' lock_waits entries (serve's forgotten processes)."""
        if lockwaits.attached(self.program):
            lockwaits.delete_waits(self.program.bpf, tgids)


def futex_entry(k, per_cpu_vals) -> dict:
    """A futex's key and per-CPU futex_stat (ctypes: a lookup-cache slot's) as a futex entry."""
    return {"tgid": k.tgid, "kind": k.kind, "uaddr": k.uaddr, "hash_mask": k.hash_mask,
            "per_cpu": [[v.lookups, v.atomic_lookups, v.bucket, v.node, v.kernel_bucket]
                        for v in per_cpu_vals]}


def _kprobe_profile_misses(tag: str) -> int:
    """Misses of this process's BCC kprobes (event names ending in `tag`)."""
    for base in TRACEFS:
        try:
            with open(f"{base}/kprobe_profile") as f:
                return sum(int(parts[2]) for parts in map(str.split, f)
                           if len(parts) >= 3 and parts[0].endswith(tag))
        except OSError:
            continue
    return 0
