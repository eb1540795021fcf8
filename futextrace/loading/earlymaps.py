"""A warm start's big maps, created while Python is still importing.

The kernel takes 45-90 ms to create a preallocated per-CPU hash of 65,536
entries (`futexes`, `buckets`: one per-CPU allocation per entry, each under
the kernel's percpu lock), and a warm start could only begin once the kernel
model and the options had given the maps' sizes: on an idle 2-CPU host, a
third of the start. The last start of the same command almost always asks
for the same maps, so the command line (cli.py, before its own imports)
starts a thread that creates the big maps that start created, as the program
cache's `prog/early-maps` file describes them, and the replay
(bcclite.CachedModule) takes a map from here only where its description is
the same in every field. A map made here is new and empty, so taking it is
creating it a little earlier; what nothing took is closed (close_untaken). A
wrong or stale description costs some CPU time, never a map of the wrong kind.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from futextrace.loading import bpfsys, cachefiles

HINT_NAME = "early-maps"      # not *.json: not a program entry (progcache.entries)
HINT_MAX_BYTES = 64 << 10
# BPF_MAP_TYPE_HASH, PERCPU_HASH, LRU_HASH, LRU_PERCPU_HASH: preallocated unless BPF_F_NO_PREALLOC.
PREALLOCATED_HASHES = {1: False, 5: True, 9: False, 10: True}     # type -> per CPU
BPF_F_NO_PREALLOC = 1
BIG_BYTES = 1 << 20          # smaller maps take the kernel under a millisecond
MOST_MAPS = 4
MOST_ENTRIES = 1 << 24
# Commands that load the BPF program; an early map for any other would be waste.
LOADING_COMMANDS = ("record", "serve", "explain", "run", "bench", "sweep")

_early: dict[tuple, "_EarlyMap"] = {}
_command: str | None = None


def hint_path() -> Path:
    return cachefiles.prog_cache_dir() / HINT_NAME


def spec_of(table: dict) -> tuple:
    """What must be equal for an early map to stand for `table` (a cache entry's map)."""
    return (table["name"], table["type"], table["key_size"], table["leaf_size"],
            table["max_entries"], table["flags"])


def is_big(table: dict, ncpus: int) -> bool:
    """A map the kernel takes long to create: a preallocated hash of a MiB or more."""
    per_cpu = PREALLOCATED_HASHES.get(table["type"])
    if per_cpu is None or table["flags"] & BPF_F_NO_PREALLOC:
        return False
    size = table["max_entries"] * (table["key_size"] + table["leaf_size"] * (ncpus if per_cpu else 1))
    return size >= BIG_BYTES


class _EarlyMap:
    def __init__(self, spec: tuple):
        self.spec = spec
        self.fd: int | None = None
        self.done = threading.Event()

    def create(self) -> None:
        name, map_type, key_size, leaf_size, max_entries, flags = self.spec
        try:
            self.fd = bpfsys.create_map(map_type, key_size, leaf_size, max_entries, flags, name)
        except OSError:
            pass             # no privilege, no memory: the replay creates it, and says why
        finally:
            self.done.set()

    def result(self) -> int | None:
        self.done.wait()
        return self.fd


def _begin(specs: list[tuple]) -> None:
    """Create them one after another in one thread: each per-CPU allocation
    holds the kernel's percpu lock with interrupts off, so two created at once
    took as long as one after the other, on two CPUs instead of one (the
    other one is the imports')."""
    maps = [_EarlyMap(spec) for spec in specs]
    _early.update((m.spec, m) for m in maps)
    threading.Thread(target=lambda: [m.create() for m in maps], daemon=True,
                     name="futextrace-early-maps").start()


def _valid(spec) -> bool:
    return (isinstance(spec, list) and len(spec) == 6 and isinstance(spec[0], str)
            and all(isinstance(v, int) and v >= 0 for v in spec[1:])
            and spec[1] in PREALLOCATED_HASHES and 0 < spec[4] <= MOST_ENTRIES)


def read_hint() -> dict:
    """The hint file, if this user wrote it (cachefiles.read_trusted)."""
    data = cachefiles.read_trusted(hint_path(), HINT_MAX_BYTES)
    try:
        hint = json.loads(data) if data is not None else {}
    except ValueError:
        return {}
    return hint if isinstance(hint, dict) else {}


def start(command: str) -> None:
    """Start creating the big maps the last start of `command` made (a thread)."""
    global _command
    if os.environ.get("FUTEXTRACE_NO_PROG_CACHE") or _command is not None:
        return
    _command = command
    specs = read_hint().get(command)
    if not isinstance(specs, list):
        return
    wanted = [tuple(spec) for spec in specs[:MOST_MAPS] if _valid(spec)]
    if wanted:
        _begin(list(dict.fromkeys(wanted)))


def start_from_command_line(argv: list[str]) -> str | None:
    """start() for the `futextrace` command itself (its console script or
    `python -m futextrace.cli`), not for a program that imports the CLI; the
    command started, or None."""
    entry = os.path.basename(argv[0]) if argv else ""
    if (entry in ("futextrace", "cli.py") and len(argv) > 1 and argv[1] in LOADING_COMMANDS
            and not {"-h", "--help"} & set(argv)):
        start(argv[1])
        return argv[1]
    return None


def command() -> str | None:
    """The command this process started early maps for (start()), if any."""
    return _command


def pending(spec: tuple) -> "_EarlyMap | None":
    """The early map being made for `spec`, still earlymaps' (earlyprograms
    waits for it, and takes it with claim_spec only with its whole entry)."""
    return _early.get(spec)


def claim_spec(spec: tuple) -> "_EarlyMap | None":
    return _early.pop(spec, None)


def claim(table: dict) -> "_EarlyMap | None":
    """The early map made for exactly `table`, now the caller's (its
    result(): the fd, or None where the kernel refused it); or None."""
    return claim_spec(spec_of(table))


def close_untaken() -> None:
    """Close the early maps no replay took (a cold compile makes its own)."""
    while _early:
        _, early = _early.popitem()
        fd = early.result()
        if fd is not None:
            os.close(fd)


def remember(tables: list[dict], command: str | None = None, ncpus: int | None = None) -> None:
    """Record the big maps of `command` (this process's, by default) for its
    next start; written only when they changed. Best effort: an unwritable
    cache costs the next start the early maps, nothing more."""
    command = command or _command
    if command is None:
        return
    ncpus = ncpus or os.cpu_count() or 1
    specs = [list(spec_of(t)) for t in tables if is_big(t, ncpus)][:MOST_MAPS]
    update_hint(command, specs)


def update_hint(key: str, value) -> None:
    """Set one key of the hint file, written only when it changed (best
    effort: an unwritable cache costs the next start its head start)."""
    hint = read_hint()
    if hint.get(key) == value:
        return
    hint[key] = value
    cachefiles.write_atomic(hint_path(), json.dumps(hint).encode())
