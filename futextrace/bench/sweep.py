"""Throughput of the futex-hash workload across bucket counts (the LKML tables).

One run per bucket count, plus the kernel's automatic size and the global hash,
all with the same threads/futexes/runtime.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from futextrace.analysis.lockwaits import process_figures
from futextrace.bench import runner as bench
from futextrace.bench.runner import AUTO, GLOBAL, WorkloadOptions
from futextrace.errors import UsageError

DEFAULT_BUCKETS = "2-131072"


def parse_bucket_list(text: str) -> list[int]:
    """'2,4,64' and/or 'LO-HI' ranges (every power of two in [LO, HI]), sorted, unique."""
    out: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "-" in part:
            lo_s, _, hi_s = part.partition("-")
            try:
                lo, hi = int(lo_s, 0), int(hi_s, 0)
            except ValueError:
                raise UsageError(f"--buckets: bad range '{part}' (expected LO-HI)") from None
            if lo > hi:
                raise UsageError(f"--buckets: empty range '{part}'")
            n = 2
            while n <= hi:
                if n >= lo:
                    out.add(bench.check_buckets(n))
                n *= 2
            if not any(lo <= b <= hi for b in out):
                raise UsageError(f"--buckets: no power of two >= 2 in range '{part}'")
        else:
            b = bench.parse_buckets(part)
            if b in (AUTO, GLOBAL):
                raise UsageError("--buckets: auto and global are always included; "
                                 "list only powers of two")
            out.add(b)
    if not out:
        raise UsageError("--buckets: no bucket counts given")
    return sorted(out)


def sweep_points(buckets: list[int], extras: bool = True) -> list[int]:
    """Run order: auto and global first (the references), then ascending counts."""
    return ([AUTO, GLOBAL] if extras else []) + buckets


def trace_figures(recording: dict | None) -> dict:
    """Imbalance and collision figures of the workload's busiest hash in a recording
    (aggregate.py: processes[].hashes[].imbalance / .collisions); {} when absent,
    so a recorder schema change loses columns, not the sweep."""
    if not recording:
        return {}
    pid = (recording.get("command") or {}).get("pid")
    procs = recording.get("processes") or []
    proc = next((p for p in procs if p.get("pid") == pid), procs[0] if procs else None)
    hashes = (proc or {}).get("hashes") or []
    if not hashes:
        return {}
    h, imb = hashes[0], hashes[0].get("imbalance") or {}
    fig = {"max/mean": imb.get("max_over_mean"), "cv": imb.get("cv"),
           "buckets used": f"{imb['used']}/{imb['buckets']}" if "used" in imb else None,
           "collisions": h.get("collisions"),
           **process_figures(recording, (proc or {}).get("pid"), h.get("kind") == "private")}
    return {k: v for k, v in fig.items() if v is not None}


def run_sweep(base: WorkloadOptions, buckets: list[int], trace: bool = False,
              extras: bool = True, repeat: int = 1,
              on_point: Callable[[int, dict | None], None] | None = None) -> dict:
    """Run every point `repeat` times, in rounds over all points so drift from other
    load on the machine spreads over all of them; keep each point's median run.
    `on_point(buckets, row)` is called before each run (row None) and after it."""
    base.validate()
    if repeat < 1:
        raise UsageError(f"--repeat must be at least 1, got {repeat}")
    points = sweep_points(buckets, extras)
    runs: dict[int, list[dict]] = {b: [] for b in points}
    notes: list[str] = []
    for _ in range(repeat):
        for b in points:
            if on_point:
                on_point(b, None)
            doc = bench.run(replace(base, buckets=b), trace=trace)
            notes += [n for n in doc["notes"] if n not in notes]
            row = _row(b, doc)
            runs[b].append(row)
            if on_point:
                on_point(b, row)
    rows = [_median_run(runs[b]) for b in points]
    return {"schema": "futextrace-sweep", "schema_version": 1,
            "options": {"threads": len(rows[0]["per_thread_ops_per_sec"]),
                        "futexes": base.futexes, "runtime": base.runtime,
                        "shared": base.shared, "trace": trace, "repeat": repeat},
            "points": rows, "notes": notes}


def _row(b: int, doc: dict) -> dict:
    r = doc["result"]
    return {"buckets": bench.buckets_label(b), "requested": b, "slots": r["slots"],
            "avg_ops_per_sec": r["avg_ops_per_sec"], "stddev_pct": r["stddev_pct"],
            "per_thread_ops_per_sec": [t["ops_per_sec"] for t in r["per_thread"]],
            "runtime": r["runtime"], "trace": trace_figures(doc["recording"])}


def _median_run(rows: list[dict]) -> dict:
    ordered = sorted(rows, key=lambda r: r["avg_ops_per_sec"])
    best = dict(ordered[(len(ordered) - 1) // 2])
    best["runs_ops_per_sec"] = [r["avg_ops_per_sec"] for r in rows]
    return best
