"""The bucket-lock waits of a recording: read from the kernel (dump) and
turned into the recording's `contention` section (analysis/contention.py)."""
from __future__ import annotations

from futextrace.analysis.contention import section
from futextrace.loading import contention
from futextrace.record import targets
from futextrace.recording import Contention


def status(program) -> str:
    """"attached (tp_btf)", "attached (raw_tracepoint: why)" or why not attached."""
    if program.contention != "attached":
        return f"not attached: {program.contention}"
    if program.contention_fallback:
        return f"attached (raw_tracepoint: {program.contention_fallback})"
    return "attached (tp_btf)"


def contention_dump(program) -> dict:
    """The raw dump's part for bucket-lock waits (empty lists when not attached)."""
    if program is None or program.bpf is None or program.contention != "attached":
        return {"lock_waits": [], "lock_counters": {},
                "contention_status": status(program) if program else "not attached"}
    return {"lock_waits": contention.read_waits(program.bpf),
            "lock_counters": contention.read_counters(program.bpf), "contention_status": status(program)}


def contention_section(raw: dict, duration_s: float, comms: dict[int, str]) -> Contention:
    rows = raw.get("lock_waits", [])
    names = dict(comms)
    for tgid in {r["tgid"] for r in rows} - set(names):
        names[tgid] = targets.comm_label(tgid)
    return section(rows, raw.get("lock_counters", {}), duration_s,
                   raw.get("contention_status", "not recorded"), names)
