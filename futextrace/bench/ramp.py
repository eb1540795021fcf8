"""`bench --ramp`: throughput through a resize.

The built-in workload starts its threads one by one (`--ramp-ms`), as a
service does when it starts, and every `--interval-ms` writes the ops done so
far and its own PR_FUTEX_HASH_GET_SLOTS with a CLOCK_MONOTONIC stamp. Each run
is recorded; the recording's `monotonic_start_ns` lines the samples up with
its events (allocations, pivots, atomic refcount windows). Two runs side by
side in one invocation: the automatic hash, then the size it ended with set by
prctl before any thread exists (no resize, so no atomic window): the gap is
what the automatic resizes cost.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from futextrace.analysis.atomic import process_cost
from futextrace.bench import runner
from futextrace.errors import UsageError
from futextrace.output.text.bench_text import ramp_warning


@dataclass
class RampOptions:
    step_ms: int = 50        # a new thread every step_ms
    interval_ms: int = 50    # one sample every interval_ms
    resize_at: str | None = None   # "MS:SLOTS": a SET_SLOTS from a thread of its own, mid-run

    def validate(self) -> "RampOptions":
        for name in ("step_ms", "interval_ms"):
            if getattr(self, name) < 1:
                raise UsageError(f"--ramp: {name.replace('_', '-')} must be at least 1 ms")
        if self.resize_at is not None:
            ms, _, slots = self.resize_at.partition(":")
            if not (ms.isdigit() and slots.isdigit()):
                raise UsageError(f"--resize-at: expected MS:SLOTS (e.g. 300:64), got '{self.resize_at}'")
            runner.check_buckets(int(slots) or runner.GLOBAL)
        return self


def ramp_argv(o: runner.WorkloadOptions, ramp: RampOptions) -> list[str]:
    argv = runner.builtin_argv(o) + ["--ramp-ms", str(ramp.step_ms), "--interval-ms", str(ramp.interval_ms)]
    return argv + (["--resize-at", ramp.resize_at] if ramp.resize_at else [])


def series(raw: dict, start_ns: int | None) -> list[dict]:
    """Per interval: its end (s since the recording started, or the workload's
    start without one), ops/s over it, threads running, GET_SLOTS at its end."""
    base = start_ns if start_ns is not None else raw["t_start_ns"]
    out, prev_ns, prev_ops = [], raw["t_start_ns"], 0
    for s in raw["samples"]:
        dt = (s["mono_ns"] - prev_ns) / 1e9
        out.append({"t": (s["mono_ns"] - base) / 1e9, "ops_per_s": (s["ops"] - prev_ops) / dt if dt > 0 else 0.0,
                    "threads": s["threads"], "slots": s["slots"]})
        prev_ns, prev_ops = s["mono_ns"], s["ops"]
    return out


def atomic_share(points: list[dict], windows: list[dict], t0: float) -> list[float]:
    """Per interval, the share of its time with a replacement pending."""
    shares, start = [], t0
    for p in points:
        end = p["t"]
        covered = sum(max(0.0, min(end, w["end_t"]) - max(start, w["t"])) for w in windows)
        shares.append(min(1.0, covered / (end - start)) if end > start else 0.0)
        start = end
    return shares


def one_run(o: runner.WorkloadOptions, ramp: RampOptions, record_options: dict | None) -> dict:
    """One traced ramp: the workload's result, its series and what resizes cost it."""
    argv = ramp_argv(o.validate(), ramp)
    rc, out, err, rec = runner.trace_command(argv, record_options or {})
    result = runner.parse_builtin(rc, out, err)
    raw = result["raw"]
    points = series(raw, rec.get("monotonic_start_ns"))
    cost = process_cost(result["pid"], rec)
    t0 = (raw["t_start_ns"] - rec["monotonic_start_ns"]) / 1e9 if "monotonic_start_ns" in rec else 0.0
    for p, share in zip(points, atomic_share(points, cost["atomic"]["windows"], t0)):
        p["atomic_share"] = share
    resizes = [r for r in rec.get("resizes", []) if r["pid"] == result["pid"]]
    mid = raw.get("resize")
    if mid and "monotonic_start_ns" in rec:
        mid = {**mid, "call_t": (mid["call_ns"] - rec["monotonic_start_ns"]) / 1e9,
               "return_t": (mid["return_ns"] - rec["monotonic_start_ns"]) / 1e9}
    return {"buckets_requested": o.buckets, "result": result, "points": points, "t_start": t0,
            "resizes": resizes, "cost": cost, "mid_run_resize": mid, "recording": rec}


def run(o: runner.WorkloadOptions, ramp: RampOptions, record_options: dict | None = None) -> dict:
    """The automatic run, then the size it reached set at start. With -b N
    the second run uses N instead. `--resize-at` belongs to the automatic run
    only: the set-at-start run is the one without any resize to compare with."""
    ramp.validate()
    auto = one_run(replace(o, buckets=runner.AUTO), ramp, record_options)
    size = o.buckets if o.buckets not in (runner.AUTO, runner.GLOBAL) else auto["result"]["slots"]
    runs = [auto]
    if size and size > 0:
        runs.append(one_run(replace(o, buckets=size), replace(ramp, resize_at=None), record_options))
    return {"options": {"step_ms": ramp.step_ms, "interval_ms": ramp.interval_ms,
                        "threads": auto["result"]["threads"], "futexes": o.futexes,
                        "runtime": o.runtime, "set_at_start": size or None},
            "runs": runs, "summary": summary(runs)}


def _label(run: dict) -> str:
    b = run["buckets_requested"]
    return "automatic" if b == runner.AUTO else f"{b} set at start"


def summary(runs: list[dict]) -> list[str]:
    """Lines for the terminal: per run ops/s, resizes, atomic time; then the gap."""
    lines = sorted({w for w in map(ramp_warning, runs) if w})
    for r in runs:
        a = r["cost"]["atomic"]
        label = "" if a["source"] == "measured" else " (inferred)"
        lines.append(f"{_label(r)}: {r['result']['total_ops'] / r['result']['runtime']:,.0f} ops/s overall, "
                     f"{len(r['resizes'])} resize(s), atomic refcounts{label} {a['total_s'] * 1000:.2f} ms "
                     f"(longest {a['longest_s'] * 1000:.2f} ms, {a['lookups']:,} lookups)")
    if len(runs) == 2:
        auto, fixed = runs
        gap = auto["cost"]["atomic"]["total_s"] - fixed["cost"]["atomic"]["total_s"]
        ratio = ((auto["result"]["total_ops"] / auto["result"]["runtime"])
                 / (fixed["result"]["total_ops"] / fixed["result"]["runtime"]))
        saved = (f"setting {fixed['buckets_requested']} at start would have avoided {gap * 1000:.2f} ms "
                 "of atomic refcounting" if gap >= 0 else
                 f"the run with {fixed['buckets_requested']} set at start spent {-gap * 1000:.2f} ms more "
                 "in atomic refcounting (its own later resizes)")
        lines.append(f"{saved}; automatic/set-at-start throughput ratio {ratio:.3f}")
    return lines
