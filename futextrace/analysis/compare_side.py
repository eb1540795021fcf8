"""One recording's side of a comparison (`futextrace diff`): each figure of a
process and of its hashes, with the noise the recording knows for it.

A figure the recording does not have is None, never 0: an older recording
without `atomic_lookups`, one whose bucket-lock waits were not measured, a
hash whose buckets are not visible. Its noise is None unless the recording
itself tells it: the spread over its `-i` intervals, the benchmark's own
stddev, or an estimate's error; otherwise it is not known and said so.
"""
from __future__ import annotations

import statistics

from futextrace.analysis.lockwaits import CAUSES, measured
from futextrace.recording import HashSummary, Process, Recording

GLOBAL_KINDS = ("global", "global_numa", "global_shared")


def interval_spread(values: list[float]) -> dict | None:
    """The spread of a figure over the recording's intervals; None under two."""
    if len(values) < 2:
        return None
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    return {"source": "intervals", "n": len(values), "mean": mean, "stdev": sd,
            "stdev_pct": sd / mean * 100 if mean else None, "min": min(values), "max": max(values)}


def hash_label(h: HashSummary) -> str:
    """The name an interval row gives a hash ("private 32", "global_shared")."""
    return f"private {h['buckets']}" if h["kind"] == "private" else h["kind"]


def _rate(n: int | None, rec: Recording) -> float | None:
    d = rec.get("duration_s")
    return n / d if n is not None and d else None


def _my_intervals(rec: Recording, pid: int) -> list[tuple[dict, dict]]:
    """(interval, this process's row) for each interval in which it made lookups:
    a process not yet started, or gone, is not a zero of its own rate."""
    out = []
    for iv in rec.get("intervals") or []:
        row = next((r for r in iv.get("processes") or [] if r.get("pid") == pid), None)
        if row is not None:
            out.append((iv, row))
    return out


def private_lookups(proc: Process) -> int:
    return sum(h["lookups"] for h in proc.get("hashes") or [] if h["kind"] == "private")


def _waits(rec: Recording, proc: Process) -> dict:
    """Bucket-lock wait ms/s, total and by cause; None where not measured, or where
    the process used no private hash (only those locks are traced)."""
    names = ["wait_ms_per_s"] + [f"{c}_wait_ms_per_s" for c in CAUSES]
    if not measured(rec) or not private_lookups(proc):
        return {n: (None, None) for n in names}
    c = rec["contention"]
    window = c.get("window_s") or rec.get("duration_s")
    p = next((q for q in c.get("processes") or [] if q["pid"] == proc["pid"]), None)
    zero = {"waits": 0, "wait_ns": 0}
    ns = [p["wait_ns"] if p else 0] + [(p["by_cause"] if p else {}).get(k, zero)["wait_ns"] for k in CAUSES]
    values = [x / 1e6 / window if window else None for x in ns]
    # Per interval only the total is per process (the split by cause is for all).
    per_iv = [next((q["wait_ms_per_s"] for q in iv["lock_waits"].get("processes", [])
                    if q["pid"] == proc["pid"]), 0.0)
              for iv, _ in _my_intervals(rec, proc["pid"]) if iv.get("lock_waits")]
    per_iv = [v for v in per_iv if v is not None]
    noises = [interval_spread(per_iv)] + [None] * len(CAUSES)
    return dict(zip(names, zip(values, noises)))


def _atomic_share(proc: Process) -> float | None:
    """Private lookups made while the refcount was atomic; None in recordings
    without `atomic_lookups`."""
    private = private_lookups(proc)
    if "atomic_lookups" not in proc or not private:
        return None
    return proc["atomic_lookups"] / private


def bench_pid(rec: Recording, bench: dict | None) -> int | None:
    """The process that ran the benchmark: the workload's own pid, else the command's."""
    if not bench:
        return None
    pids = {p["pid"] for p in rec.get("processes") or []}
    if bench.get("pid") in pids:
        return bench["pid"]
    return (rec.get("command") or {}).get("pid")


def process_figures(rec: Recording, proc: Process, bench: dict | None) -> dict:
    """{figure: (value, noise)} of one process (docs/json-schema.md, diff)."""
    rates = [row["lookups_per_s"] for _, row in _my_intervals(rec, proc["pid"]) if "lookups_per_s" in row]
    out = {"lookups_per_s": (_rate(proc.get("lookups"), rec), interval_spread(rates))}
    out.update(_waits(rec, proc))
    out["atomic_share"] = (_atomic_share(proc), None)
    ops, noise = None, None
    if bench and bench_pid(rec, bench) == proc["pid"]:
        ops = bench.get("avg_ops_per_sec")
        if bench.get("stddev_pct") is not None:
            noise = {"source": "benchmark", "stdev_pct": bench["stddev_pct"]}
    out["throughput_ops_per_s"] = (ops, noise)
    return out


def _busiest_share(rec: Recording, pid: int, h: HashSummary) -> tuple:
    imb = h.get("imbalance")
    value = imb["max"] / h["lookups"] if imb and h.get("lookups") else None
    # Interval rows carry bucket counts for their busiest processes' main hash.
    per_iv = [max(row["bucket_counts"].values()) / sum(row["bucket_counts"].values())
              for _, row in _my_intervals(rec, pid)
              if row.get("hash") == hash_label(h) and row.get("bucket_counts")]
    return value, interval_spread(per_iv) if value is not None else None


def _collisions(h: HashSummary) -> tuple:
    """The counted figure, or the estimate's middle with its error; older
    recordings' estimates are bounds."""
    est = (h.get("estimates") or {}).get("collisions")
    if est and "value" in est:
        return est["value"], {"source": "estimate", "error_pct": est.get("error_pct")}
    if est and "low" in est:
        return h.get("collisions"), {"source": "bounds", "low": est["low"], "high": est["high"]}
    return h.get("collisions"), None


def hash_mode(rec: Recording, pid: int, h: HashSummary) -> str | None:
    """custom (set by prctl), auto (sized by the kernel) or global; None: not seen."""
    if h["kind"] in GLOBAL_KINDS:
        return "global"
    n = h["buckets"]
    seen = [s["custom"] for s in rec.get("hash_states") or [] if s["pid"] == pid and s["buckets"] == n]
    seen += [r["custom"] for r in rec.get("resizes") or []
             if r["pid"] == pid and r.get("new_buckets") == n and r.get("result") in (0, None)]
    state = ((rec.get("hash_at_attach") or {}).get("processes") or {}).get(str(pid)) or {}
    if not seen and state.get("buckets") == n and state.get("mode"):
        return state["mode"]
    return ("custom" if seen[-1] else "auto") if seen else None


def hash_figures(rec: Recording, pid: int, h: HashSummary) -> dict:
    """{figure: (value, noise)} of one hash a process used."""
    return {"lookups_per_s": (_rate(h.get("lookups"), rec), None),
            "busiest_share": _busiest_share(rec, pid, h),
            "collisions": _collisions(h)}
