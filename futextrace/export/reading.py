"""One reading of the kernel side, as plain values: what the exporter serves.

Built from a recording dict (futextrace.record.aggregate.build_recording, see
docs/json-schema.md), so it is pure Python and unit-tested on recorded data.
Counters here are cumulative since the recorder attached; series.py turns them
into Prometheus counters.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from futextrace.analysis.atomic import resize_cost
from futextrace.recording import HashSummary, Process, Recording, ResizeCost

# Totals fields exported as counters, with their metric name suffix.
TOTAL_COUNTERS = {"unattributed": "unattributed_lookups", "lost_events": "lost_events",
                  "missed_runs": "missed_runs", "read_faults": "read_faults",
                  "kernel_mismatch": "kernel_mismatch_lookups"}


@dataclass
class ProcessReading:
    pid: int
    comm: str
    lookups: dict[str, int]             # hash="private"|"global" -> cumulative lookups
    buckets: int | None = None          # buckets of the hash it uses now (0: global hash)
    kind: str | None = None             # "custom" | "auto" | "global"
    max_over_mean: float | None = None  # busiest private hash, all buckets
    buckets_used: int | None = None
    collisions: int | None = None       # futexes sharing a bucket with another
    futexes: int | None = None          # distinct futexes in that hash (an estimate when
                                        # futexes_error_pct > 0)
    futexes_error_pct: float | None = None  # ± of futexes and collisions, percent (0: exact)
    pending_buckets: int | None = None  # a replacement waiting for its pivot (0: none)
    atomic_seconds: float | None = None # time with one pending (refcounts atomic), since start
    atomic_lookups: int | None = None   # private lookups made in atomic mode, since start


@dataclass
class Reading:
    processes: dict[int, ProcessReading] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)          # cumulative, see TOTAL_COUNTERS
    lookups: dict[str, int] = field(default_factory=dict)         # whole system, by hash
    refcount: dict[tuple[str, str], int] = field(default_factory=dict)   # (op, path) -> calls
    refcount_source: str = "measured"   # "measured" (probed) | "inferred" (tracepoint)
    resizes: dict[tuple[str, str], int] = field(default_factory=dict)    # (trigger, result) -> n
    resizes_pending: int = 0
    global_buckets: int = 0
    info: dict[str, str] = field(default_factory=dict)
    futexes_unlisted: int = 0           # futexes beyond the per-futex list, all processes


def result_name(result) -> str:
    """A resize's result as a label value: ok, or the errno's name."""
    names = {0: "ok", -22: "einval", -16: "ebusy", -12: "enomem"}
    return names.get(result, f"errno{-result}" if isinstance(result, int) else "unknown")


def _current_hash(proc: Process, states: dict[int, dict]) -> tuple[int | None, str | None]:
    """(buckets, kind) of the hash the process uses now: its last hash state
    or successful resize, else the busiest hash its lookups went to."""
    st = states.get(proc["pid"])
    if st is not None:
        if not st["private"]:
            return 0, "global"
        return st["buckets"], "custom" if st["custom"] else "auto"
    hashes = proc.get("hashes") or []
    if not hashes:
        return None, None
    busiest = hashes[0]
    if busiest["kind"] != "private":
        return 0, "global"
    return busiest["buckets"], None   # custom or auto is only known from a hash state


def _estimated(h: HashSummary, name: str) -> int:
    """A hash figure: the estimate's value where it has one (beyond the
    per-futex list), else the exact count."""
    est = (h.get("estimates") or {}).get(name) or {}
    return est["value"] if "value" in est else h[name]


def _process(proc: Process, states: dict[int, dict], costs: dict[int, ResizeCost]) -> ProcessReading:
    lookups = Counter()
    for h in proc.get("hashes", []):
        lookups["private" if h["kind"] == "private" else "global"] += h["lookups"]
    p = ProcessReading(proc["pid"], proc.get("comm") or "?", dict(lookups))
    p.buckets, p.kind = _current_hash(proc, states)
    private = [h for h in proc.get("hashes", []) if h["kind"] == "private" and "imbalance" in h]
    if private:
        h = private[0]   # busiest first
        p.max_over_mean = h["imbalance"]["max_over_mean"]
        p.buckets_used = h["imbalance"]["used"]
        p.collisions, p.futexes = _estimated(h, "collisions"), _estimated(h, "distinct_futexes")
        p.futexes_error_pct = (h.get("estimates") or {}).get("distinct_futexes", {}).get("error_pct", 0.0)
    cost = costs.get(proc["pid"])
    if cost is not None:
        p.pending_buckets = cost["pending"]["buckets"] if cost["pending"] else 0
        p.atomic_seconds = cost["atomic"]["total_s"]
        p.atomic_lookups = cost["atomic"]["lookups"]
    return p


def from_recording(rec: Recording) -> Reading:
    # Later entries win: the last state. A successful resize that took over is
    # a state too (recordings without hash_states); one still waiting for its
    # pivot is not installed; a hash_states entry is newer information.
    states = {z["pid"]: {"private": z["new_buckets"] > 0, "buckets": z["new_buckets"],
                         "custom": bool(z["custom"])}
              for z in sorted(rec.get("resizes", []), key=lambda z: z["t"])
              if z.get("result") == 0 and z.get("pivot_t", z["t"]) is not None}
    states.update({s["pid"]: s for s in sorted(rec.get("hash_states", []), key=lambda s: s["t"])})
    r = Reading()
    costs = {c["pid"]: c for c in rec.get("resize_cost") or resize_cost(rec)}
    r.processes = {p["pid"]: _process(p, states, costs) for p in rec["processes"]}
    t = rec["totals"]
    r.totals = {name: int(t.get(field_, 0)) for field_, name in TOTAL_COUNTERS.items()}
    r.lookups = {"private": int(t.get("private", 0)), "global": int(t.get("global", 0))}
    r.futexes_unlisted = int(t.get("futex_list", {}).get("futexes_unlisted", 0))
    rc = rec["refcount"]
    r.refcount_source = "inferred" if rc["source"].startswith("inferred") else "measured"
    r.refcount = {(op, path): int(rc[f"{op}_{path}"]) for op in ("get", "put") for path in ("percpu", "atomic")}
    resizes = Counter()
    for z in rec.get("resizes", []):
        if z.get("result") is None:
            r.resizes_pending += 1
        else:
            resizes[(z["trigger"], result_name(z["result"]))] += 1
    r.resizes = dict(resizes)
    k = rec.get("kernel", {})
    g = k.get("global_hash", {})
    r.global_buckets = int(g.get("buckets_per_node", 0)) * max(1, len(k.get("nodes") or [0]))
    r.info = {"method": rec["method"]["name"], "kernel": str(k.get("release", "")),
              "clone_rule": str(k.get("clone_rule") or "unknown"),
              "prctl_results": str(rec["method"].get("prctl_results", "")),
              "version": str(rec.get("tool_version", ""))}
    return r
