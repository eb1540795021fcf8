"""Kernel symbols from /proc/kallsyms (or a System.map of the same format).

Notes:
- Without privileges (kptr_restrict) every address reads 0; names are still
  right, so "has a symbol" works, addresses become None.
- GCC clones and splits functions: `foo.isra.0` / `foo.constprop.0` are whole
  copies with a changed calling convention; `foo.part.0` and `foo.cold` are only
  fragments of foo, so they are never a probe target for foo.
- Static data symbols appear only with CONFIG_KALLSYMS_ALL.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Suffixes of whole-function clones (usable entry points, changed ABI).
CLONE_SUFFIX = re.compile(r"\.(isra|constprop)(\.\d+)+$")
# Suffixes of fragments (not an entry point of the original function).
FRAGMENT_SUFFIX = re.compile(r"\.(part|cold|lto_priv)(\.\d+)*$")


@dataclass
class Symbol:
    name: str
    type: str        # kallsyms type letter: T/t text, D/d data, B/b bss, R/r rodata ...
    address: int | None
    module: str | None = None
    # Address of the next text symbol after this one in the file (vmlinux's
    # symbols are listed in address order): the end of a function's text.
    next_text: int | None = None


def _dotted_prefixes(name: str) -> list[str]:
    """"a.part.0" -> ["a", "a.part"]: every name it could be a fragment of."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


class Kallsyms:
    def __init__(self, symbols: list[Symbol]):
        self.symbols = symbols
        self._by_name: dict[str, list[Symbol]] = {}
        for s in symbols:
            self._by_name.setdefault(s.name, []).append(s)
        # Clone name -> base name, e.g. "futex_wake.isra.0" -> "futex_wake".
        self._clones: dict[str, list[str]] = {}
        # Base name -> its fragments, indexed once: a scan per question costs 1.4 s.
        self._fragments: dict[str, list[str]] = {}
        for s in symbols:
            if "." not in s.name:
                continue
            if CLONE_SUFFIX.search(s.name):
                self._clones.setdefault(CLONE_SUFFIX.sub("", s.name), []).append(s.name)
            if FRAGMENT_SUFFIX.search(s.name):
                for base in _dotted_prefixes(s.name):
                    frags = self._fragments.setdefault(base, [])
                    if s.name not in frags:
                        frags.append(s.name)

    @classmethod
    def from_file(cls, path: str | Path = "/proc/kallsyms", modules: bool = False,
                  containing: str | None = None) -> "Kallsyms":
        """Symbols of `path`; with `containing`, only those whose line holds that
        word (the futex model needs ~100 of the kernel's ~120,000 symbols)."""
        syms = []
        pending: list[Symbol] = []     # kept symbols still waiting for their next_text
        with open(path, "r", errors="replace") as f:
            for line in f:
                wanted = containing is None or containing in line
                if not wanted and not pending:
                    continue
                parts = line.split()
                if len(parts) < 3:
                    continue
                addr = int(parts[0], 16)
                if pending and parts[1] in "Tt" and addr:
                    for s in pending:
                        if addr > s.address:
                            s.next_text = addr
                    pending = [s for s in pending if s.next_text is None]
                if not wanted:
                    continue
                mod = parts[3].strip("[]") if len(parts) > 3 else None
                if mod is not None and not modules:
                    continue
                sym = Symbol(parts[2], parts[1], addr or None, mod)
                syms.append(sym)
                if sym.address:
                    pending.append(sym)
        return cls(syms)

    @property
    def addresses_visible(self) -> bool:
        return any(s.address for s in self.symbols[:100])

    def lookup(self, name: str) -> Symbol | None:
        hits = self._by_name.get(name)
        return hits[0] if hits else None

    def function(self, name: str) -> tuple[str | None, bool]:
        """(symbol to probe for function `name`, is_clone). (None, False) when inlined
        everywhere. A clone is returned only when the exact name is missing."""
        s = self.lookup(name)
        if s is not None and s.type in "Tt":
            return s.name, False
        clones = self._clones.get(name)
        if clones:
            return sorted(clones)[0], True
        return None, False

    def fragments(self, name: str) -> list[str]:
        """`.part.N` / `.cold` pieces of `name` (evidence it was split or partly inlined)."""
        return list(self._fragments.get(name, []))

    def names_matching(self, word: str) -> list[Symbol]:
        return [s for s in self.symbols if word in s.name]


def futex_kallsyms(model) -> Kallsyms | None:
    """The futex symbols with their addresses: from the model (kept per boot),
    else read from /proc/kallsyms (a model from a file). None: addresses hidden."""
    if model.futex_symbols:
        return Kallsyms([Symbol(name, typ, addr or None, None, nxt or None)
                         for name, (typ, addr, nxt) in model.futex_symbols.items()])
    try:
        ks = Kallsyms.from_file("/proc/kallsyms", containing="futex")
    except OSError:
        return None
    return ks if ks.addresses_visible else None
