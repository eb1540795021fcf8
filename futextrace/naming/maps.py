"""A process's memory map as an immutable snapshot: /proc/PID/maps parsed,
plus which thread's stack each anonymous mapping is.

Thread stacks: since Linux 4.5 (65376df58217) neither /proc/PID/maps nor
/proc/PID/task/TID/maps names a thread's stack (`[stack:TID]` is gone; both
name only the main thread's `[stack]`), and /proc/PID/task/TID/stat's kstkesp
is 0 unless the task is exiting or dumping core. /proc/PID/task/TID/syscall
still gives the stack pointer of a thread blocked in a system call (the
common case of a thread that waits on a futex): the mapping holding it is
that thread's stack. A running thread says "running" and names nothing.
"""
from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field

MAX_MAPPINGS = 65536      # lines kept per snapshot (the kernel's default vm.max_map_count)
MAX_THREADS_READ = 256    # threads whose stack pointer one snapshot reads


@dataclass(frozen=True)
class Mapping:
    """One line of /proc/PID/maps."""
    start: int
    end: int
    perms: str            # "rw-p"
    offset: int           # file offset of `start`
    dev: tuple[int, int]  # (major, minor)
    inode: int
    path: str             # "" for anonymous memory; "[heap]", "/usr/lib/x.so", ...
    deleted: bool = False  # the path ended in " (deleted)"

    @property
    def is_file(self) -> bool:
        return self.inode != 0 and not self.path.startswith("[")

    @property
    def shared(self) -> bool:
        return self.perms[3:4] == "s"

    @property
    def range_name(self) -> str:
        """The entry's name under /proc/PID/map_files/."""
        return f"{self.start:x}-{self.end:x}"


@dataclass(frozen=True)
class Snapshot:
    """A process's mappings at one moment, sorted by address (immutable).
    `stacks`: mapping start -> the thread whose stack pointer was in it."""
    pid: int
    mappings: tuple[Mapping, ...]
    stacks: dict[int, int] = field(default_factory=dict)
    exe: str = ""
    truncated: bool = False

    def __post_init__(self):
        object.__setattr__(self, "_starts", [m.start for m in self.mappings])

    def find(self, addr: int) -> Mapping | None:
        """The mapping that holds `addr`, or None."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.mappings[i].end:
            return self.mappings[i]
        return None

    def before(self, m: Mapping) -> Mapping | None:
        """The mapping just below `m` (an anonymous .bss tail's file part), or None."""
        i = bisect.bisect_left(self._starts, m.start) - 1
        return self.mappings[i] if i >= 0 else None

    def after(self, m: Mapping) -> Mapping | None:
        """The mapping just above `m` (a malloc arena's reserved rest), or None."""
        i = bisect.bisect_right(self._starts, m.start)
        return self.mappings[i] if i < len(self.mappings) else None

    def file_mappings(self, m: Mapping) -> list[Mapping]:
        """Every mapping of the same file as `m` (the same device, inode and path)."""
        return [x for x in self.mappings if x.inode == m.inode and x.dev == m.dev and x.path == m.path]


def parse_line(line: str) -> Mapping | None:
    """One maps line; None for a line that does not parse."""
    parts = line.split(None, 5)
    if len(parts) < 5:
        return None
    try:
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        major, minor = (int(x, 16) for x in parts[3].split(":"))
        offset, inode = int(parts[2], 16), int(parts[4])
    except ValueError:
        return None
    path = parts[5].strip() if len(parts) > 5 else ""
    deleted = path.endswith(" (deleted)")
    if deleted:
        path = path[:-len(" (deleted)")]
    return Mapping(lo, hi, parts[1], offset, (major, minor), inode, path, deleted)


def parse_maps(pid: int, text: str, stacks: dict[int, int] | None = None, exe: str = "") -> Snapshot:
    """A snapshot from maps text (at most MAX_MAPPINGS lines)."""
    lines = text.splitlines()
    maps = [m for m in map(parse_line, lines[:MAX_MAPPINGS]) if m is not None]
    maps.sort(key=lambda m: m.start)
    return Snapshot(pid, tuple(maps), dict(stacks or {}), exe, len(lines) > MAX_MAPPINGS)


def stack_pointer(syscall_text: str) -> int | None:
    """The stack pointer in /proc/PID/task/TID/syscall ("nr a1..a6 sp pc"), or
    None ("running": not in a system call; "-1 sp pc": blocked, not in one)."""
    parts = syscall_text.split()
    if len(parts) == 9:
        return int(parts[7], 16)
    if len(parts) == 3 and parts[0] == "-1":
        return int(parts[1], 16)
    return None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except (OSError, ValueError):
        return None


def thread_stacks(pid: int, snap_find) -> dict[int, int]:
    """Mapping start -> TID, for each thread (up to MAX_THREADS_READ) whose stack
    pointer could be read; the main thread's `[stack]` is named by the kernel."""
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))[:MAX_THREADS_READ]
    except (OSError, ValueError):
        return {}
    out = {}
    for tid in tids:
        text = _read(f"/proc/{pid}/task/{tid}/syscall")
        try:
            sp = stack_pointer(text or "")
        except ValueError:
            sp = None
        m = snap_find(sp) if sp else None
        if m is not None and m.path != "[stack]":
            out[m.start] = tid
    return out


def read_snapshot(pid: int) -> Snapshot | None:
    """PID's mappings now, with its threads' stacks; None when the process is
    gone or its memory map is already released (an exited zombie's is empty)."""
    text = _read(f"/proc/{pid}/maps")
    if not text:
        return None
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""
    snap = parse_maps(pid, text, exe=exe)
    return Snapshot(pid, snap.mappings, thread_stacks(pid, snap.find), exe, snap.truncated)
