"""`futextrace bench`'s lines: the workload's throughput, perf-like, the hash it
used, and the tracer's count beside the workload's (bench/runner.py runs it); `--ramp`'s warning
when the ramp ends before its first sample."""
from __future__ import annotations

from futextrace.recording import Recording


def format_result(r: dict, requested: str) -> str:
    """perf-like summary lines for one run; `requested`: the bucket count asked
    for, in words (bench/runner.buckets_label: "auto", "global" or N)."""
    kind = "shared" if r["shared"] else "private"
    lines = [f"{r['runner']}: {r['threads']} threads, each on {r['futexes']} [{kind}] futexes, "
             f"{r['runtime']:.2f} s"]
    for t in r["per_thread"]:
        cpu = f" cpu {t['cpu']}" if t.get("cpu", -1) >= 0 else ""
        lines.append(f"  [thread {t['thread']:2d}]{cpu} {t['ops_per_sec']:>14,.0f} ops/sec")
    lines.append(f"Averaged {r['avg_ops_per_sec']:,.0f} operations/sec "
                 f"(+- {r['stddev_pct']:.2f}%)")
    lines.append(f"Futex hashing: {describe_hash(r, requested)}")
    return "\n".join(lines)


def cross_check(r: dict, rec: Recording) -> str:
    """The workload's own count beside the tracer's: they should agree closely."""
    pid = (rec.get("command") or {}).get("pid")
    seen = sum(p.get("lookups", 0) for p in rec.get("processes", []) if p.get("pid") == pid)
    if r.get("total_ops") is None:
        return f"Traced: {seen:,} futex lookups by the workload"
    ratio = f" ({seen / r['total_ops']:.4f} of its ops)" if r["total_ops"] else ""
    return f"Traced: {seen:,} futex lookups; the workload counted {r['total_ops']:,} ops{ratio}"


def describe_hash(r: dict, req: str) -> str:
    if r["slots"] is None:
        return f"requested {req}, in use: unknown (this perf does not report it)"
    used = "global hash" if r["slots"] == 0 else f"{r['slots']} buckets"
    return f"requested {req}, in use: {used}"


def ramp_warning(run: dict) -> str | None:
    """The ramp is invisible when every thread had started by the first sample."""
    points = run["points"]
    threads = run["result"].get("threads")
    if not points:
        return "warning: the run ended before its first sample: no ramp to show (raise --runtime)"
    if threads and points[0]["threads"] >= threads:
        return (f"warning: all {threads} threads had started by the first sample (+{points[0]['t']:.3f} s): "
                "the ramp ends before it is sampled; use a larger --ramp-ms or a smaller --interval-ms")
    return None
