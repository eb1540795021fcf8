"""Reading the futexes map fast enough to serve it every second.

`Recorder.dump_futexes()` walks the per-CPU hash one key at a time through
BCC (a get-next-key and a lookup syscall per futex, and ctypes objects for
every CPU's value): ~7 s for a full 65536-entry map on the 2-CPU build
machine. Here the map comes out in a few BPF_MAP_LOOKUP_BATCH calls into one
buffer, and keys and per-CPU values are unpacked with struct formats derived
from BCC's ctypes view of bpf/futextrace.h (no second layout definition).
Kernels that refuse batch lookups get the recorder's own walk.
"""
from __future__ import annotations

import ctypes as ct
import errno
import struct
import threading

import numpy as np

from futextrace import __version__
from futextrace.analysis.timeline import build_timeline
from futextrace.export import summary
from futextrace.record import targets
from futextrace.record.aggregate import _refcount, _totals
from futextrace.record.recorder import Recorder

_CODES = {ct.c_uint8: "B", ct.c_int8: "b", ct.c_uint16: "H", ct.c_int16: "h", ct.c_uint32: "I",
          ct.c_int32: "i", ct.c_uint64: "Q", ct.c_int64: "q"}
BATCH = 4096   # entries per syscall


def struct_format(ctype) -> tuple[str, list[str]]:
    """A struct module format for a flat ctypes Structure of integers, with
    explicit padding from the field offsets; and the field names in order."""
    fmt, names, at = "<", [], 0
    for name, ftype in ctype._fields_:
        field_ = getattr(ctype, name)
        code = next((c for t, c in _CODES.items() if ct.sizeof(t) == ct.sizeof(ftype)
                     and t._type_ == ftype._type_), None)
        if code is None:
            raise TypeError(f"{ctype.__name__}.{name}: not a plain integer")
        fmt += "x" * (field_.offset - at) + code
        names.append(name)
        at = field_.offset + field_.size
    fmt += "x" * (ct.sizeof(ctype) - at)
    assert struct.calcsize(fmt) == ct.sizeof(ctype)
    return fmt, names


def lookup_batch(table) -> tuple[memoryview, memoryview, int] | None:
    """(keys buffer, values buffer, count) of the whole map, or None where
    the kernel has no batch lookup for it."""
    from bcc import lib
    n = table.max_entries
    keys = (table.Key * n)()
    values = (table.Leaf * n)()     # BCC's PerCpuHash leaf: one value per possible CPU
    token_in, token_out, count = ct.c_uint32(0), ct.c_uint32(0), ct.c_uint32(0)
    total, first = 0, True
    while total < n:
        count.value = min(BATCH, n - total)
        res = lib.bpf_lookup_batch(table.map_fd, None if first else ct.byref(token_in),
                                   ct.byref(token_out),
                                   ct.byref(keys, ct.sizeof(table.Key) * total),
                                   ct.byref(values, ct.sizeof(table.Leaf) * total), ct.byref(count))
        err = ct.get_errno()
        total += count.value
        if res != 0:
            if err == errno.ENOENT:
                break   # the whole map was read
            if first and err in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, 524):
                return None
            raise OSError(err, f"BPF_MAP_LOOKUP_BATCH failed on {table.name if hasattr(table, 'name') else 'map'}")
        token_in.value, first = token_out.value, False
    # Views, not copies: a full map's buffers are megabytes, read every scrape.
    return (memoryview(keys).cast("B")[:ct.sizeof(table.Key) * total],
            memoryview(values).cast("B")[:ct.sizeof(table.Leaf) * total], total)


