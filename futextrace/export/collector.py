"""The prometheus_client Collector: reads the recorder's maps when scraped.

Prometheus' guidance for exporters: collect synchronously on each scrape. A
scrape reads the kernel maps through the ServeRecorder (its map reader's
arrays, then the lean summary of serve_recorder, the same numbers `record`
shows) and answers with
that read, so a sample is as fresh as its scrape. Two limits:

- the read budget: a scrape waits at most `budget` seconds for its read; a
  read that takes longer (a full map on a starved CPU) goes on in the
  background, the scrape gets the last complete read, and the age of what it
  got is served (futextrace_exporter_read_age_seconds), never hidden;
- the floor: a scrape closer than the floor to the last read gets that read
  again, so many scrapers, or a scraper gone wild, cannot make the exporter
  read the maps more often. The floor is `min_interval`, or COST_FACTOR times
  the CPU the last read took if that is longer (so reading costs at most
  1/COST_FACTOR of a CPU); both stay below a 1 s scrape interval for a full
  65536-futex map (0.08-0.10 s of CPU per read on the build machine).

Nothing is done per event. After each read, processes gone for the grace
period are forgotten by the recorder (Retention; serve_recorder.ServeRecorder.forget),
so the exporter's state follows the live processes, not every process ever
seen. The exporter's own lookups (its pid: Python's locks are futexes) are
left out of the per-process series unless `include_self`, as BCC's tools
leave out their own pid; the system-wide counters still count them.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter

from futextrace.export import lockwaits
from futextrace.export.families import exporter_families, families
from futextrace.export.reading import from_recording, result_name
from futextrace.export.series import HighWater, SeriesBook
from futextrace.loading.loader import release_freed_heap
from futextrace.procs import targets
from futextrace.recording import Recording

COST_FACTOR = 5
READ_BUDGET_S = 0.5     # below Prometheus' scrape_timeout even at a 1 s scrape interval


class FutexCollector:
    def __init__(self, recorder, max_processes: int, grace_s: float, min_interval: float,
                 clock=time.monotonic, alive=targets.alive, background: bool = True,
                 budget: float = READ_BUDGET_S, include_self: bool = False):
        self.recorder = recorder
        self.min_interval = min_interval
        self.clock = clock
        self.alive = alive
        self.background = background     # False: every read on the scrape's thread, whatever it takes
        self.budget = budget
        self.own_pid = None if include_self else os.getpid()
        self.book = SeriesBook(max_processes, grace_s)
        self.retention = Retention(grace_s)
        self.folded_resizes: Counter = Counter()   # resizes of forgotten processes
        self.highwater = HighWater()
        self.lock_book = lockwaits.LockWaitSeries()   # bucket-lock wait series (export/lockwaits.py)
        self.stats = {"reads": 0, "errors": 0, "read_s": 0.0, "floor_s": min_interval,
                      "over_budget": 0, "age_s": 0.0}
        self.lock = threading.Lock()       # guards the cached answer and the read in flight
        self.read_lock = threading.Lock()  # one read at a time
        self.started = clock()
        self.read_at: float | None = None  # when the read being served (or in flight) began
        self.served_at: float | None = None   # when the read being served began
        self.reader: threading.Thread | None = None
        self.cached: list = []
        self.closed = False

    def collect(self):
        """This scrape's read, unless the last one is younger than the floor.
        The scrape waits up to the budget for it (the very first scrape, with
        nothing to fall back on, waits for it whatever it takes); past the
        budget it gets the last complete read, its age served with it."""
        with self.lock:
            if self.closed:
                return iter(())
            now = self.clock()
            in_flight = self.reader if self.reader and self.reader.is_alive() else None
            if in_flight is None and self.read_at is not None and now - self.read_at < self.stats["floor_s"]:
                return self._answer(now)
            reader = in_flight   # a read over its budget still running: wait for it, not a second one
            if reader is None:
                self.read_at = now   # claimed: later scrapes do not start another read
                if self.background:
                    reader = self.reader = threading.Thread(target=self._read, args=(now,), daemon=True,
                                                            name="futextrace-read")
                    reader.start()
        if reader is None:
            self._read(now)
        else:
            reader.join(None if not self.cached else self.budget)
            if reader.is_alive():
                self.stats["over_budget"] += 1
        with self.lock:
            return self._answer(self.clock())

    def _answer(self, now: float):
        self.stats["age_s"] = 0.0 if self.served_at is None else max(0.0, now - self.served_at)
        return iter(self.cached + exporter_families(self.book, self.stats))

    def _read(self, now: float) -> None:
        """Read, or keep serving the last read if this one fails (counted and
        said in one line on stderr: a scrape thread has no one to raise to)."""
        try:
            self._read_maps(now)
        except Exception as e:   # noqa: BLE001  (the exporter must outlive one bad read)
            self.stats["errors"] += 1
            print(f"futextrace: warning: reading the maps failed ({type(e).__name__}: {e}); "
                  "serving the last read", file=sys.stderr, flush=True)

    def _read_maps(self, now: float) -> None:
        with self.read_lock:
            if self.closed:
                return
            t0, cpu0, bytes0 = time.perf_counter(), time.thread_time(), self._bytes_read()
            rec = self.recorder.recording(now - self.started)
            reading = from_recording(rec)
            reading.processes.pop(self.own_pid, None)   # not its own series (include_self: kept)
            reading.resizes = dict(Counter(reading.resizes) + self.folded_resizes)
            self._forget_gone(rec, reading, now)
            self.book.update({pid: (p.comm, p.lookups) for pid, p in reading.processes.items()},
                             now, self.alive)
            self.stats["reads"] += 1
            self.stats["history"] = getattr(self.recorder, "history_size", dict)()
            self.lock_book.update(lockwaits.read_rows(self.recorder), self.book.labelled)
            fams = families(reading, self.book, self.highwater) + self.lock_book.families(
                self.book.labelled, lambda t: self.book.procs[t].comm if t in self.book.procs else "")
            # A read's numpy temporaries are freed, but glibc keeps the heap they
            # grew: handed back, 4-5 MiB less RSS in steady state (benchmarks/footprint.py);
            # and the batch buffers' pages, 7 MiB with full maps (BatchBuffers.release).
            release_freed_heap()
            getattr(self.recorder, "release_read_buffers", lambda: None)()
            self.stats["read_s"] = time.perf_counter() - t0
            self.stats["read_cpu_s"] = time.thread_time() - cpu0
            self.stats["bytes_read"] = {k: v - bytes0.get(k, 0) for k, v in self._bytes_read().items()}
            # The floor follows the CPU the read took, not its wall time: on a busy
            # host the read waits for a CPU, and that costs nothing.
            self.stats["floor_s"] = max(self.min_interval, COST_FACTOR * self.stats["read_cpu_s"])
        with self.lock:
            self.cached = fams
            self.served_at = now

    def _bytes_read(self) -> dict[str, int]:
        """Bytes the recorder's map reader read so far, by way (syscall, mapping); {} where it does not count."""
        reader = getattr(self.recorder, "reader", None)
        return dict(getattr(reader, "bytes_read", None) or {})

    def _forget_gone(self, rec: Recording, reading, now: float) -> None:
        """Processes gone for the grace period leave the recorder (events,
        comm, map entries), their resizes folded into one counter here."""
        forget = getattr(self.recorder, "forget", None)
        if forget is None:
            return
        known = set(reading.processes) | self.recorder.known_tgids()
        expired = self.retention.expired(known, now, self.alive)
        if expired:
            self.folded_resizes.update((z["trigger"], result_name(z["result"])) for z in rec["resizes"]
                                       if z["pid"] in expired and z.get("result") is not None)
            forget(expired)
            lockwaits.forget(self.recorder, self.lock_book, expired)

    def close(self):
        """After this, scrapes get no futextrace metrics and no read is running
        (the maps are going away)."""
        with self.lock:
            self.closed = True
        with self.read_lock:
            pass


class Retention:
    """Which processes to forget: those seen gone for `grace_s` seconds."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.gone: dict[int, float] = {}   # tgid -> when first seen gone

    def expired(self, tgids: set[int], now: float, alive) -> set[int]:
        for t in tgids - self.gone.keys():
            if not alive(t):
                self.gone[t] = now
        for t in self.gone.keys() - tgids:   # forgotten by other means: nothing to keep
            del self.gone[t]
        out = {t for t, since in self.gone.items() if now - since >= self.grace_s}
        for t in out:
            del self.gone[t]
        return out
