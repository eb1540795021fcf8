"""Bucket-lock contention: the recording's `contention` section and the advice
that rests on it.

The BPF side (bpf/lock_waits.h) gives one row per (process, hash size,
bucket, waiting futex) with wait count, total and longest wait. A bucket's
waits in the window are:

- collision: two or more distinct futexes were seen waiting on that bucket's
  lock in the window; more buckets could separate them;
- same_futex: exactly one futex was seen waiting on it; the waits are on that
  one futex's own traffic and more buckets cannot remove them;
- unknown: no waiter's futex could be named (a path that is not the waiter's
  futex syscall, or a futex_waitv entry beyond the first few).

The holder's futex is not seen (the tracepoints fire in the waiter), so a
bucket whose one waiting futex collides with a futex that only ever held the
lock counts as same_futex: collision figures are a lower bound.
"""
from __future__ import annotations

from futextrace.kernel.jhash import private_bucket
from futextrace.kernel.sizing import buckets_of
from futextrace.recording import Contention, Recording

CAUSES = ("collision", "same_futex", "unknown")
MAX_SLOTS = 1 << 16          # the largest size advice names
BLIND_SPOTS = [
    "the holder's futex: a wait names the waiting futex only (collision figures are a lower bound)",
    "global-hash bucket locks (shared futexes, processes without a private hash): the global "
    "table's address is not known without CONFIG_KALLSYMS_ALL",
    "the uncontended fast path: a lock taken without waiting costs nothing here and is not counted",
    "guests of a hypervisor without paravirt spinlocks (e.g. QEMU/TCG): the kernel's test-and-set "
    "fallback (virt_spin_lock) spins without the lock:contention tracepoints, so no wait is seen there",
]


def cause_of(futexes: set[int]) -> str:
    """The one rule for a bucket's waits, in the recording, `record -i` and `serve`
    (0: a waiter whose futex could not be named)."""
    known = futexes - {0}
    if len(known) >= 2:
        return "collision"
    return "same_futex" if known else "unknown"


class WaitBook:
    """Bucket-lock waits as they grow: fed the lock_waits map's cumulative rows
    (bpf/lock_waits.h) again and again, it returns each bucket's new waits since the
    last feed, with the cause its futexes give it so far (`record -i` per interval,
    `serve` per scrape). High-water marks per row, so nothing is counted twice."""

    def __init__(self):
        self.high: dict[tuple, tuple[int, int]] = {}     # map key -> (waits, ns)
        self.futexes: dict[tuple, set[int]] = {}         # (tgid, mask, bucket) -> futexes seen

    def feed(self, rows: list[dict]) -> dict[tuple, tuple[int, int, str]]:
        """(tgid, mask, bucket) -> (new waits, new wait ns, cause), buckets that waited only."""
        deltas: dict[tuple, list[int]] = {}
        for r in rows:
            key = (r["tgid"], r["hash_mask"], r["bucket"], r["uaddr"])
            w0, n0 = self.high.get(key, (0, 0))
            if r["waits"] <= w0 and r["wait_ns"] <= n0:
                continue
            self.high[key] = (max(w0, r["waits"]), max(n0, r["wait_ns"]))
            self.futexes.setdefault(key[:3], set()).add(r["uaddr"])
            d = deltas.setdefault(key[:3], [0, 0])
            d[0] += max(0, r["waits"] - w0)
            d[1] += max(0, r["wait_ns"] - n0)
        return {b: (w, ns, cause_of(self.futexes[b])) for b, (w, ns) in deltas.items()}

    def forget(self, tgids: set[int]) -> None:
        """Processes no longer followed: their marks go."""
        self.high = {k: v for k, v in self.high.items() if k[0] not in tgids}
        self.futexes = {k: v for k, v in self.futexes.items() if k[0] not in tgids}


def _zero() -> dict:
    return {c: {"waits": 0, "wait_ns": 0} for c in CAUSES}


def _buckets(rows: list[dict]) -> dict[tuple, dict]:
    """(tgid, hash_mask, bucket) -> bucket summary with its futexes."""
    out: dict[tuple, dict] = {}
    for r in rows:
        key = (r["tgid"], r["hash_mask"], r["bucket"])
        b = out.setdefault(key, {"bucket": r["bucket"], "buckets": buckets_of(r["hash_mask"]), "waits": 0,
                                 "wait_ns": 0, "max_ns": 0, "futexes": []})
        b["waits"] += r["waits"]
        b["wait_ns"] += r["wait_ns"]
        b["max_ns"] = max(b["max_ns"], r["max_ns"])
        b["futexes"].append({"uaddr": hex(r["uaddr"]) if r["uaddr"] else None,
                             "waits": r["waits"], "wait_ns": r["wait_ns"]})
    for b in out.values():
        b["cause"] = cause_of({int(f["uaddr"], 16) if f["uaddr"] else 0 for f in b["futexes"]})
        b["futexes"].sort(key=lambda f: -f["wait_ns"])
    return out


def bycause_of(buckets) -> dict:
    split = _zero()
    for b in buckets:
        split[b["cause"]]["waits"] += b["waits"]
        split[b["cause"]]["wait_ns"] += b["wait_ns"]
    return split


