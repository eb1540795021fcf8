"""`--comm NAME` as a set of processes, kept by the proc connector.

Instead of reading and comparing the task's name in BPF on every futex call,
user space keeps the kernel's `tgid_filter` map holding the processes named
NAME: an initial /proc scan, then the proc connector's events (pyroute2,
procs/procevents.py) as processes fork (a child keeps its parent's name),
exec (the name changes) and exit. The hot path does one tgid lookup.

The kernel adds a process itself at exec (a `sched_process_exec` hook that
compares the new name, COMM_AT_EXEC in bpf/task_events.h) and at fork, so no
call is missed before user space hears of it; the events here remove processes
at exit and at an exec under another name, and catch up after an overflow.
What this gives up against the in-kernel compare, said in the recording: a
process's name is its leader's at exec or fork: a later PR_SET_NAME is not
followed.
"""
from __future__ import annotations

import os
import select
import threading

from futextrace.procs import procevents
from futextrace.procs.targets import comm_of

COMM_LEN = 15   # TASK_COMM_LEN - 1: the kernel keeps that many bytes of a name


def scan(names: set[str]) -> set[int]:
    """Processes whose name is one of `names` now."""
    return {int(d) for d in os.listdir("/proc") if d.isdigit() and comm_of(int(d)) in names}


class CommWatch:
    """Keeps a BPF tgid filter map in step with the processes named `names`.
    Subscribe before the scan, so no exec falls between the two."""

    def __init__(self, events: procevents.ProcEvents, names: list[str]):
        self._events = events
        self.names = {n[:COMM_LEN] for n in names}
        self.tgids: set[int] = set()
        self.seen: set[int] = set()     # every process that matched during the run
        self._table = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, table) -> None:
        """Fill `table` (BCC's tgid_filter) from a /proc scan, then follow events
        on a thread of our own, so an exec is acted on at once, not at the next
        ring-buffer poll."""
        self._table = table
        for tgid in scan(self.names):
            self._add(tgid)
        if self._thread is None:   # a second start (the programs compiled again): the new table only
            self._thread = threading.Thread(target=self._follow, name="futextrace-comm", daemon=True)
            self._thread.start()

    def _add(self, tgid: int) -> None:
        import ctypes as ct
        self._table[self._table.Key(tgid)] = ct.c_uint8(1)
        self.tgids.add(tgid)
        self.seen.add(tgid)

    def _remove(self, tgid: int) -> None:
        self.tgids.discard(tgid)
        try:
            del self._table[self._table.Key(tgid)]
        except KeyError:
            pass

    def _follow(self) -> None:
        while not self._stop.is_set():
            if not select.select([self._events.fileno()], [], [], 0.2)[0]:
                continue
            for ev in self._events.poll(0):
                self._apply(ev)

    def _apply(self, ev: dict) -> None:
        tgid = ev["tgid"]
        if ev["event"] == "overflow":           # events lost: start again from /proc
            for t in scan(self.names) - self.tgids:
                self._add(t)
        elif ev["event"] == "exit":
            if ev["tid"] == tgid and tgid in self.tgids:
                self._remove(tgid)
        elif ev["tid"] == tgid:                 # fork of a process, or exec
            if comm_of(tgid) in self.names:
                self._add(tgid)
            elif ev["event"] == "exec" and tgid in self.tgids:
                self._remove(tgid)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._events.close()


def open_watch(names: list[str]) -> tuple[CommWatch | None, str]:
    """(watch, "") or (None, why the proc connector cannot be used)."""
    events, why = procevents.open_events()
    return (CommWatch(events, names), "") if events else (None, why)
