"""The live view of `record -i` in words: one interval's totals line, the
busiest processes as a table like top's, and the bucket-lock waits
(record/live.py and record/lockwaits_live.py compute the row)."""
from __future__ import annotations

import time

from futextrace.recording import BUCKET_NOT_VISIBLE, Interval, IntervalPending, IntervalProcess

TOP = 10   # processes shown per interval, busiest first
CLEAR = "\x1b[H\x1b[2J"   # home + clear screen: a terminal gets redrawn like top


class LiveView:
    """Where `record -i` prints its intervals: an output/jsonio.Output, redrawn
    in place on a terminal."""

    def __init__(self, out):
        self.out = out

    def show(self, row: Interval, timestamps: bool) -> None:
        text = "\n".join(render(row, row["processes"], timestamps))
        if self.out.file.isatty():
            text = CLEAR + text   # redraw in place, like top
        self.out.write(text + "\n")


def _pending_cell(p: IntervalPending | None) -> str:
    return "-" if not p else f"{p['buckets']} +{p['since_t']:.1f}s"


def render(row: Interval, procs: list[IntervalProcess], timestamps: bool) -> list[str]:
    """One interval: a totals line, then the busiest processes."""
    ts = time.strftime("%H:%M:%S ") if timestamps else ""
    rate = row["lookups"] / row["interval_s"] if row["interval_s"] else 0
    extra = ""
    if row["unattributed"]:
        extra += f"  unattributed {row['unattributed']} (map full)"
    if row["lost_events"]:
        extra += f"  lost events {row['lost_events']}"
    if row.get("missed_runs"):
        extra += f"  skipped probe runs {row['missed_runs']}"
    span = row["interval_s"] or 1
    lines = [f"{ts}+{row['t']:.1f}s  lookups/s {rate:,.0f}  (private {row['private'] / span:,.0f}/s, "
             f"global {row['global'] / span:,.0f}/s)  resizes so far {row['resizes']}{extra}"]
    if procs:
        lines.append(f"  {'PID':>7} {'COMM':<16} {'HASH':<14} {'LOOKUPS/s':>12} {'FUTEXES':>7} "
                     f"{'BUCKETS':>7} {'MAX/MEAN':>8} {'PENDING':>12}")
        for p in procs[:TOP]:
            touched = "n/a" if p["buckets_touched"] is None else p["buckets_touched"]
            mom = "n/a" if p["max_over_mean"] is None else f"{p['max_over_mean']:.2f}"
            lines.append(f"  {p['pid']:>7} {p['comm'][:16]:<16} {p.get('installed') or p['hash']:<14} "
                         f"{p['lookups_per_s']:>12,.0f} {p['futexes']:>7} {touched:>7} "
                         f"{mom:>8} {_pending_cell(p.get('pending')):>12}")
        if len(procs) > TOP:
            lines.append(f"  ... {len(procs) - TOP} more processes")
        if any(p["buckets_touched"] is None for p in procs[:TOP]):
            lines.append(f"  BUCKETS, MAX/MEAN {BUCKET_NOT_VISIBLE}")
    return lines + wait_lines(row)


def wait_lines(row: Interval) -> list[str]:
    lw = row.get("lock_waits")
    if not lw or not lw["waits"]:
        return []
    c = lw["by_cause_ms_per_s"]
    lines = [f"  bucket-lock waits {lw['waits']:,} ({lw['wait_ms_per_s']} ms/s: collision {c['collision']}, "
             f"same futex {c['same_futex']})"
             + "".join(f"  {p['pid']} {p['comm'][:16]} {p['wait_ms_per_s']} ms/s" for p in lw["processes"][:3])]
    lines += [f"    bucket {b['bucket']}/{b['buckets']} of {b['pid']}: {b['waits']:,} waits, "
              f"{b['wait_ms_per_s']} ms/s, {b['cause']}" for b in lw["top_buckets"]]
    return lines