class BatchRecorder(Recorder):
    """The recorder, with the futexes map read in batches (see the module doc);
    the per-CPU cache is read through its MapReader (loading/maps.py)."""

    def dump_futexes(self) -> list[dict]:
        table = self.program.bpf["futexes"]
        batch = lookup_batch(table)
        if batch is None:
            return super().dump_futexes()
        keys, values, n = batch
        kfmt, knames = struct_format(table.Key)
        sfmt, snames = struct_format(table.sLeaf)
        ncpu = ct.sizeof(table.Leaf) // ct.sizeof(table.sLeaf)
        stat_fields = [snames.index(f) for f in ("lookups", "atomic_lookups", "bucket", "node", "kernel_bucket")]
        key_fields = [knames.index(f) for f in ("tgid", "kind", "uaddr", "hash_mask")]
        stats = [[v[i] for i in stat_fields] for v in struct.iter_unpack(sfmt, values)]
        futexes = []
        for i, k in enumerate(struct.iter_unpack(kfmt, keys)):
            tgid, kind, uaddr, mask = (k[j] for j in key_fields)
            futexes.append({"tgid": tgid, "kind": kind, "uaddr": uaddr, "hash_mask": mask,
                            "per_cpu": stats[i * ncpu:(i + 1) * ncpu]})
        return futexes + self._cache_futexes()

    def _cache_futexes(self) -> list[dict]:
        """The per-CPU cache in front of the map, as Recorder.dump_futexes reads it."""
        out = []
        nslots, ncpus = self.program.cache_slots, self.program.ncpu_ids
        for idx, s in self.maps._cache_items():
            per_cpu = [[0, 0, 0, 0, 0] for _ in range(ncpus)]
            st = s.st
            per_cpu[idx // nslots] = [st.lookups, st.atomic_lookups, st.bucket, st.node, st.kernel_bucket]
            out.append({"tgid": s.key.tgid, "kind": s.key.kind, "uaddr": s.key.uaddr,
                        "hash_mask": s.key.hash_mask, "per_cpu": per_cpu})
        return out


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
        if batch is None:   # no batch lookups: BCC's walk (the cache included), into the same arrays
            keys, stats = _arrays(Recorder.dump_futexes(self), kd, sd, ncpu)
            return self._delete_forgotten(table, keys.tobytes(), keys, stats)
        kb, vb, n = batch
        keys = np.frombuffer(kb, dtype=kd, count=n)
        stats = np.frombuffer(vb, dtype=sd, count=n * ncpu).reshape(n, ncpu)
        keys, stats = self._delete_forgotten(table, kb, keys, stats)
        ck, cs = self._cache_arrays(kd, sd, ncpu)
        return np.concatenate([keys, ck]), np.concatenate([stats, cs])

    def _cache_arrays(self, kd: np.dtype, sd: np.dtype, ncpu: int) -> tuple[np.ndarray, np.ndarray]:
        """The used slots of the per-CPU cache in front of the map, read
        through its memory mapping (slot i belongs to CPU i // cache_slots)."""
        if self.maps._cache_map is None:
            self.maps._cache_items()   # maps the cache
        view = np.frombuffer(self.maps._cache_map, dtype=np.dtype(self.program.bpf["fcache"].Leaf))
        slots = view.copy()        # a copy: the mapping cannot close while a view exists
        del view
        used = np.flatnonzero(slots["st"]["lookups"])
        keys = np.zeros(len(used), dtype=kd)
        stats = np.zeros((len(used), ncpu), dtype=sd)
        for name in kd.names:
            keys[name] = slots["key"][name][used]
        rows, cpus = np.arange(len(used)), used // self.program.cache_slots
        for name in sd.names:
            stats[name][rows, cpus] = slots["st"][name][used]
        return keys, stats

    def _delete_forgotten(self, table, kb: bytes, keys, stats):
        """Delete the futexes of forgotten processes from the map, their
        lookups added to `folded`; the arrays without them."""
        if not self.forgotten:
            return keys, stats
        gone = np.isin(keys["tgid"], np.fromiter(self.forgotten, dtype=np.uint64))
        from bcc import lib
        for i in np.flatnonzero(gone).tolist():
            key = table.Key.from_buffer_copy(kb, i * keys.itemsize)
            if lib.bpf_delete_elem(table.map_fd, ct.byref(key)) != 0:
                gone[i] = False   # not in the map (a cache slot): counted as it is, deleted once flushed
        priv = keys["kind"] == summary.PRIVATE
        lookups = stats["lookups"].sum(axis=1, dtype=np.uint64)
        self.folded["private"] += int(lookups[gone & priv].sum())
        self.folded["global"] += int(lookups[gone & ~priv].sum())
        self.folded["atomic"] += int(stats["atomic_lookups"][gone & priv].sum())
        return keys[~gone], stats[~gone]

    def recording(self, duration: float) -> dict:
        """The fields of a recording that reading.from_recording uses."""
        f = summary.merge(*self.futex_arrays())
        private, atomic, global_ = summary.lookups_by_kind(f)
        hidden = np.isin(f["tgid"], np.fromiter(self.forgotten, dtype=np.uint64))
        # Kept while still in the cache, and only while gone: a reused PID is a new process.
        self.forgotten = {t for t in np.unique(f["tgid"][hidden]).tolist() if not targets.alive(t)}
        shown = {k: v[~hidden] for k, v in f.items()}
        private, atomic = private + self.folded["private"], atomic + self.folded["atomic"]
        counters = {k: sum(v) for k, v in self.maps.counters([]).items()}
        counters["PRIVATE"] = counters.get("PRIVATE", 0) + private
        counters["GLOBAL"] = counters.get("GLOBAL", 0) + global_ + self.folded["global"]
        kernel, method = self._kernel_facts(), self._method_facts()
        with self.history_lock:
            events = list(self.events)
        timeline = build_timeline(events, kernel, infer_prctl=method.get("prctl_results") == "inferred")
        g = kernel["global_hash"]["buckets_per_node"] * len(kernel.get("nodes") or [0])
        return {"tool_version": __version__, "method": method, "kernel": kernel,
                "totals": _totals(counters, {"missed_runs": self.missed_runs()}, duration),
                "processes": summary.processes(shown, self._comm, g),
                "refcount": _refcount(counters, method, [{"kind": "private", "lookups": private,
                                                          "atomic": atomic}]),
                "resizes": timeline["resizes"], "hash_states": timeline["hash_states"]}

    def _comm(self, tgid: int) -> str:
        with self.history_lock:
            if tgid not in self.comms:
                self.comms[tgid] = targets.comm_of(tgid)   # dropped again by forget()
            return self.comms[tgid]


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
