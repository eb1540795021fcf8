"""One futex address's name, from a process's captured snapshots
(naming/maps.py) and its files' symbols (naming/elfsyms.py).

The name (docs/json-schema.md, processes[].futex_names) says which mapping
holds the address (`kind`: file, shared_file, heap, stack, thread_stack,
anon, special, unmapped), and for a file its section, the data symbol that
covers it and the offset from the start of what names it (the symbol, else
the section, else the mapping). Where there is no symbol, `why_unknown` says
why; nothing is guessed from a neighbour.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from futextrace.naming.elfsyms import ElfCache, ElfInfo, NotElf
from futextrace.naming.maps import Mapping, Snapshot

NO_SNAPSHOT = ("futextrace read no memory map of this process (it exited before the first read, "
               "or /proc/PID/maps could not be read)")
NOT_MAPPED = ("no captured mapping holds it (mapped after the last read of the process's maps, "
              "at most one refresh before it exited)")
HEAP = "heap memory (brk): allocated at run time, no symbol names it"
STACK = "the main thread's stack: a local variable, no symbol names it"
THREAD_STACK = "a thread's stack (or its TLS block): a local variable, no symbol names it"
STACK_BY_LAYOUT = ("a thread's stack, by its layout (an rw- mapping just above a ---p guard page, as glibc "
                   "places pthread stacks; no thread was in a system call with its stack pointer there when "
                   "read): a local variable or TLS, no symbol names it")
# glibc's HEAP_MAX_SIZE on 64-bit: a thread arena's heap is an mmap of this size at this
# alignment, its used part rw- and the rest ---p right above it.
ARENA_SIZE = 64 << 20
ARENA = ("a glibc malloc arena, by its layout (an rw- mapping at a 64 MiB boundary, the rest of its "
         "64 MiB reserved ---p right above it): memory malloc gave a thread, no symbol names it")
ANON = ("anonymous memory (mmap: a malloc arena, a thread stack not seen in a system call, TLS): "
        "no file, no symbol")
ANON_EXEC = "anonymous executable memory (JIT code?): no file, no symbol"
SHARED = "a shared file mapping: the futex is keyed by file and offset (global hash), no symbol"


@dataclass(frozen=True)
class MappedFile:
    """The file a mapping maps, parsed and checked to be the one mapped: `info`
    (None, with `why`, when it cannot be had), its load bias (address - p_vaddr),
    and `place`, where it was opened (/proc/PID/map_files/..., or its path)."""
    info: ElfInfo | None
    why: str | None
    bias: int = 0
    place: str | None = None


def _entry(m: Mapping | None, kind: str, **kw) -> dict:
    out = {"mapping": None if m is None else (m.path or "[anon]") + (" (deleted)" if m.deleted else ""),
           "kind": kind, "section": None, "symbol": None, "offset": None, "why_unknown": None}
    out.update(kw)
    return out


class Namer:
    """Names addresses of processes; parses each file once (its ElfCache).
    `build_ids`: (dev, inode, path) -> the build id read through
    /proc/PID/map_files/ while the process lived (naming/capture.py)."""

    MEMO = 4096     # mappings whose file, parsed, and load bias a Namer keeps

    def __init__(self, cache: ElfCache | None = None, build_ids: dict | None = None):
        self.cache = cache or ElfCache()
        self.build_ids = build_ids if build_ids is not None else {}
        self._memo: dict[tuple, tuple] = {}

    def name(self, addr: int, snaps: list[Snapshot], alive: bool) -> dict:
        """The name of `addr` in the newest snapshot that holds it."""
        if not snaps:
            return _entry(None, "unmapped", why_unknown=NO_SNAPSHOT)
        for snap in snaps:
            m = snap.find(addr)
            if m is not None:
                return self._in_mapping(addr, m, snap, alive)
        return _entry(None, "unmapped", why_unknown=NOT_MAPPED)

    def _in_mapping(self, addr: int, m: Mapping, snap: Snapshot, alive: bool) -> dict:
        off = addr - m.start
        if m.path == "[heap]":
            return _entry(m, "heap", offset=off, why_unknown=HEAP)
        if m.path == "[stack]":
            return _entry(m, "stack", offset=off, why_unknown=STACK)
        if m.start in snap.stacks:
            return _entry(m, "thread_stack", tid=snap.stacks[m.start], offset=off, why_unknown=THREAD_STACK)
        if m.path.startswith("[anon"):
            return _entry(m, "anon", offset=off, why_unknown=ANON)
        if m.path.startswith("["):
            return _entry(m, "special", offset=off, why_unknown=f"the kernel's {m.path} mapping: no symbol")
        if not m.path:
            prev = snap.before(m)
            if prev is not None and prev.end == m.start and prev.is_file and not prev.shared and "w" in prev.perms:
                named = self._in_file(addr, prev, snap, alive, tail=m)
                if named is not None:
                    return named
            if _is_arena(m, snap.after(m)):
                return _entry(m, "malloc_arena", offset=off, why_unknown=ARENA)
            # Checked after the arena: an arena's rw- part may sit right above the ---p rest of
            # the arena below it, as a thread stack sits above its guard page.
            if prev is not None and prev.end == m.start and prev.perms.startswith("---") and not prev.path \
                    and m.perms.startswith("rw"):
                return _entry(m, "thread_stack", tid=None, offset=off, why_unknown=STACK_BY_LAYOUT)
            return _entry(m, "anon", offset=off, why_unknown=ANON_EXEC if "x" in m.perms else ANON)
        if m.shared or not m.is_file:
            return _entry(m, "shared_file", offset=off + m.offset, why_unknown=SHARED)
        return self._in_file(addr, m, snap, alive)

    def _open(self, m: Mapping, pid: int, alive: bool) -> tuple[ElfInfo | None, str | None, str | None]:
        """The file mapped at `m`, parsed: (info, None, where opened) or (None, why not, None)."""
        places = ([f"/proc/{pid}/map_files/{m.range_name}"] if alive else []) + ([] if m.deleted else [m.path])
        if not places:
            return None, "the file was deleted while mapped and the process has exited: its symbols are gone", None
        why = "the file could not be opened"
        for place in places:
            try:
                info = self.cache.load(m.path, place)
            except NotElf as e:
                return None, str(e), None
            except OSError as e:
                why = f"the file could not be opened ({e.strerror})"
                continue
            if place == m.path:
                why = self._replaced(m, info)
                if why:
                    continue
            return self.cache.with_debug_symbols(info), None, place
        return None, why, None

    def _replaced(self, m: Mapping, info: ElfInfo) -> str | None:
        """Why the file now at m.path is not the one mapped, or None when it is."""
        mapped = self.build_ids.get((m.dev, m.inode, m.path))
        if mapped and info.build_id and mapped != info.build_id:
            return (f"the file at this path was replaced after it was mapped (build id {mapped[:12]}... "
                    f"mapped, {info.build_id[:12]}... on disk): its symbols would not be this process's")
        if not mapped:
            try:
                st = os.stat(m.path)
            except OSError as e:
                return f"the file could not be opened ({e.strerror})"
            if st.st_ino != m.inode:
                return ("the file at this path was replaced after it was mapped (another inode): "
                        "its symbols would not be this process's")
        return None

    def mapped_file(self, m: Mapping, snap: Snapshot, alive: bool) -> MappedFile:
        """The file of mapping `m`, kept per mapping: naming many addresses (data
        or code) opens and checks it once."""
        key = (snap.pid, m, alive)
        got = self._memo.get(key)
        if got is None:
            info, why, place = self._open(m, snap.pid, alive)
            got = MappedFile(info, why, 0, place)
            if info is not None:
                # The load bias from the file's lowest mapping (offset 0: the first
                # PT_LOAD), where page-rounded segments cannot be confused.
                first = min(snap.file_mappings(m), key=lambda x: x.offset, default=m)
                delta = info.vaddr_delta(first.offset)
                got = (MappedFile(None, "no loadable segment of the file maps this part") if delta is None
                       else MappedFile(info, None, first.start - first.offset - delta, place))
            if len(self._memo) >= self.MEMO:
                self._memo.clear()
            self._memo[key] = got
        return got

    def _in_file(self, addr: int, m: Mapping, snap: Snapshot, alive: bool, tail: Mapping | None = None) -> dict | None:
        """A name in a private file mapping (`tail`: the anonymous mapping after
        the file's rw- segment, its .bss beyond the file's pages; None returned
        when the address is past the file's image there)."""
        mf = self.mapped_file(m, snap, alive)
        info, why, bias = mf.info, mf.why, mf.bias
        if info is None:
            if tail is not None:
                return None
            return _entry(m, "file", offset=addr - m.start + m.offset, why_unknown=why)
        vaddr = addr - bias
        if tail is not None and vaddr >= info.image_end():
            return None
        sec = info.section_at(vaddr)
        sym = info.symbols.covering(vaddr)
        out = _entry(m, "file", section=sec[0] if sec else None)
        if sym:
            out.update(symbol=sym[0], offset=vaddr - sym[1])
        else:
            out.update(offset=vaddr - sec[1] if sec else vaddr, why_unknown=_no_symbol_why(info))
        return out


def _is_arena(m: Mapping, nxt: Mapping | None) -> bool:
    """An rw- anonymous mapping that starts a 64 MiB arena heap: all of it, or its used part
    with the rest reserved (---p, anonymous) up to the 64 MiB."""
    if m.start % ARENA_SIZE or not m.perms.startswith("rw"):
        return False
    if m.end - m.start == ARENA_SIZE:
        return True
    return (nxt is not None and nxt.start == m.end and nxt.perms.startswith("---") and not nxt.path
            and nxt.end == m.start + ARENA_SIZE)


def _no_symbol_why(info: ElfInfo) -> str:
    return no_symbol_why(info, "object", "data symbol", info.symbols.truncated)


def no_symbol_why(info: ElfInfo, exported: str, what: str, truncated: bool) -> str:
    """Why no symbol covers an address of `info`: `exported` ("object",
    "function") is what .dynsym would have had, `what` the kind looked for."""
    if info.tables == [".dynsym"]:
        why = ("stripped: no .symtab and no separate debug file found (install its debug symbols, "
               f"e.g. the -dbgsym package); no exported {exported} in .dynsym covers it")
    else:
        why = f"no {what} covers it in {' + '.join(info.tables)} (a static or padding the linker did not name)"
    return why + ("; the symbol table was cut at futextrace's limit" if truncated else "")
