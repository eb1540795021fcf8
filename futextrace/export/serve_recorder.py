"""The recorder `futextrace serve` runs: bounded state, millisecond reads.

See ServeRecorder: a tracing session (record/session.py) and an ArrayReader
of its program (loading/maparrays.py), whose numpy arrays of the exact
per-bucket counts and the bounded per-futex list summary.py turns into what
the exporter serves.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from futextrace import __version__
from futextrace.analysis.timeline import build_timeline
from futextrace.procs import targets
from futextrace.record.aggregate import refcount_of, totals_of
from futextrace.record.assemble import kernel_facts, method_facts
from futextrace.record.session import TraceSession

# The map reader and its numpy (0.06-0.12 s to import) come with the first read,
# not before "serving": the exporter is ready once attached (issue 44).
if TYPE_CHECKING:
    from futextrace.loading.maparrays import ArrayReader


class ServeRecorder:
    """The recorder `futextrace serve` runs for days: its state stays bounded
    and a read costs milliseconds.

    - No thread history (the exporter shows no thread list): only thread
      events that can mark a resize are kept (TraceSession's max_thread_events = 0).
    - `forget(tgids)`, for processes gone longer than the grace period: their
      events, comm and last hash state go; their futexes are deleted from the
      kernel maps at the next read (ArrayReader, which keeps their lookups
      so the system-wide counters never go backwards). Slots of the
      per-CPU cache cannot be deleted under the BPF program: a forgotten
      process's slots still count in the totals but no longer as a process,
      and it stays in `forgotten` only while such slots (or a map entry
      flushed from them) exist, so that set is bounded by the cache's size.
    - `recording()` is the lean one of summary.py, not build_recording.
    """

    def __init__(self, opts, model=None):
        self.session = TraceSession(opts, model, history_lock=threading.Lock(), max_thread_events=0)
        self.reader: ArrayReader | None = None   # made at the first read (open_reader)
        self.forgotten: set[int] = set()
        self.sort_hints = None   # summary.SortHints: the last read's sort orders, the next read's rows come nearly sorted

    @property
    def method(self) -> str:
        return self.session.method

    def start(self) -> None:
        self.session.start()

    def open_reader(self) -> ArrayReader:
        """The map reader, made at the first read (its numpy imported then)."""
        if self.reader is None:
            from futextrace.export import summary
            from futextrace.loading.maparrays import ArrayReader
            self.reader = ArrayReader(self.session.program)
            self.sort_hints = summary.SortHints()
        return self.reader

    def run(self) -> float:
        return self.session.run()

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        self.session.close()

    def known_tgids(self) -> set[int]:
        """Every process the recorder holds anything about (events, comms)."""
        return self.session.known_tgids()

    def forget(self, tgids: set[int]) -> None:
        self.session.forget(tgids)
        self.forgotten |= tgids

    def history_size(self) -> dict[str, int]:
        """What the recorder retains, for tests and the exporter's own metrics."""
        return {**self.session.history_size(), "forgotten": len(self.forgotten)}

    def release_read_buffers(self) -> None:
        """Once a read's results are built: its buffers' pages handed back."""
        if self.reader is not None:
            self.reader.release_buffers()

    def lock_wait_columns(self) -> dict | list[dict]:
        """The changed lock_waits rows as columns ([] where not attached)."""
        return self.reader.lock_wait_columns() if self.reader is not None else []

    def forget_lock_waits(self, tgids: set[int]) -> None:
        if self.reader is not None:
            self.reader.delete_lock_waits(tgids)

    def recording(self, duration: float) -> dict:
        """The fields of a recording that reading.from_recording uses."""
        import numpy as np

        from futextrace.export import summary
        reader, session = self.open_reader(), self.session
        f = reader.futex_list(self.forgotten)   # first: it reads the map's share of the counts
        b = summary.bucket_counts(reader.bucket_columns(self.forgotten))
        private, atomic, global_ = summary.lookups_by_kind(b)
        forgotten = np.fromiter(self.forgotten, dtype=np.uint64)
        hidden = np.isin(b["tgid"], forgotten)
        # Kept while still in the cache, and only while gone: a reused PID is a new process.
        self.forgotten = {t for t in np.unique(b["tgid"][hidden]).tolist() if not targets.alive(t)}
        # One mask each, applied to every column (none at all while nothing is forgotten).
        shown = {k: v[~hidden] for k, v in b.items()} if hidden.any() else b
        gone = np.isin(f["tgid"], forgotten) if len(forgotten) else None
        listed = {k: v[~gone] for k, v in f.items()} if gone is not None and gone.any() else f
        folded = reader.deleted
        private, atomic = private + folded["private"], atomic + folded["atomic"]
        counters = {k: sum(v) for k, v in reader.counters([]).items()}
        counters["PRIVATE"] = counters.get("PRIVATE", 0) + private
        counters["GLOBAL"] = counters.get("GLOBAL", 0) + global_ + folded["global"]
        kernel, method = kernel_facts(session.model), method_facts(session)
        with session.history_lock:
            events = list(session.events)
        timeline = build_timeline(events, kernel, infer_prctl=method.get("prctl_results") == "inferred")
        g = kernel["global_hash"]["buckets_per_node"] * len(kernel.get("nodes") or [0])
        totals = totals_of(counters, {"missed_runs": reader.missed_runs()}, duration)
        totals["futex_list"] = {"futexes_unlisted": int(shown["unlisted"].sum())}   # as a recording's
        return {"tool_version": __version__, "method": method, "kernel": kernel, "totals": totals,
                "processes": summary.processes(shown, listed, self._comm, g, reader.seen_filter(),
                                                self.sort_hints),
                "refcount": refcount_of(counters, method, [{"kind": "private", "lookups": private,
                                                            "atomic": atomic}]),
                "resizes": timeline["resizes"], "hash_states": timeline["hash_states"]}

    def _comm(self, tgid: int) -> str:
        session = self.session
        with session.history_lock:
            if tgid not in session.comms:
                session.comms[tgid] = targets.comm_label(tgid)   # dropped again by forget()
            return session.comms[tgid]
