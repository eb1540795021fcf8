"""Memory maps captured while the processes live, so that a process that
exits before the run ends (as `record -- CMD` always sees) keeps its names.

The record loop calls `tick(pids, changed)` on every turn of its poll: a
process seen for the first time is read at once, one the session has a new
event of (a thread born: a new stack; its hash first seen: futexes in use)
again at once but at most every CHANGED_S (an event inside that spell is
kept and read when it ends: a burst of events at a process's start, then a
malloc, must not wait for the next REFRESH_S, by which time a short process
has gone), and every process again every
REFRESH_S (dlopen, munmap, a growing heap, exec), the run's targets (-p, the
command `record -- CMD` started) every TARGET_REFRESH_S, that scan at most every
TICK_S and READS_PER_TICK reads a turn. A read that finds no map (the process has exited;
a zombie's map is empty) keeps the last one. Memory stays bounded: HISTORY
distinct snapshots per process (an address unmapped later is still found in
an older one), MAX_PIDS processes (the least recently read dropped), and
BUILD_IDS files' build ids.
"""
from __future__ import annotations

import time
from collections import OrderedDict

from futextrace.naming.maps import Snapshot, read_snapshot

TICK_S = 0.05
CHANGED_S = 0.01
REFRESH_S = 2.0          # a new process, an exec and a process with new events are read at once
# The targets (-p, a launched command) are a few processes, cheap to read often, and their
# map changes (a malloc that grows the heap, an mmap) come with no event of ours.
TARGET_REFRESH_S = 0.2
READS_PER_TICK = 4       # at most 80 maps reads a second (~0.65 ms each): bounded tracer CPU system-wide
HISTORY = 4
MAX_PIDS = 2048
BUILD_IDS = 8192


class NameCapture:
    """Snapshots per process, newest first, and the build id of each file
    mapped (read through /proc/PID/map_files/, the very file mapped, while
    the process lives: later a path replaced on disk is told apart)."""

    def __init__(self, clock=time.monotonic, read=read_snapshot):
        self._snaps: OrderedDict[int, list[Snapshot]] = OrderedDict()
        self._read_at: dict[int, float] = {}
        self._last_tick = float("-inf")
        self._pending: set[int] = set()    # processes with an event not yet read after it
        self._clock, self._read = clock, read
        self.build_ids: dict[tuple, str | None] = {}
        self.reads = 0

    def snapshots(self, pid: int) -> list[Snapshot]:
        return list(self._snaps.get(pid, []))

    def pids(self) -> list[int]:
        return list(self._snaps)

    def snap(self, pid: int) -> bool:
        """Read PID's maps now; False when there was none to read (gone, or exited)."""
        self.reads += 1
        self._read_at[pid] = self._clock()
        new = self._read(pid)
        if new is None:
            return False
        self._keep(pid, new)
        return True

    def _keep(self, pid: int, new: Snapshot) -> None:
        old = self._snaps.get(pid, [])
        if old and old[0].mappings == new.mappings:
            # The same map: keep the thread stacks seen before (a thread running now names none).
            stacks = {s: t for s, t in old[0].stacks.items() if new.find(s) is not None}
            new = Snapshot(pid, new.mappings, {**stacks, **new.stacks}, new.exe, new.truncated)
            old = old[1:]
        self._snaps[pid] = [new, *old][:HISTORY]
        self._snaps.move_to_end(pid)
        while len(self._snaps) > MAX_PIDS:
            gone, _ = self._snaps.popitem(last=False)
            self._read_at.pop(gone, None)
        self._note_build_ids(pid, new)

    def _note_build_ids(self, pid: int, snap: Snapshot) -> None:
        # elfsyms (elftools, numpy) on the first read, after the attach, not at
        # import: `record` builds its NameCapture before it attaches.
        from futextrace.naming.elfsyms import read_build_id
        for m in snap.mappings:
            key = (m.dev, m.inode, m.path)
            if not m.is_file or key in self.build_ids or len(self.build_ids) >= BUILD_IDS:
                continue
            self.build_ids[key] = read_build_id(f"/proc/{pid}/map_files/{m.range_name}")

    def tick(self, pids, changed=(), targets=()) -> None:
        """Read the processes due: `changed` ones (a new event) first, then new
        ones, then the oldest reads. `pids`: the processes to keep, or a
        function that lists them (called only when a scan is due); `targets`,
        among them, are read every TARGET_REFRESH_S, the others every REFRESH_S."""
        now = self._clock()
        self._pending.update(changed)
        for pid in list(self._pending):
            if now - self._read_at.get(pid, float("-inf")) >= CHANGED_S:
                self._pending.discard(pid)
                self.snap(pid)
        if now - self._last_tick < TICK_S:
            return
        self._last_tick = now
        due = [p for p in (pids() if callable(pids) else pids)
               if now - self._read_at.get(p, float("-inf")) >= (TARGET_REFRESH_S if p in targets else REFRESH_S)]
        due.sort(key=lambda p: self._read_at.get(p, float("-inf")))
        for pid in due[:READS_PER_TICK]:
            self.snap(pid)
