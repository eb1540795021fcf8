"""Bucket-lock wait series for `serve`: futextrace_bucket_lock_wait_seconds_total
and futextrace_bucket_lock_waits_total, labelled pid, comm, cause.

Each read takes the lock_waits map's cumulative rows (bpf/lock_waits.h) and
adds every bucket's new waits to one cause: `collision` once two or more
distinct futexes have waited on that bucket since the exporter started,
`same_futex` while one has, `unknown` while none could be named. Each delta
goes to exactly one series, so no series goes backwards. Processes are
bounded as the lookups series are (export/series.py): those SeriesBook
labels keep their own series, every other process's waits go to
comm="other" (pid=""). Entries of forgotten processes are deleted from the map
(by the recorder's map reader, loading/maps.py).
"""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily

from futextrace.analysis.lockwaits import CAUSES
from futextrace.export.series import OTHER


class LockWaitSeries:
    """The exporter's wait counters per label and cause, from one cumulative
    wait book (WaitBook's rules on numpy columns: waitarrays.py)."""

    def __init__(self):
        self.book = None   # waitarrays.ArrayWaitBook, made at the first rows (numpy with it)
        self.own: dict[int, dict[str, list[int]]] = {}  # tgid -> cause -> [waits, ns]
        self.other = {c: [0, 0] for c in CAUSES}

    def update(self, rows: list[dict] | dict, labelled: set[int]) -> None:
        """`rows`: the changed lock_waits rows, as columns (ArrayReader.lock_wait_columns)
        or dicts (lockwaits.read_waits)."""
        if isinstance(rows, list) and not rows:
            return
        from futextrace.export.waitarrays import ArrayWaitBook, columns_of
        if isinstance(rows, list):
            rows = columns_of(rows)
        self.book = self.book or ArrayWaitBook()
        for bucket, (w, ns, cause) in self.book.feed(rows).items():
            tgid = bucket[0]
            into = (self.own.setdefault(tgid, {c: [0, 0] for c in CAUSES}) if tgid in labelled
                    else self.other)
            into[cause][0] += w
            into[cause][1] += ns

    def forget(self, tgids: set[int]) -> None:
        """Processes the exporter forgot: their series and high-water marks go."""
        for t in tgids:
            self.own.pop(t, None)
        if self.book is not None:
            self.book.forget(tgids)

    def families(self, labelled: set[int], comm_label) -> list:
        waits = CounterMetricFamily(
            "futextrace_bucket_lock_waits", "Waits for a private futex hash bucket's lock (its "
            "spinlock slow path, lock:contention_begin/end), by cause: collision (two or more "
            "futexes waited on that bucket), same_futex (one futex), unknown (the waiter's futex "
            "not named); processes bounded as futextrace_lookups", labels=["pid", "comm", "cause"])
        secs = CounterMetricFamily(
            "futextrace_bucket_lock_wait_seconds", "Time spent waiting for private futex hash "
            "bucket locks, by cause as futextrace_bucket_lock_waits", labels=["pid", "comm", "cause"])
        for tgid in sorted(t for t in self.own if t in labelled):
            for c in CAUSES:
                w, ns = self.own[tgid][c]
                waits.add_metric([str(tgid), comm_label(tgid), c], w)
                secs.add_metric([str(tgid), comm_label(tgid), c], ns / 1e9)
        for c in CAUSES:
            waits.add_metric(["", OTHER, c], self.other[c][0])
            secs.add_metric(["", OTHER, c], self.other[c][1] / 1e9)
        return [waits, secs]


def read_rows(recorder) -> list[dict] | dict:
    """The lock_waits rows the recorder's map reader gives, as columns where it
    can ([] where not attached, or for a recorder that reads no map)."""
    rows = getattr(recorder, "lock_wait_columns", None)
    return rows() if rows is not None else []


def forget(recorder, book: LockWaitSeries, tgids: set[int]) -> None:
    """Processes the exporter forgot: their series go, and their map entries."""
    book.forget(tgids)
    delete = getattr(recorder, "forget_lock_waits", None)
    if delete is not None:
        delete(tgids)
