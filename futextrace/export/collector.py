"""The prometheus_client Collector: reads the recorder's maps when scraped.

A scrape reads the kernel maps through the Recorder (map dump, then
build_recording, the same numbers `record` shows) unless the last read is
younger than `min_interval`, in which case it serves that read again: many
scrapers, or a scraper gone wild, cannot make the exporter read the maps more
often than that floor. Nothing is done per event.
"""
from __future__ import annotations

import threading
import time

from futextrace.export.families import families
from futextrace.export.reading import from_recording
from futextrace.export.series import HighWater, SeriesBook
from futextrace.record import targets


class FutexCollector:
    def __init__(self, recorder, max_processes: int, grace_s: float, min_interval: float,
                 clock=time.monotonic, alive=targets.alive):
        self.recorder = recorder
        self.min_interval = min_interval
        self.clock = clock
        self.alive = alive
        self.book = SeriesBook(max_processes, grace_s)
        self.highwater = HighWater()
        self.stats = {"reads": 0, "read_s": 0.0}
        self.lock = threading.Lock()   # one read at a time; scrapes run in their own threads
        self.started = clock()
        self.read_at: float | None = None
        self.cached: list = []
        self.closed = False

    def collect(self):
        with self.lock:
            if self.closed:
                return iter(())
            now = self.clock()
            if self.read_at is None or now - self.read_at >= self.min_interval:
                self.cached = self._read(now)
                self.read_at = now
            return iter(self.cached)

    def _read(self, now: float) -> list:
        t0 = time.perf_counter()
        reading = from_recording(self.recorder.recording(now - self.started))
        self.book.update({pid: (p.comm, p.lookups) for pid, p in reading.processes.items()},
                         now, self.alive)
        self.stats["reads"] += 1
        self.stats["read_s"] = time.perf_counter() - t0
        return families(reading, self.book, self.highwater, self.stats)

    def close(self):
        """After this, scrapes get no futextrace metrics (the maps are going away)."""
        with self.lock:
            self.closed = True
