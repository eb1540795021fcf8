"""A warm start's big maps, created while Python is still importing.

The kernel takes 45-90 ms to create a preallocated per-CPU hash of 65,536
entries (`futexes`, `buckets`: one per-CPU allocation per entry, each under
the kernel's percpu lock), and a warm start could only begin once the kernel
model and the options had given the maps' sizes: on an idle 2-CPU host, a
third of the start. The last start of the same command with the same options
almost always asks for the same maps, so the command line (cli.py, before its
own imports) starts a thread that creates the big maps that start created, as
the program cache's `prog/early-maps` file describes them, and the replay
(bcclite.CachedModule) takes a map from here only where its description is
the same in every field. A map made here is new and empty, so taking it is
creating it a little earlier; what nothing took is closed (close_untaken). A
wrong or stale description costs some CPU time, never a map of the wrong kind.

The hint is kept per command shape: the command and the names of the options
given ("serve --listen -p", values left out: a PID differs at each start), and
per command, for a shape not seen yet (and for `futextrace cache build`, which
knows each command's default program, not its users' options). Keyed by the
command alone, a `serve` after a `serve -p` took the other program's hint and
started 0.12-0.17 s later than the next one (footprint.py, issue 44).
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
MOST_KEYS = 48               # shapes (and their programs' hints) kept; the oldest written go first
# Commands that load the BPF program; an early map for any other would be waste.
LOADING_COMMANDS = ("record", "serve", "explain", "run", "bench", "sweep")

_early: dict[tuple, "_EarlyMap"] = {}
_command: str | None = None      # the command started here: "serve"
_shape: str | None = None        # it with the names of the options given: "serve --listen -p"


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


def shape_of(command: str, args: list[str]) -> str:
    """The command and the names of the options in `args` (its arguments),
    sorted, without their values; nothing after `--` (a command to run)."""
    names = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("--"):
            names.add(arg.split("=", 1)[0])
        elif arg.startswith("-") and len(arg) > 1 and not arg[1].isdigit():
            names.add(arg[:2])          # "-p1234" is -p
    return " ".join([command, *sorted(names)])


def hint_keys() -> list[str]:
    """The hint keys of this start: its shape's, then its command's."""
    return [k for k in dict.fromkeys((_shape, _command)) if k]


def first_of(hint: dict, keys: list[str], suffix: str = ""):
    """The value of the first of `keys` (+ suffix) the hint holds, or None."""
    return next((hint[k + suffix] for k in keys if k + suffix in hint), None)


def start(command: str, shape: str | None = None) -> None:
    """Start creating the big maps the last start of `shape` made, or of
    `command` where that shape has no hint yet (a thread)."""
    global _command, _shape
    if os.environ.get("FUTEXTRACE_NO_PROG_CACHE") or _command is not None:
        return
    _command, _shape = command, shape
    specs = first_of(read_hint(), hint_keys())
    if not isinstance(specs, list):
        return
    wanted = [tuple(spec) for spec in specs[:MOST_MAPS] if _valid(spec)]
    if wanted:
        _begin(list(dict.fromkeys(wanted)))


def start_from_command_line(argv: list[str]) -> list[str]:
    """start() for the `futextrace` command itself (its console script or
    `python -m futextrace.cli`), not for a program that imports the CLI; the
    hint keys of the command started (hint_keys), or none."""
    entry = os.path.basename(argv[0]) if argv else ""
    if (entry in ("futextrace", "cli.py") and len(argv) > 1 and argv[1] in LOADING_COMMANDS
            and not {"-h", "--help"} & set(argv)):
        start(argv[1], shape_of(argv[1], argv[2:]))
        return hint_keys()
    return []


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
    """Record the big maps of `command` (by default this process's shape and
    command) for their next start; written only when they changed. Best
    effort: an unwritable cache costs the next start the early maps, nothing more."""
    keys = [command] if command else hint_keys()
    if not keys:
        return
    ncpus = ncpus or os.cpu_count() or 1
    specs = [list(spec_of(t)) for t in tables if is_big(t, ncpus)][:MOST_MAPS]
    update_hint({k: specs for k in keys})


def update_hint(values: dict) -> None:
    """Set these keys of the hint file, written only when one changed (best
    effort: an unwritable cache costs the next start its head start). A key
    written goes last; past MOST_KEYS, the first (the longest unwritten) go."""
    hint = read_hint()
    if all(hint.get(k) == v for k, v in values.items()):
        return
    for k, v in values.items():
        hint.pop(k, None)
        hint[k] = v
    for k in list(hint)[:max(0, len(hint) - MOST_KEYS)]:
        del hint[k]
    cachefiles.write_atomic(hint_path(), json.dumps(hint).encode())
