"""The futex addresses a recording lists, named: each process's
`futex_names` (docs/json-schema.md), from the snapshots captured during the
run (naming/capture.py), the file symbols (naming/resolve.py) and a last
read of each process still alive; with each name, where the program took
them, the call sites of its first lookup and of its first bucket-lock waits
(naming/callsites.py)."""
from __future__ import annotations

from futextrace.loading.callsites import CALL_SITE_DEPTH
from futextrace.naming import callsites
from futextrace.naming.capture import NameCapture
from futextrace.naming.resolve import Namer
from futextrace.recording import Recording

MAX_NAMED = 1024    # addresses named per process: the hottest buckets', the lock waits', then the busiest listed


def addresses(rec: Recording, pid: int) -> list[int]:
    """The addresses the recording lists for PID, those shown first, at most MAX_NAMED."""
    proc = next((p for p in rec.get("processes", []) if p["pid"] == pid), {})
    out: list[str] = [a for h in proc.get("hashes", []) for b in h.get("hottest", []) for a in b["addresses"]]
    for c in (rec.get("contention") or {}).get("processes", []):
        if c["pid"] == pid:
            out += [f["uaddr"] for b in c["buckets"] for f in b["futexes"] if f["uaddr"]]
    listed = (proc.get("futex_list") or {}).get("listed", [])
    out += [f["uaddr"] for f in sorted(listed, key=lambda f: -f["lookups"])]
    seen: dict[int, None] = {}
    for a in out:
        seen.setdefault(int(a, 16), None)
        if len(seen) >= MAX_NAMED:
            break
    return list(seen)


def name_processes(rec: Recording, capture: NameCapture, namer: Namer | None = None,
                   sites: list[dict] | None = None) -> Namer:
    """Add `futex_names` to each process of `rec` that lists an address.
    `sites`: the call-site map's rows (loading/callsites.py); None when the
    program took no stacks (then the names carry no `call_sites`)."""
    namer = namer or Namer(build_ids=capture.build_ids)
    by_futex = _sites_by_futex(sites or [])
    for proc in rec.get("processes", []):
        addrs = addresses(rec, proc["pid"])
        if not addrs:
            continue
        alive = capture.snap(proc["pid"])     # the map at the end, while it still lives
        snaps = capture.snapshots(proc["pid"])
        names = {}
        for a in addrs:
            names[hex(a)] = namer.name(a, snaps, alive)
            if sites is not None:
                names[hex(a)]["call_sites"] = _call_sites(by_futex.get((proc["pid"], a), {}), snaps, namer, alive)
        proc["futex_names"] = names
    return namer


def _sites_by_futex(rows: list[dict]) -> dict[tuple[int, int], dict[str, list[list[int]]]]:
    """(tgid, uaddr) -> {"first_lookup": [ips], "lock_wait": [ips, ...]}, waits in their order."""
    out: dict[tuple[int, int], dict[str, list[list[int]]]] = {}
    for r in sorted(rows, key=lambda r: r["nth"]):
        out.setdefault((r["tgid"], r["uaddr"]), {}).setdefault(r["what"], []).append(r["ips"])
    return out


def _call_sites(stacks: dict[str, list[list[int]]], snaps, namer: Namer, alive: bool) -> dict:
    """processes[].futex_names[].call_sites: each distinct stack symbolized once."""
    def named(ips: list[int]) -> dict:
        return callsites.symbolize(ips, snaps, namer, alive, max_frames=CALL_SITE_DEPTH)
    first = stacks.get("first_lookup")
    waits = [{**named(ips), "count": n} for ips, n in callsites.dedup(stacks.get("lock_wait", []))]
    return {"first_lookup": named(first[0]) if first else None,
            "lock_waits": sorted(waits, key=lambda w: -w["count"])}
