"""An ELF file's data and function symbols, sections and loadable segments,
parsed once.

pyelftools reads the headers (segments, sections, notes); the symbol tables are
read as raw arrays (numpy over the section's bytes, where pyelftools' objects
per symbol would take seconds for a large table) and only the symbols that can
name an address are kept, each with a size above 0 and a section (STT_NOTYPE
labels have no size), sorted by address for bisect, in two sets: data symbols
(STT_OBJECT: what a futex address is) and functions (STT_FUNC, STT_GNU_IFUNC:
where a call site is). STT_TLS symbols are left out: their
value is an offset in each thread's TLS block, not an address in the file's
image, so a TLS futex is named as the thread's stack or memory it lives in.

An address is named by a symbol only if st_value <= addr < st_value+st_size:
a neighbour's name is never given.

Separate debug files are looked up as gdb does: /usr/lib/debug/.build-id/xx/
yyyy.debug from the build id, then .gnu_debuglink's name next to the file, in
its .debug/ directory and under /usr/lib/debug/<dir>/; a debug file whose
build id differs from the file's is not used.
"""
from __future__ import annotations

import bisect
import os
import struct
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

DEBUG_ROOT = "/usr/lib/debug"
MAX_SYMBOLS = 500_000              # data symbols kept per file, and as many functions
MAX_TABLE_BYTES = 256 << 20        # a symbol or string table read at most this far
CACHE_FILES = 64                   # parsed files kept (least recently used dropped)
SHF_ALLOC, SHF_TLS = 0x2, 0x400
STT_OBJECT, STT_FUNC, STT_GNU_IFUNC = 1, 2, 10
DATA_TYPES, FUNCTION_TYPES = (STT_OBJECT,), (STT_FUNC, STT_GNU_IFUNC)
NESTED_LOOKBACK = 16               # symbols inside another (rare): how far back a lookup looks

_SYM64 = [("name", "u4"), ("info", "u1"), ("other", "u1"), ("shndx", "u2"), ("value", "u8"), ("size", "u8")]
_SYM32 = [("name", "u4"), ("value", "u4"), ("size", "u4"), ("info", "u1"), ("other", "u1"), ("shndx", "u2")]


class NotElf(Exception):
    """The file cannot be read as ELF; the message says why."""


@dataclass
class Symbols:
    """Symbols sorted by address: parallel arrays for bisect."""
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    truncated: bool = False

    def covering(self, vaddr: int) -> tuple[str, int] | None:
        """(name, start) of the smallest symbol with start <= vaddr < end, or None."""
        i = bisect.bisect_right(self.starts, vaddr) - 1
        best = None
        for j in range(i, max(-1, i - NESTED_LOOKBACK), -1):
            if self.starts[j] <= vaddr < self.ends[j]:
                size = self.ends[j] - self.starts[j]
                if best is None or size < best[2]:
                    best = (self.names[j], self.starts[j], size)
        return (best[0], best[1]) if best else None


@dataclass
class ElfInfo:
    """What naming needs of one ELF file."""
    path: str
    build_id: str | None
    loads: list[tuple[int, int, int, int]]      # (p_vaddr, p_memsz, p_offset, p_filesz) of each PT_LOAD
    sections: list[tuple[int, int, str]]        # (start, end, name) of allocated non-TLS sections, sorted
    symbols: Symbols
    tables: list[str]                           # where the symbols came from: ".symtab", ".dynsym", a debug file
    debuglink: str | None = None
    functions: Symbols = field(default_factory=Symbols)   # STT_FUNC and STT_GNU_IFUNC, from the same tables
    machine: str = ""                           # e_machine: "EM_X86_64", ...

    def section_at(self, vaddr: int) -> tuple[str, int] | None:
        """(name, start) of the section holding vaddr, or None."""
        i = bisect.bisect_right(self.sections, (vaddr, float("inf"))) - 1
        if i >= 0 and vaddr < self.sections[i][1]:
            return self.sections[i][2], self.sections[i][0]
        return None

    def vaddr_delta(self, file_offset: int) -> int | None:
        """p_vaddr - p_offset of the PT_LOAD that maps this file offset (page-rounded)."""
        for vaddr, _memsz, off, filesz in self.loads:
            if off - (off % 4096) <= file_offset < off + max(filesz, 1):
                return vaddr - off
        return None

    def file_offset(self, vaddr: int) -> int | None:
        """Where in the file the byte at vaddr is (the PT_LOAD with file bytes there), or None."""
        for v, _memsz, off, filesz in self.loads:
            if v <= vaddr < v + filesz:
                return vaddr - v + off
        return None

    def image_end(self) -> int:
        """The highest address the loaded image covers (the .bss end included)."""
        return max((v + m for v, m, _o, _f in self.loads), default=0)


