"""Bucket-lock waits in the live view (`record -i`): per interval, wait time
per second in all, by cause and per process, and the buckets that waited most.
The cause of a bucket is as in the recording (analysis/lockwaits.py), over
everything seen since the start: collision once two futexes have waited on it."""
from __future__ import annotations

from futextrace.analysis.lockwaits import CAUSES, WaitBook
from futextrace.kernel.sizing import buckets_of

TOP_BUCKETS = 3


class IntervalWaits:
    """The `lock_waits` part of each interval row, from one cumulative WaitBook."""

    def __init__(self):
        self.book = WaitBook()

    def interval(self, rows: list[dict], span: float, comms: dict[int, str]) -> dict:
        """The `lock_waits` part of an interval row (docs/json-schema.md, intervals)."""
        per_bucket = self.book.feed(rows)
        per_s = (lambda ns: round(ns / 1e6 / span, 3)) if span > 0 else (lambda ns: None)
        causes = {c: 0 for c in CAUSES}
        procs: dict[int, int] = {}
        buckets = []
        for (tgid, mask, bucket), (w, ns, cause) in per_bucket.items():
            causes[cause] += ns
            procs[tgid] = procs.get(tgid, 0) + ns
            buckets.append({"pid": tgid, "bucket": bucket, "buckets": buckets_of(mask), "waits": w,
                            "wait_ms_per_s": per_s(ns), "cause": cause, "_ns": ns})
        buckets.sort(key=lambda b: -b["_ns"])
        for b in buckets:
            del b["_ns"]
        return {"waits": sum(w for w, _, _ in per_bucket.values()),
                "wait_ms_per_s": per_s(sum(ns for _, ns, _ in per_bucket.values())),
                "by_cause_ms_per_s": {c: per_s(ns) for c, ns in causes.items()},
                "processes": [{"pid": t, "comm": comms.get(t, "?"), "wait_ms_per_s": per_s(ns)}
                              for t, ns in sorted(procs.items(), key=lambda kv: -kv[1])],
                "top_buckets": buckets[:TOP_BUCKETS]}
