"""A warm start's programs, verified while Python is still importing.

The verifier takes ~75 ms over the tracepoint method's sys_enter (50,492
instructions processed on 6.18), and a start could only ask for it once its
imports, the kernel model and the options had chosen the program: a quarter
of a warm start on an idle 2-CPU host. The last start of the same command
with the same options almost always replays the same program cache entry, so
that start leaves a hint beside the early maps' (earlymaps.py, keyed the same
way: by command shape, and by command): the entry's file name, the tp_btf
programs it loaded (function, BTF id), and the boot it did so in. The command
line (cli.py, before its own imports) then starts a thread that creates the
entry's maps (taking the big ones earlymaps is creating) and loads those
programs with them, on the other CPU while Python imports.

What makes it safe:
- Nothing is attached here: a program loaded and never attached runs nowhere.
- The hint is used only in the boot it was written in. A tp_btf BTF id, and
  the kernel the entry was checked against when that start replayed it, are
  the boot's; a reboot (into any kernel) makes the hint stale, and then
  nothing is loaded early.
- The replay (bcclite.CachedModule) takes the maps and programs only where
  the entry it read itself, after checking what it was built for
  (progcache.mismatch), is the same as the one loaded here, in every field
  (its instructions included). Otherwise everything made here is closed,
  and the big maps go back to earlymaps' own matching.
A wrong or stale hint costs CPU time on the other CPU, never a program made
for other options or another kernel.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from futextrace.loading import bpfsys, cachefiles, earlymaps

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
HINT_SUFFIX = " programs"     # the hint's key: "<command> programs"
MOST_PROGRAMS = 4
ENTRY_MAX_BYTES = 16 << 20    # progcache.MAX_ENTRY_BYTES (not imported: progcache imports BCC's package)

_pending: "_EarlyProgram | None" = None


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


class _EarlyProgram:
    """One cache entry's maps created and its named tp_btf programs loaded,
    in a thread; `done` once it is over, whatever came of it."""

    def __init__(self, entry_name: str, programs: list[tuple[str, int]]):
        self.entry_name = entry_name
        self.programs = programs
        # What of the entry the maps and programs were made from (set once every
        # map exists): its maps, and the functions loaded. Not the whole entry:
        # a second copy of every function's instructions, parsed in this
        # thread, stayed in the exporter's RSS (4 MiB).
        self.entry: dict | None = None
        self.fds: list[int] = []                # the entry's maps, in its order
        self.big: dict[int, tuple] = {}         # index -> spec: maps earlymaps made (it still holds them)
        self.loaded: dict[tuple[str, int], int] = {}   # (function, BTF id) -> program fd
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self._make_maps()
            if self.entry is not None:
                self._load_programs()
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass        # a bad entry or a refusal: the replay does it all itself, and says why
        finally:
            self.done.set()

    def _make_maps(self) -> None:
        data = cachefiles.read_trusted(cachefiles.prog_cache_dir() / self.entry_name, ENTRY_MAX_BYTES)
        entry = json.loads(data) if data is not None else None
        if not isinstance(entry, dict):
            return
        fds: list[int] = []
        try:
            for i, table in enumerate(entry["tables"]):
                spec = earlymaps.spec_of(table)
                pending = earlymaps.pending(spec)
                if pending is not None and spec not in self.big.values():
                    self.big[i] = spec
                    fd = pending.result()       # the big map the maps thread is creating
                    if fd is None:
                        raise OSError("an early map was refused")
                else:
                    fd = bpfsys.create_map(table["type"], table["key_size"], table["leaf_size"],
                                           table["max_entries"], table["flags"], table["name"])
                fds.append(fd)
        except (OSError, KeyError, TypeError):
            self._close_own(fds)
            self.big = {}
            return
        self.fds = fds
        self.entry = {"tables": entry["tables"],
                      "functions": {fn: entry["functions"][fn] for fn, _ in self.programs}}

    def _load_programs(self) -> None:
        """One after another, in the hint's order (sys_enter, the longest to
        verify, first): the main thread is importing on the other CPU, and a
        third loader made each verification slower, not the whole shorter."""
        by_name = {t["name"]: fd for t, fd in zip(self.entry["tables"], self.fds)}
        for fn, btf_id in self.programs:
            insns = bpfsys.with_map_fds(self.entry["functions"][fn], by_name)
            try:
                self.loaded[(fn, btf_id)] = bpfsys.load_tracing(insns, fn, bpfsys.BPF_TRACE_RAW_TP, btf_id)
            except OSError:
                pass     # refused here: the start loads it again and reports the verifier's reason

    def _close_own(self, fds: list[int]) -> None:
        """Close the maps made here (not earlymaps' big ones: it still holds them)."""
        for i, fd in enumerate(fds):
            if i not in self.big:
                os.close(fd)

    def close(self) -> None:
        self._close_own(self.fds)
        for fd in self.loaded.values():
            os.close(fd)
        self.fds, self.loaded, self.entry = [], {}, None


def _same(made: dict, entry: dict) -> bool:
    """Whether what was made ahead (its maps, and its programs' instructions
    and map references) is what a replay of `entry` makes: `entry` was checked
    for this kernel and these options by the replay, so then are they."""
    functions = entry.get("functions") or {}
    return made["tables"] == entry.get("tables") and all(
        functions.get(fn) == f for fn, f in made["functions"].items())


def _valid(hint) -> bool:
    return (isinstance(hint, dict) and isinstance(hint.get("entry"), str)
            and os.path.basename(hint["entry"]) == hint["entry"] and hint["entry"].endswith(".json")
            and isinstance(hint.get("programs"), list)
            and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], int)
                    for p in hint["programs"]))


