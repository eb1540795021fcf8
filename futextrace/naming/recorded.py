"""The futex addresses a recording lists, named: each process's
`futex_names` (docs/json-schema.md), from the snapshots captured during the
run (naming/capture.py), the file symbols (naming/resolve.py) and a last
read of each process still alive."""
from __future__ import annotations

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


def name_processes(rec: Recording, capture: NameCapture, namer: Namer | None = None) -> Namer:
    """Add `futex_names` to each process of `rec` that lists an address."""
    namer = namer or Namer(build_ids=capture.build_ids)
    for proc in rec.get("processes", []):
        addrs = addresses(rec, proc["pid"])
        if not addrs:
            continue
        alive = capture.snap(proc["pid"])     # the map at the end, while it still lives
        snaps = capture.snapshots(proc["pid"])
        proc["futex_names"] = {hex(a): namer.name(a, snaps, alive) for a in addrs}
    return namer