def _symbols_of(elf: ELFFile, f, names: tuple[str, ...]) -> tuple[Symbols, Symbols, list[str]]:
    """(data symbols, functions, tables used) of the tables in `names` present, merged."""
    tables, used, truncated = [], [], False
    for name in names:
        sec = elf.get_section_by_name(name)
        if sec is None or sec["sh_type"] == "SHT_NOBITS":
            continue
        strtab = elf.get_section(sec["sh_link"])
        f.seek(sec["sh_offset"])
        raw = f.read(min(sec["sh_size"], MAX_TABLE_BYTES))
        f.seek(strtab["sh_offset"])
        strings = f.read(min(strtab["sh_size"], MAX_TABLE_BYTES))
        truncated |= sec["sh_size"] > MAX_TABLE_BYTES or strtab["sh_size"] > MAX_TABLE_BYTES
        layout = _SYM64 if elf.elfclass == 64 else _SYM32
        dt = np.dtype([(n, ("<" if elf.little_endian else ">") + t) for n, t in layout])
        syms = np.frombuffer(raw[:len(raw) - len(raw) % dt.itemsize], dtype=dt)
        tables.append((syms[(syms["size"] > 0) & (syms["shndx"] != 0)], strings))
        used.append(name)
    return _kept(tables, DATA_TYPES, truncated), _kept(tables, FUNCTION_TYPES, truncated), used


def _kept(tables: list, types: tuple[int, ...], truncated: bool) -> Symbols:
    """The symbols of `types`, the MAX_SYMBOLS lowest by address: sorted and cut
    with numpy before any name is decoded, so a huge table costs one pass."""
    picked = [(t[np.isin(t["info"] & 0xF, types)], strings) for t, strings in tables]
    values = np.concatenate([t["value"].astype(np.uint64) for t, _ in picked] or [np.zeros(0, np.uint64)])
    sizes = np.concatenate([t["size"].astype(np.uint64) for t, _ in picked] or [np.zeros(0, np.uint64)])
    offs = np.concatenate([t["name"].astype(np.int64) for t, _ in picked] or [np.zeros(0, np.int64)])
    which = np.concatenate([np.full(len(t), i) for i, (t, _) in enumerate(picked)] or [np.zeros(0, int)])
    order = np.argsort(values, kind="stable")
    if len(order) > MAX_SYMBOLS:
        order, truncated = order[:MAX_SYMBOLS], True
    labels = []
    for off, i in zip(offs[order].tolist(), which[order].tolist()):
        strings = picked[i][1]
        end = strings.find(b"\0", off)
        labels.append(strings[off:end if end >= 0 else len(strings)].decode(errors="replace"))
    starts = values[order].tolist()
    return Symbols(starts, (values[order] + sizes[order]).tolist(), labels, truncated)


def build_id_of(elf: ELFFile) -> str | None:
    for seg in elf.iter_segments():
        if seg["p_type"] != "PT_NOTE":
            continue
        for note in seg.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID":
                return note["n_desc"]
    return None


def _debuglink(elf: ELFFile) -> str | None:
    sec = elf.get_section_by_name(".gnu_debuglink")
    if sec is None:
        return None
    return sec.data().split(b"\0", 1)[0].decode(errors="replace") or None