def section(rows: list[dict], counters: dict, duration_s: float, status: str,
            comms: dict[int, str] | None = None, top: int = 16) -> Contention:
    """The recording's `contention` section (docs/json-schema.md)."""
    buckets = _buckets(rows)
    procs = []
    for tgid in sorted({k[0] for k in buckets}):
        mine = sorted((b for k, b in buckets.items() if k[0] == tgid), key=lambda b: -b["wait_ns"])
        waits, ns = sum(b["waits"] for b in mine), sum(b["wait_ns"] for b in mine)
        procs.append({"pid": tgid, "comm": (comms or {}).get(tgid), "waits": waits, "wait_ns": ns,
                      "wait_ms_per_s": _per_s(ns, duration_s), "by_cause": bycause_of(mine),
                      "buckets_waited": len(mine), "buckets": mine[:top]})
    procs.sort(key=lambda p: -p["wait_ns"])
    allb = list(buckets.values())
    return {"status": status, "window_s": duration_s,
            "waits": sum(b["waits"] for b in allb), "wait_ns": sum(b["wait_ns"] for b in allb),
            "wait_ms_per_s": _per_s(sum(b["wait_ns"] for b in allb), duration_s),
            "by_cause": bycause_of(allb), "waits_lost": counters.get("WAITS_LOST", 0),
            "processes": procs, "blind_spots": BLIND_SPOTS}


def _per_s(ns: int, duration_s: float) -> float | None:
    return round(ns / 1e6 / duration_s, 6) if duration_s and duration_s > 0 else None   # us waits stay visible


def separating_size(colliding: list[int], waiting: list[int], current: int,
                    max_slots: int = MAX_SLOTS) -> int | None:
    """The smallest power of two above `current` at which each colliding
    futex has a private bucket (the kernel's jhash2) that no other futex that
    waited shares; None up to max_slots."""
    coll = sorted(set(a for a in colliding if a))
    others = sorted(set(a for a in waiting if a))
    if not coll:
        return None
    size = max(2, current * 2)
    while size <= max_slots:
        used: dict[int, int] = {}
        for a in others:
            b = private_bucket(a, size - 1)
            used[b] = used.get(b, 0) + 1
        if all(used.get(private_bucket(a, size - 1), 0) <= 1 for a in coll):
            return size
        size *= 2
    return None


# Below this, a process's bucket-lock waits count as nothing measurable:
# 0.1 ms of waiting per second of recording, 0.01% of one CPU.
MEASURABLE_MS_PER_S = 0.1


def _proc(rec: Recording, pid: int) -> dict | None:
    c = rec.get("contention") or {}
    return next((p for p in c.get("processes", []) if p["pid"] == pid), None)


def measured(rec: Recording) -> bool:
    """The recording measured bucket-lock waits (the lock tracepoints were attached)."""
    return (rec.get("contention") or {}).get("status", "").startswith("attached")


def _ms_per_s(ns: int, rec: Recording) -> float:
    return ns / 1e6 / max(rec["contention"].get("window_s") or 0, 1e-9)


def advice(pid: int, rec: Recording, cur: int) -> dict:
    """What the measured bucket-lock waits say about the size (output/text/explain_advice.py
    words it). verdict: global_hash (its locks are not traced), collision (`slots`
    separates the colliding futexes), no_separating_size, same_futex, untied (waits
    tied to no futex) or nothing_measurable."""
    if not cur:
        return {"verdict": "global_hash", "slots": None}
    p = _proc(rec, pid) or {"waits": 0, "wait_ns": 0, "by_cause": _zero(), "buckets": []}
    coll, same = p["by_cause"]["collision"], p["by_cause"]["same_futex"]
    rates = {"total": _ms_per_s(p["wait_ns"], rec), "collision": _ms_per_s(coll["wait_ns"], rec),
             "same_futex": _ms_per_s(same["wait_ns"], rec)}
    out = {"slots": None, "waits": p["waits"], "window_s": rec["contention"].get("window_s") or 0,
           "ms_per_s": rates, "current": cur, "buckets_hit": []}
    if rates["collision"] >= MEASURABLE_MS_PER_S:
        hit = [b for b in p["buckets"] if b["cause"] == "collision"]
        colliding = [int(f["uaddr"], 16) for b in hit for f in b["futexes"] if f["uaddr"]]
        waiting = [int(f["uaddr"], 16) for b in p["buckets"] for f in b["futexes"] if f["uaddr"]]
        size = separating_size(colliding, waiting, cur or 1)
        return {**out, "verdict": "collision" if size else "no_separating_size", "slots": size,
                "buckets_hit": [b["bucket"] for b in hit]}
    if rates["same_futex"] >= MEASURABLE_MS_PER_S:
        return {**out, "verdict": "same_futex"}
    if rates["total"] >= MEASURABLE_MS_PER_S:
        return {**out, "verdict": "untied"}
    return {**out, "verdict": "nothing_measurable"}


def process_figures(rec: Recording | None, pid: int | None, private: bool = True) -> dict:
    """A benchmark point's bucket-lock figures (sweep/bench tables): the
    workload's wait ms/s in all and from collisions; "n/a" on the global hash
    (its locks are not traced), {} when not measured."""
    if not rec or not measured(rec):
        return {}
    if not private:
        return {"lock wait ms/s": "n/a", "collision ms/s": "n/a"}
    p = _proc(rec, pid) if pid is not None else None
    window = rec["contention"].get("window_s") or 0
    if p is None:
        return {"lock wait ms/s": 0.0, "collision ms/s": 0.0} if window else {}
    return {"lock wait ms/s": p["wait_ms_per_s"],
            "collision ms/s": round(_ms_per_s(p["by_cause"]["collision"]["wait_ns"], rec), 3)}
