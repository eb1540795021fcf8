"""A futex's name (processes[].futex_names, futextrace/naming/) in words:
`ledger_gate (myapp .bss)`, `myapp .bss+0x4480 (no symbol: stripped)`,
`[heap]+0x2a0`, `stack of thread 1235`, with the call site of its first
lookup where the recording has one: `← touch+0x1c ← settle_accounts+0x18`.
Recordings without names show nothing more than before."""
from __future__ import annotations

import os

from futextrace.naming.callsites import label
from futextrace.recording import FutexName

LEGEND_MAX = 12     # names listed under a table; the rest are in the JSON


def _plus(off: int | None) -> str:
    return f"+{off:#x}" if off else ""


def _object(n: FutexName) -> str:
    return os.path.basename(n["mapping"] or "?")


def short_name(n: FutexName) -> str:
    """The name alone: the symbol, else where it lives (`myapp .bss+0x40`, `[heap]+0x10`)."""
    kind = n["kind"]
    if n.get("symbol"):
        return n["symbol"] + _plus(n.get("offset"))
    if kind == "file":
        where = f"{_object(n)} {n['section']}" if n.get("section") else _object(n)
        return where + _plus(n.get("offset"))
    if kind == "thread_stack":
        return f"stack of thread {n['tid']}" if n.get("tid") else "a thread's stack"
    if kind == "stack":
        return "main thread's stack"
    if kind == "malloc_arena":
        return "malloc arena" + _plus(n.get("offset"))
    if kind in ("heap", "shared_file"):
        return (n["mapping"] or "?") + _plus(n.get("offset"))
    if kind == "anon":
        return "anonymous memory" if n["mapping"] == "[anon]" else n["mapping"] or "?"
    if kind == "unmapped":
        return "unknown"
    return n["mapping"] or "unknown"


def name_text(n: FutexName) -> str:
    """The name with where it is and, for a file without a symbol, why."""
    if n.get("symbol"):
        where = f"{_object(n)} {n['section']}" if n.get("section") else _object(n)
        return f"{short_name(n)} ({where})"
    why = (n.get("why_unknown") or "").split(":")[0]
    if n["kind"] == "file":
        return f"{short_name(n)} (no symbol: {why})"
    if n["kind"] == "shared_file":
        return f"{short_name(n)} (shared file)"
    if n["kind"] == "unmapped":
        return f"unknown ({why})"
    return short_name(n)


def first_call_site(n: FutexName) -> str:
    """` ← touch+0x1c ← settle_accounts+0x18`: where its first lookup came from ("" when not taken)."""
    first = (n.get("call_sites") or {}).get("first_lookup")
    return f" ← {label(first)}" if first else ""


def wait_call_sites(n: FutexName, most: int = 2) -> list[str]:
    """Where its bucket-lock waits came from, busiest first: stacks that differ
    only past the frames shown are one line here (all are in the JSON)."""
    counts: dict[str, int] = {}
    for w in (n.get("call_sites") or {}).get("lock_waits", []):
        counts[label(w)] = counts.get(label(w), 0) + w["count"]
    return sorted(counts, key=lambda t: -counts[t])[:most]


def with_name(addr: str, names: dict[str, FutexName] | None) -> str:
    """`0x55d0... ledger_gate`, or the address alone when it has no name."""
    n = (names or {}).get(addr)
    return f"{addr} {short_name(n)}" if n else addr


def legend(addresses: list[str], names: dict[str, FutexName] | None, indent: str) -> list[str]:
    """One line per named address (in the order given, each once), at most LEGEND_MAX."""
    if not names:
        return []
    shown = [a for a in dict.fromkeys(addresses) if a in names]
    if not shown:
        return []
    width = max(len(a) for a in shown[:LEGEND_MAX])
    out = [f"{indent}{a:<{width}}  {name_text(names[a])}{first_call_site(names[a])}" for a in shown[:LEGEND_MAX]]
    if len(shown) > LEGEND_MAX:
        out.append(f"{indent}... {len(shown) - LEGEND_MAX} more named in the JSON (futex_names)")
    return out
