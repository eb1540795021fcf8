"""Read the call-site map (bpf/call_sites.h): the user stacks taken at a
futex's first lookup and at its first bucket-lock waits, as raw instruction
pointers. Naming them is naming/callsites.py's job, with the memory maps
captured while the process lived."""
from __future__ import annotations

import ctypes as ct

from futextrace.kernel.layout import COUNTER, define, enum

SITE = enum("ft_site_what")
CALL_SITE_DEPTH = define("CALL_SITE_DEPTH")     # frames a stack keeps
# At most CALL_SITES_MAX stacks in all (152 bytes each, preallocated: 2.4
# MiB), each CPU at most its share (never fewer than CALL_SITES_PER_CPU_MIN),
# then it takes no more stacks and counts them (FTC_CALL_SITES_OVER).
CALL_SITES_MAX = 16384
CALL_SITES_PER_CPU_MIN = 64


def call_site_macros(on: bool, ncpu_ids: int) -> dict[str, int]:
    """-D macros: the call-site map's size and each CPU's budget (one entry when off)."""
    total = CALL_SITES_MAX if on else 1
    return {"CALL_SITES_MAX": total, "CALL_SITES_PER_CPU": max(CALL_SITES_PER_CPU_MIN, total // ncpu_ids)}


def read(program) -> list[dict]:
    """[{tgid, what: "first_lookup"|"lock_wait", nth, uaddr, ips}] (the map is
    declared, one entry and empty, in a program built without call sites)."""
    what = {SITE["FT_SITE_FIRST"]: "first_lookup", SITE["FT_SITE_WAIT"]: "lock_wait"}
    out = []
    for k, v in program.bpf["call_sites"].items():
        n = min(int(v.nr_frames), len(v.ips))
        out.append({"tgid": k.tgid, "what": what.get(k.what, "?"), "nth": k.nth, "uaddr": k.uaddr,
                    "ips": [int(v.ips[i]) for i in range(n)]})
    return out


def summary(program, rows: list[dict]) -> dict:
    """The recording's `call_sites`: what was taken, and what was not and why."""
    table = program.bpf["counters"]

    def total(name: str) -> int:
        return sum(table[ct.c_int(COUNTER[name])])
    budget = call_site_macros(True, program.ncpu_ids)["CALL_SITES_PER_CPU"]
    return {"stacks": len(rows), "over_budget": total("FTC_CALL_SITES_OVER"),
            "lost": total("FTC_CALL_SITES_LOST"), "per_cpu_budget": budget}
