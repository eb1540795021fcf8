"""The recorder `futextrace serve` runs: bounded state, millisecond reads.

See ServeRecorder. The exact per-bucket counts (the `buckets` map and the
cache) and the bounded per-futex list (the futexes map, read in batches as
mapread.py reads it) become numpy arrays that summary.py turns into what the
exporter serves.
"""
from __future__ import annotations

import ctypes as ct
import threading

import numpy as np

from futextrace import __version__
from futextrace.analysis.timeline import build_timeline
from futextrace.export import summary
from futextrace.export.mapread import BatchRecorder, lookup_batch
from futextrace.loading import exact
from futextrace.loading.maps import bucket_entry
from futextrace.record import targets
from futextrace.record.aggregate import refcount_of, totals_of


class ServeRecorder(BatchRecorder):
    """The recorder `futextrace serve` runs for days: its state stays bounded
    and a read costs milliseconds.

    - No thread history (the exporter shows no thread list): only thread
      events that can mark a resize are kept (Recorder.max_thread_events = 0).
    - `forget(tgids)`, for processes gone longer than the grace period: their
      events, comm and last hash state go; their futexes are deleted from the
      kernel map at the next read (a map filled with dead processes leaves no
      room for live ones and makes every read longer), their lookups kept in
      `folded` so the system-wide counters never go backwards. Slots of the
      per-CPU cache cannot be deleted under the BPF program: a forgotten
      process's slots still count in the totals but no longer as a process,
      and it stays in `forgotten` only while such slots (or a map entry
      flushed from them) exist, so that set is bounded by the cache's size.
    - `recording()` is the lean one of summary.py, not build_recording.
    """

    def __init__(self, opts, model=None):
        super().__init__(opts, model)
        self.max_thread_events = 0
        self.history_lock = threading.Lock()   # the ring-buffer callback vs forget() on a scrape thread
        self.forgotten: set[int] = set()
        self.folded = {"private": 0, "atomic": 0, "global": 0}
        self._map_rows: list[tuple] = []

    def _on_event(self, ctx, data, size):
        with self.history_lock:
            super()._on_event(ctx, data, size)

    def known_tgids(self) -> set[int]:
        """Every process the recorder holds anything about (events, comms)."""
        with self.history_lock:
            return set(self.comms) | {e["tgid"] for e in self.events}

    def forget(self, tgids: set[int]) -> None:
        with self.history_lock:
            self.events = [e for e in self.events if e["tgid"] not in tgids]
            for t in tgids:
                self.comms.pop(t, None)
                self._last_state.pop(t, None)
        self.forgotten |= tgids

    def history_size(self) -> dict[str, int]:
        """What the recorder retains, for tests and the exporter's own metrics."""
        return {"events": len(self.events), "comms": len(self.comms), "states": len(self._last_state),
                "forgotten": len(self.forgotten)}

    def futex_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, per-CPU stats) of the map and the per-CPU cache, as numpy
        structured arrays with the layout of bpf/futextrace.h (BCC's ctypes view)."""
        table = self.program.bpf["futexes"]
        kd, sd = np.dtype(table.Key), np.dtype(table.sLeaf)
        ncpu = ct.sizeof(table.Leaf) // ct.sizeof(table.sLeaf)
        batch = lookup_batch(table)
        if batch is None:   # no batch lookups: BCC's walk, into the same arrays
            keys, stats = _arrays(self.maps.futex_map(), kd, sd, ncpu)
            kb = keys.tobytes()
        else:
            kb, vb, n = batch
            keys = np.frombuffer(kb, dtype=kd, count=n)
            stats = np.frombuffer(vb, dtype=sd, count=n * ncpu).reshape(n, ncpu)
        keys, stats = self._delete_forgotten(table, kb, keys, stats)
        self._map_rows = futex_share_rows(keys, stats)   # the map's share of the exact counts
        ck, cs = self._cache_arrays(kd, sd, ncpu)
        listed = in_map(ck, keys)   # a cached futex the list turned away is counted as unlisted
        return np.concatenate([keys, ck[listed]]), np.concatenate([stats, cs[listed]])

    def _cache_arrays(self, kd: np.dtype, sd: np.dtype, ncpu: int) -> tuple[np.ndarray, np.ndarray]:
        """The used slots of the per-CPU cache in front of the map, read
        through its memory mapping (slot i belongs to CPU i // fcache_slots)."""
        view = np.frombuffer(self.maps.lookup_cache_buffer(), dtype=np.dtype(self.program.bpf["fcache"].Leaf))
        slots = view.copy()        # a copy: the mapping cannot close while a view exists
        del view
        used = np.flatnonzero(slots["st"]["lookups"])
        keys = np.zeros(len(used), dtype=kd)
        stats = np.zeros((len(used), ncpu), dtype=sd)
        for name in kd.names:
            keys[name] = slots["key"][name][used]
        rows, cpus = np.arange(len(used)), used // self.program.fcache_slots
        for name in sd.names:
            stats[name][rows, cpus] = slots["st"][name][used]
        return keys, stats

    def _delete_forgotten(self, table, kb: bytes, keys, stats):
        """Delete the futexes of forgotten processes from the map, their
        lookups added to `folded` (the map holds exact counts: the flush rule
        in bpf/futextrace.h sends a cache slot to it or to `bcache`, never both); the arrays without them."""
        if not self.forgotten:
            return keys, stats
        gone = np.isin(keys["tgid"], np.fromiter(self.forgotten, dtype=np.uint64))
        from bcc import lib
        for i in np.flatnonzero(gone).tolist():
            key = table.Key.from_buffer_copy(kb, i * keys.itemsize)
            if lib.bpf_delete_elem(table.map_fd, ct.byref(key)) != 0:
                gone[i] = False   # already gone: counted as read, dropped at the next read
        lookups = stats["lookups"].sum(axis=1, dtype=np.uint64)
        atomic = stats["atomic_lookups"].sum(axis=1, dtype=np.uint64)
        for kind in np.unique(keys["kind"][gone]).tolist():
            sel = gone & (keys["kind"] == kind)
            self._fold(kind, int(lookups[sel].sum()), int(atomic[sel].sum()))
        return keys[~gone], stats[~gone]

    def bucket_rows(self) -> list[tuple]:
        """The exact per-bucket counts as exact.BUCKET_FIELDS rows, the tiers of
        exact.bucket_entries with CPUs summed: the `buckets` map (entries of
        forgotten processes deleted, their lookups folded), the futexes map's
        share (read with numpy by futex_arrays(), which must run first) and
        both caches' slots not yet flushed."""
        table, kept = self.program.bpf["buckets"], []
        for k, vals in table.items():
            if k.tgid in self.forgotten:
                self._fold(k.kind, sum(v.lookups for v in vals), sum(v.atomic_lookups for v in vals))
                del table[k]
                continue
            kept.append(bucket_entry(k, vals))
        return (exact.bucket_rows(kept) + self._map_rows
                + exact.cache_bucket_rows(self.maps.cached_bucket_rows()))

    def _fold(self, kind: int, lookups: int, atomic: int) -> None:
        if kind == summary.PRIVATE:
            self.folded["private"] += lookups
            self.folded["atomic"] += atomic
        else:
            self.folded["global"] += lookups

    def recording(self, duration: float) -> dict:
        """The fields of a recording that reading.from_recording uses."""
        f = summary.merge(*self.futex_arrays())   # first: it reads the map's share of the counts
        b = summary.bucket_counts(self.bucket_rows())
        private, atomic, global_ = summary.lookups_by_kind(b)
        forgotten = np.fromiter(self.forgotten, dtype=np.uint64)
        hidden = np.isin(b["tgid"], forgotten)
        # Kept while still in the cache, and only while gone: a reused PID is a new process.
        self.forgotten = {t for t in np.unique(b["tgid"][hidden]).tolist() if not targets.alive(t)}
        shown = {k: v[~hidden] for k, v in b.items()}
        listed = {k: v[~np.isin(f["tgid"], forgotten)] for k, v in f.items()}
        private, atomic = private + self.folded["private"], atomic + self.folded["atomic"]
        counters = {k: sum(v) for k, v in self.maps.counters([]).items()}
        counters["PRIVATE"] = counters.get("PRIVATE", 0) + private
        counters["GLOBAL"] = counters.get("GLOBAL", 0) + global_ + self.folded["global"]
        kernel, method = self._kernel_facts(), self._method_facts()
        with self.history_lock:
            events = list(self.events)
        timeline = build_timeline(events, kernel, infer_prctl=method.get("prctl_results") == "inferred")
        g = kernel["global_hash"]["buckets_per_node"] * len(kernel.get("nodes") or [0])
        totals = totals_of(counters, {"missed_runs": self.missed_runs()}, duration)
        totals["futex_list"] = {"futexes_unlisted": int(shown["unlisted"].sum())}   # as a recording's
        return {"tool_version": __version__, "method": method, "kernel": kernel, "totals": totals,
                "processes": summary.processes(shown, listed, self._comm, g, self.maps.seen_filter()),
                "refcount": refcount_of(counters, method, [{"kind": "private", "lookups": private,
                                                            "atomic": atomic}]),
                "resizes": timeline["resizes"], "hash_states": timeline["hash_states"]}

    def _comm(self, tgid: int) -> str:
        with self.history_lock:
            if tgid not in self.comms:
                self.comms[tgid] = targets.comm_label(tgid)   # dropped again by forget()
            return self.comms[tgid]


def futex_share_rows(keys: np.ndarray, stats: np.ndarray) -> list[tuple]:
    """exact.bucket_rows(exact.futex_share(...)) of the futexes map's arrays,
    with numpy (a full map every scrape): a row per futex entry and CPU with
    lookups, under the bucket that CPU computed, never unlisted. Mirrors
    loading/exact.py; tests/unit/test_exact.py checks that both agree."""
    entry, cpu = np.nonzero(stats["lookups"])
    st = stats[entry, cpu]
    return list(zip(keys["tgid"][entry].tolist(), keys["kind"][entry].tolist(),
                    keys["hash_mask"][entry].tolist(), st["bucket"].tolist(),
                    st["lookups"].tolist(), st["atomic_lookups"].tolist(), [0] * len(entry)))


def _arrays(futexes: list[dict], kd: np.dtype, sd: np.dtype, ncpu: int) -> tuple[np.ndarray, np.ndarray]:
    """Recorder.dump_futexes-style dicts as (keys, per-CPU stats) arrays."""
    keys = np.zeros(len(futexes), dtype=kd)
    stats = np.zeros((len(futexes), ncpu), dtype=sd)
    fields = ("lookups", "atomic_lookups", "bucket", "node", "kernel_bucket")
    for i, f in enumerate(futexes):
        for name in ("tgid", "kind", "uaddr", "hash_mask"):
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
    have = set(zip(*(mapped[f][sel].tolist() for f in summary.KEY_FIELDS)))
    for i in np.flatnonzero(near).tolist():
        near[i] = tuple(cached[f][i].item() for f in summary.KEY_FIELDS) in have
    return near
