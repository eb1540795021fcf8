"""What resizes cost a process: the hash installed now, a replacement still
waiting for its pivot, and the time its refcounts spent in atomic mode.

While a replacement hash waits in mm->futex_phash_new, every reference to the
old one goes to one shared atomic counter (fph->state atomic) until the pivot.
The windows come from the resize timeline (futextrace/analysis/timeline.py):
with the kprobe method futex_hash_allocate() and __futex_pivot_hash() are
probed, so allocation -> pivot is measured; with the tracepoint method the
request is the clone/prctl and the pivot is the first futex call seen on the
new hash, so the windows are inferred. The lookups made in atomic mode are the
per-futex `atomic` counts (fph->state read at each lookup, both methods).

Pure Python over a recording (docs/json-schema.md, `resize_cost`); words:
output/text/atomic_text.py.
"""
from __future__ import annotations

from futextrace.recording import AtomicWindow, Installed, Recording, ResizeCost

PER_PROCESS = ("resizes", "hash_states", "processes")   # rows with a "pid": process_cost reads its own


def installed_at(pid: int, rec: Recording, t: float | None = None) -> Installed | None:
    """The hash the process used at time t (default: the end): the latest
    pivot or sight of it up to then."""
    seen = [(s["t"], s["buckets"], s["custom"]) for s in rec.get("hash_states", []) if s["pid"] == pid]
    seen += [(r["pivot_t"], r["new_buckets"], r["custom"]) for r in rec.get("resizes", [])
             if r["pid"] == pid and r["result"] == 0 and r["pivot_t"] is not None]
    seen = [s for s in seen if t is None or s[0] <= t]
    if not seen:
        return None
    since, buckets, custom = max(seen, key=lambda s: s[0])
    return {"buckets": buckets, "custom": bool(custom), "since_t": since}


def _windows(pid: int, rec: Recording) -> list[AtomicWindow]:
    """One window per successful resize that had to wait for its pivot;
    an open one ends with the recording."""
    out = []
    # A replacement that never pivoted itself ends at the next pivot: a later
    # request replaced it while it waited ("two updates raced" in
    # futex_hash_allocate), or took over with it.
    pivots = sorted(r["pivot_t"] for r in rec.get("resizes", [])
                    if r["pid"] == pid and r["result"] == 0 and r["pivot_t"] is not None)
    for r in rec.get("resizes", []):
        # An inferred SET_SLOTS whose caller is not back yet waits in prctl()
        # for its pivot (futex_hash_allocate: wait_var_event): pending.
        waiting = r["result"] is None and r.get("result_inferred") and r["pivot_t"] is None
        if r["pid"] != pid or not (r["result"] == 0 or waiting) or not r["old_buckets"]:
            continue    # refused, or no old private hash to drain: installed at once
        superseded = next((t for t in pivots if t >= r["t"]), None) if r["pivot_t"] is None else None
        if superseded is not None:
            out.append({"t": r["t"], "end_t": superseded, "open": False, "superseded": True,
                        "old_buckets": r["old_buckets"], "new_buckets": r["new_buckets"]})
        elif r["pivot_t"] is None:
            out.append({"t": r["t"], "end_t": max(r["t"], rec.get("duration_s", r["t"])), "open": True,
                        "old_buckets": r["old_buckets"],
                        "new_buckets": r["requested"] if waiting else r["new_buckets"]})
        elif r["pending_s"]:
            out.append({"t": r["t"], "end_t": r["pivot_t"], "open": False,
                        "old_buckets": r["old_buckets"], "new_buckets": r["new_buckets"]})
    return sorted(out, key=lambda w: w["t"])


def pending_at(pid: int, rec: Recording, t: float) -> int | None:
    """Buckets of the replacement waiting for its pivot at time t, or None."""
    waiting = [w for w in _windows(pid, rec) if w["t"] <= t < w["end_t"] or (w["open"] and w["t"] <= t)]
    return waiting[-1]["new_buckets"] if waiting else None


def _merged_spans(windows: list[dict]) -> list[tuple[float, float]]:
    """Overlapping windows counted once (a prctl may land while a clone's waits)."""
    spans: list[list[float]] = []
    for w in windows:
        if spans and w["t"] <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], w["end_t"])
        else:
            spans.append([w["t"], w["end_t"]])
    return [(a, b) for a, b in spans]


def _lookups(pid: int, rec: Recording) -> tuple[int, int]:
    """(private-hash lookups, those made while its refcount was atomic)."""
    proc = next((p for p in rec.get("processes", []) if p["pid"] == pid), {})
    private = [h for h in proc.get("hashes", []) if h["kind"] == "private"]
    return sum(h["lookups"] for h in private), proc.get("atomic_lookups", 0)


def _pids(rec: Recording) -> list[int]:
    pids = {r["pid"] for r in rec.get("resizes", [])} | {s["pid"] for s in rec.get("hash_states", [])}
    return sorted(pids)


def process_cost(pid: int, rec: Recording) -> ResizeCost:
    """Installed hash, pending replacement and atomic time of one process."""
    measured = rec.get("method", {}).get("name") in ("kprobe", "fentry")   # allocate/pivot hooked
    windows = [{**w, "s": round(w["end_t"] - w["t"], 6)} for w in _windows(pid, rec)]
    spans = _merged_spans(windows)
    private, atomic = _lookups(pid, rec)
    share = atomic / private if private else 0.0
    last_open = next((w for w in reversed(windows) if w["open"]), None)
    pending = None
    if last_open is not None:
        pending = {"buckets": last_open["new_buckets"], "since_t": last_open["t"],
                   "for_s": last_open["s"], "atomic_share": share}
    comm = next((x["comm"] for x in rec.get("resizes", []) + rec.get("hash_states", [])
                 if x["pid"] == pid and x.get("comm")), "")
    return {"pid": pid, "comm": comm, "installed": installed_at(pid, rec), "pending": pending,
            "atomic": {"source": "measured" if measured else "inferred",
                       "windows": windows, "total_s": round(sum(b - a for a, b in spans), 6),
                       "longest_s": max((w["s"] for w in windows), default=0.0),
                       "lookups": atomic, "private_lookups": private, "share": share}}


def resize_cost(rec: Recording) -> list[ResizeCost]:
    """process_cost() for every process with a hash state or a resize, each
    given only its own rows of the per-process lists (the only ones it reads):
    scanning every row for every process (hundreds with a hash state on a
    busy host) cost the exporter several ms a scrape."""
    own: dict[int, dict[str, list]] = {}
    for name in PER_PROCESS:
        for row in rec.get(name, []):
            own.setdefault(row["pid"], {}).setdefault(name, []).append(row)
    rest = {k: v for k, v in rec.items() if k not in PER_PROCESS}
    return [process_cost(pid, {**rest, **own.get(pid, {})}) for pid in _pids(rec)]