def _sections(elf: ELFFile) -> list[tuple[int, int, str]]:
    out = []
    for s in elf.iter_sections():
        flags = s["sh_flags"]
        if flags & SHF_ALLOC and not flags & SHF_TLS and s["sh_size"] > 0 and s["sh_addr"]:
            out.append((s["sh_addr"], s["sh_addr"] + s["sh_size"], s.name))
    return sorted(out)


def parse(f, path: str) -> ElfInfo:
    """Parse an open ELF file (headers and symbol tables only)."""
    try:
        elf = ELFFile(f)
        loads = [(s["p_vaddr"], s["p_memsz"], s["p_offset"], s["p_filesz"])
                 for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        symbols, functions, tables = _symbols_of(
            elf, f, (".symtab",) if elf.get_section_by_name(".symtab") else (".dynsym",))
        return ElfInfo(path, build_id_of(elf), loads, _sections(elf), symbols, tables, _debuglink(elf),
                       functions, elf["e_machine"])
    except (ELFError, struct.error, ValueError, OSError, KeyError, IndexError) as e:
        raise NotElf(f"not a readable ELF file ({e})") from None


def read_build_id(path: str) -> str | None:
    """The build id of the ELF file at path (headers only), None without one or unreadable."""
    try:
        with open(path, "rb") as f:
            return build_id_of(ELFFile(f))
    except (OSError, ELFError, struct.error, ValueError):
        return None


def debug_candidates(path: str, build_id: str | None, link: str | None) -> list[str]:
    """Where a separate debug file for `path` may be, in gdb's order."""
    out = []
    if build_id and len(build_id) > 2:
        out.append(f"{DEBUG_ROOT}/.build-id/{build_id[:2]}/{build_id[2:]}.debug")
    if link:
        d = os.path.dirname(os.path.realpath(path))
        out += [os.path.join(d, link), os.path.join(d, ".debug", link), f"{DEBUG_ROOT}{d}/{link}"]
    return out


class ElfCache:
    """Parsed files, each parsed once: by (device, inode, size, mtime) of the
    file opened, so a path replaced on disk is parsed anew; least recently used
    dropped beyond CACHE_FILES."""

    def __init__(self, max_files: int = CACHE_FILES):
        self._files: OrderedDict[tuple, ElfInfo | NotElf] = OrderedDict()
        self.max_files = max_files
        self.parsed = 0            # files actually parsed (the cache's misses)

    def load(self, path: str, opened_as: str | None = None) -> ElfInfo:
        """The file at `opened_as` (default `path`), named `path`; NotElf or OSError."""
        with open(opened_as or path, "rb") as f:
            st = os.fstat(f.fileno())
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            hit = self._files.get(key)
            if hit is None:
                self.parsed += 1
                try:
                    hit = parse(f, path)
                except NotElf as e:
                    hit = e
                self._files[key] = hit
                while len(self._files) > self.max_files:
                    self._files.popitem(last=False)
            self._files.move_to_end(key)
        if isinstance(hit, NotElf):
            raise hit
        return hit

    def with_debug_symbols(self, info: ElfInfo) -> ElfInfo:
        """`info` with the symbols (data and functions) of its separate debug file where the file has no
        .symtab and one is installed (its build id matching)."""
        if ".symtab" in info.tables:
            return info
        for cand in debug_candidates(info.path, info.build_id, info.debuglink):
            try:
                dbg = self.load(cand)
            except (OSError, NotElf):
                continue
            if info.build_id and dbg.build_id and dbg.build_id != info.build_id:
                continue
            if ".symtab" not in dbg.tables:
                continue
            return ElfInfo(info.path, info.build_id, info.loads, info.sections, _merge(info.symbols, dbg.symbols),
                           info.tables + [cand], info.debuglink, _merge(info.functions, dbg.functions),
                           info.machine)
        return info


def _merge(a: Symbols, b: Symbols) -> Symbols:
    rows = sorted(set(zip(a.starts, a.ends, a.names)) | set(zip(b.starts, b.ends, b.names)))[:MAX_SYMBOLS]
    return Symbols([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
                   a.truncated or b.truncated or len(rows) == MAX_SYMBOLS)