def start(keys: list[str]) -> None:
    """Begin loading the programs the last start of the first of these hint
    keys that left a hint loaded (earlymaps.hint_keys: the start's shape,
    then its command), in this boot (a thread)."""
    global _pending
    if not keys or _pending is not None or os.environ.get("FUTEXTRACE_NO_PROG_CACHE"):
        return
    hint = earlymaps.first_of(earlymaps.read_hint(), keys, HINT_SUFFIX)
    if not _valid(hint) or hint.get("boot") != boot_id() or not hint["programs"]:
        return
    _pending = _EarlyProgram(hint["entry"], [tuple(p) for p in hint["programs"][:MOST_PROGRAMS]])
    threading.Thread(target=_pending.run, daemon=True, name="futextrace-early-programs").start()


def start_from_command_line(argv: list[str]) -> None:
    """The early maps, then the early programs, for the `futextrace` command itself."""
    start(earlymaps.start_from_command_line(argv))


def claim(entry: dict) -> tuple[list[int], dict[tuple[str, int], int], int] | None:
    """For a replay of `entry`: the maps made for it (every one, in its order),
    the programs loaded with them and how many of those maps earlymaps made,
    now the caller's; or None (then whatever was made here is closed, and
    the big maps stay earlymaps' to match)."""
    global _pending
    early, _pending = _pending, None
    if early is None:
        return None
    early.done.wait()
    if early.entry is None or not _same(early.entry, entry):
        early.close()
        return None
    for spec in early.big.values():
        earlymaps.claim_spec(spec)
    return early.fds, early.loaded, len(early.big)


def close_untaken() -> None:
    """Close what no replay took (a cold compile makes its own)."""
    global _pending
    early, _pending = _pending, None
    if early is not None:
        early.done.wait()
        early.close()


def remember(keys: list[str], entry_name: str, programs: list[tuple[str, int]]) -> None:
    """Record the entry and tp_btf programs this start loaded, for the next
    start of these hint keys (earlymaps.hint_keys: its shape, its command)
    in this boot; written only when they changed."""
    if not keys:
        return
    want = {"entry": entry_name, "boot": boot_id(), "programs": [list(p) for p in programs[:MOST_PROGRAMS]]}
    earlymaps.update_hint({k + HINT_SUFFIX: want for k in keys})
