"""Bounded, monotonic per-process series for Prometheus.

A host has thousands of processes; a Prometheus series per process would not
scale. Each update, the `max_processes` processes with the most lookups since
the previous update keep their own label set (pid, comm); every other
process's new lookups are added to one `comm="other"` series. Each delta goes
to exactly one series, so no series ever goes backwards and the sum over all
series is every lookup seen, except those of series dropped after exit:

- a labelled process that falls out of the top N stops being exported; its
  count is kept and resumes if it comes back, so its series never decreases;
- a labelled process that exited keeps its final value for `grace_s`
  seconds (so a scrape sees its last lookups), then is dropped; at most
  `max_processes` exited ones are kept: at most 2N + 1 label sets per hash.
"""
from __future__ import annotations

from dataclasses import dataclass, field

HASHES = ("private", "global")
OTHER = "other"


@dataclass
class _Proc:
    comm: str
    raw: dict[str, int] = field(default_factory=dict)     # high-water of the cumulative reading
    own: dict[str, int] = field(default_factory=dict)     # lookups counted in its own series


class HighWater:
    """Cumulative values that never go backwards: a value read lower than
    before (a racing per-CPU cache flush) keeps the previous one."""

    def __init__(self):
        self.values: dict = {}

    def update(self, key, raw: int) -> int:
        v = max(self.values.get(key, 0), raw)
        self.values[key] = v
        return v


class SeriesBook:
    def __init__(self, max_processes: int, grace_s: float):
        self.max_processes = max_processes
        self.grace_s = grace_s
        self.procs: dict[int, _Proc] = {}
        self.other: dict[str, int] = {h: 0 for h in HASHES}
        self.labelled: set[int] = set()
        self.exited: dict[int, float] = {}   # labelled pid -> when it was first seen gone

    def update(self, readings: dict[int, tuple[str, dict[str, int]]], now: float, alive) -> None:
        """readings: pid -> (comm, {hash: cumulative lookups}); alive(pid) -> bool."""
        deltas = self._deltas(readings)
        self._relabel(deltas, now, alive)
        for pid, d in deltas.items():
            into = self.procs[pid].own if pid in self.labelled else self.other
            for h, n in d.items():
                into[h] = into.get(h, 0) + n
        # Processes gone from the maps and not exported: nothing to keep.
        for pid in [p for p in self.procs if p not in readings and p not in self.labelled]:
            del self.procs[pid]

    def _deltas(self, readings) -> dict[int, dict[str, int]]:
        deltas = {}
        for pid, (comm, lookups) in readings.items():
            p = self.procs.get(pid)
            if p is None or (p.comm != comm and pid not in self.labelled):
                # New, or the PID was reused: the tgid's map counts carry over, so keep
                # the high-water marks or the old process's lookups count twice.
                p = self.procs[pid] = _Proc(comm, raw=dict(p.raw) if p else {})
            d = {}
            for h, raw in lookups.items():
                if raw > p.raw.get(h, 0):
                    d[h] = raw - p.raw.get(h, 0)
                    p.raw[h] = raw
            if d:
                deltas[pid] = d
        return deltas

    def _relabel(self, deltas, now: float, alive) -> None:
        busy = sorted(deltas, key=lambda pid: (-sum(deltas[pid].values()), pid))
        top = busy[:self.max_processes]
        keep = set(top)
        # Fewer busy processes than N: labelled ones that are idle but alive stay.
        for pid in sorted(self.labelled - keep, key=lambda p: -sum(self.procs[p].own.values())):
            if pid in self.exited:
                continue
            if not alive(pid):
                self.exited[pid] = now
            elif len(keep) < self.max_processes:
                keep.add(pid)
        for pid in [p for p in self.exited if p in keep]:
            del self.exited[pid]   # the PID is busy again
        # Exited ones stay for the grace period, the most recent N at most.
        recent = sorted((p for p, t in self.exited.items() if now - t < self.grace_s),
                        key=lambda p: -self.exited[p])[:self.max_processes]
        self.exited = {p: self.exited[p] for p in recent}
        self.labelled = keep | set(recent)

    def series(self) -> list[tuple[str, str, str, int]]:
        """(pid, comm, hash, value) of every exported lookups series, `other` included."""
        out = []
        for pid in sorted(self.labelled):
            p = self.procs[pid]
            out += [(str(pid), p.comm, h, v) for h, v in sorted(p.own.items())]
        out += [("", OTHER, h, v) for h, v in self.other.items()]
        return out
