"""`snapshot --watch`: follow processes' futex hashes as they come and go."""
from __future__ import annotations

import time

from futextrace.errors import EnvironmentProblem
from futextrace.procs import procevents
from futextrace.procs.hashread import check_ready, open_iterator
from futextrace.procs.hashrows import iterator_rows

COMPARED = ("threads", "buckets", "kind", "mode", "refcount", "pending")
MIN_GAP_S = 0.2          # re-reads triggered by process events are at most this frequent
EXIT_WAIT_S = 3.0        # how long a vanished process's exit event (its status) is awaited
STOP_CHECK_S = 0.5       # longest single wait, so stop() and vanished processes are seen


def changes(before: dict[int, dict], after: dict[int, dict]) -> list[tuple[str, dict]]:
    """("new"|"changed"|"gone", row) between two reads, by PID."""
    out = [("gone", before[pid]) for pid in before if pid not in after]
    for pid, row in after.items():
        if pid not in before:
            out.append(("new", row))
        elif any(before[pid].get(k) != row.get(k) for k in COMPARED):
            out.append(("changed", row))
    return out


class Watcher:
    """Re-reads the task iterator when the proc connector reports a fork, exec
    or exit (at most every MIN_GAP_S), and every `interval` s regardless: a
    deferred resize or a prctl changes a hash without any process event.
    A process leaves the iterator at exit_mm(), before the kernel sends its
    exit event: its "gone" waits for that event (the exit status), at most
    EXIT_WAIT_S. Without the connector it re-reads every `interval` s, and says so."""

    def __init__(self, model, pids: list[int], interval: float):
        check_ready(model, pids)
        self.it, why = open_iterator(model)
        if self.it is None:
            raise EnvironmentProblem(f"--watch needs the task iterator, which is unavailable: {why}")
        self.model, self.pids, self.interval = model, list(pids), interval
        self.events, no_events = procevents.open_events()
        self.how = ("re-read on process events from the proc connector (pyroute2) and every "
                    f"{interval:g} s" if self.events else
                    f"polling: re-read every {interval:g} s (proc connector unavailable: {no_events})")
        self.statuses: dict[int, int] = {}       # tgid -> wait status from its leader's exit event
        self.vanished: dict[int, tuple[dict, float]] = {}   # pid -> (last row, when it vanished)
        self.stopped = False

    def read(self) -> dict[int, dict]:
        rows = iterator_rows(self.it.read(), self.pids)
        return {r["pid"]: r for r in rows if r["text"] != "exited"}

    def _wait(self, timeout: float) -> bool:
        """Wait up to `timeout` s; True when a process event came."""
        if self.events is None:
            time.sleep(max(0.0, timeout))
            return False
        evs = self.events.poll(timeout)
        for ev in evs:
            if ev["event"] == "exit" and ev["tid"] == ev["tgid"] and ev["status"] is not None:
                self.statuses[ev["tgid"]] = ev["status"]
        return bool(evs)

    def _settle(self, emit, now: float, start: float):
        """Emit "gone" for vanished processes whose exit event came, or waited too long."""
        for pid, (row, since) in list(self.vanished.items()):
            if pid in self.statuses or self.events is None or now - since >= EXIT_WAIT_S:
                del self.vanished[pid]
                emit(now - start, "gone", row, self.statuses.pop(pid, None))

    def _reread(self, emit, rows: dict[int, dict], now: float, start: float) -> dict[int, dict]:
        new = self.read()
        for change, row in changes(rows, new):
            if change == "gone":
                self.vanished[row["pid"]] = (row, now)
            else:
                self.vanished.pop(row["pid"], None)
                emit(now - start, change, row, None)
        # Keep statuses only for processes that may still need one.
        self.statuses = {p: s for p, s in self.statuses.items() if p in self.vanished or p in new}
        return new

    def run(self, emit, duration: float | None, rows: dict[int, dict] | None = None) -> dict[int, dict]:
        """emit(t, change, row, exit_status) for every change since `rows` (a
        read) until `duration` or stop(); returns the last read."""
        start = last = time.monotonic()
        end = start + duration if duration is not None else None
        rows, due = self.read() if rows is None else rows, None
        while not self.stopped and (end is None or time.monotonic() < end):
            now = time.monotonic()
            # Wake at least every STOP_CHECK_S: a signal's stop() is seen after the wait.
            wake = min(x for x in (last + self.interval, due, end, now + STOP_CHECK_S) if x)
            if self._wait(wake - now) and due is None:
                due = max(time.monotonic(), last + MIN_GAP_S)
            now = time.monotonic()
            if now >= last + self.interval or (due is not None and now >= due):
                rows, last, due = self._reread(emit, rows, now, start), now, None
            self._settle(emit, now, start)
        for pid, (row, _since) in self.vanished.items():   # the watch ends: no more waiting
            emit(time.monotonic() - start, "gone", row, self.statuses.get(pid))
        self.vanished.clear()
        return rows

    def stop(self, *_):
        self.stopped = True

    def close(self):
        if self.events is not None:
            self.events.close()
        self.it.close()
