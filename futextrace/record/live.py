"""The live view of `record -i`: per-interval rates per process, like top.

Each interval the recorder hands over the cumulative per-futex counts (the
map plus the per-CPU cache, merged) and the exact per-bucket counts; this
module turns two such readings into per-process rates for the interval
(output/text/live_text.py words them). The readings are plain data (dicts,
as recordings hold them) or numpy arrays (record's reader: live_arrays.py);
unit-tested on recorded counts.
"""
from __future__ import annotations

from futextrace.analysis.atomic import installed_at, process_cost
from futextrace.analysis.timeline import build_timeline
from futextrace.kernel.sizing import buckets_of
from futextrace.loading.exact import entry_totals
from futextrace.record.aggregate import KIND_NAMES, UNKNOWN, total_of, merge_futexes
from futextrace.recording import BUCKET_NOT_VISIBLE, HashAtAttach, Interval, IntervalProcess, Recording

def futex_counts(futexes: list[dict]) -> dict[tuple, tuple[int, int]]:
    """(tgid, kind, uaddr, hash_mask) -> (cumulative lookups, bucket)."""
    out = {}
    for f in merge_futexes(futexes):
        st = total_of(f["per_cpu"])
        out[(f["tgid"], f["kind"], f["uaddr"], f["hash_mask"])] = (st.lookups, st.bucket)
    return out


def bucket_counts(buckets: list[dict]) -> dict[tuple, tuple[int, tuple]]:
    """The same shape from the exact per-bucket counts (exact.bucket_entries): keyed
    by (tgid, kind, (node, bucket), hash_mask), so processes() reads it alike."""
    out: dict[tuple, tuple[int, tuple]] = {}
    for b in buckets:
        where = (b["node"], b["bucket"])
        key = (b["tgid"], b["kind"], where, b["hash_mask"])
        out[key] = (out.get(key, (0, where))[0] + entry_totals(b)[0], where)
    return out


def processes(prev: dict, now: dict, interval_s: float, comms: dict[int, str]) -> list[IntervalProcess]:
    """Per process, what happened between two readings: lookups and their rate,
    the hash that took most of them, how many of its futexes and buckets were
    touched, and max/mean over the touched buckets."""
    per: dict[int, dict] = {}
    for key, (lookups, bucket) in now.items():
        delta = lookups - prev.get(key, (0, 0))[0]
        if delta <= 0:
            continue
        tgid, kind, _, mask = key
        p = per.setdefault(tgid, {"hashes": {}})
        h = p["hashes"].setdefault((kind, mask), {"lookups": 0, "futexes": 0, "buckets": {}})
        h["lookups"] += delta
        h["futexes"] += 1
        h["buckets"][bucket] = h["buckets"].get(bucket, 0) + delta
    rows, per_bucket = [], {}
    for tgid, p in per.items():
        (kind, mask), h = max(p["hashes"].items(), key=lambda kv: kv[1]["lookups"])
        per_bucket[tgid] = h["buckets"]
        total = sum(x["lookups"] for x in p["hashes"].values())
        counts = list(h["buckets"].values())
        name = KIND_NAMES.get(kind, str(kind))
        row = {
            "pid": tgid, "comm": comms.get(tgid, "?"), "lookups": total,
            "lookups_per_s": total / interval_s if interval_s else 0.0,
            "hash": f"private {buckets_of(mask)}" if name == "private" else name,
            "futexes": h["futexes"], "buckets_touched": len(counts),
            "max_over_mean": max(counts) / (sum(counts) / len(counts)) if counts else 0.0,
        }
        if any(_not_visible(b) for b in h["buckets"]):
            # Shared futexes: every lookup is filed under one unknown bucket,
            # which would read as "1 bucket, max/mean 1.00".
            row.update(buckets_touched=None, max_over_mean=None, buckets_unknown=BUCKET_NOT_VISIBLE)
        rows.append(row)
    rows.sort(key=lambda r: -r["lookups"])
    _with_bucket_counts(rows, per_bucket)
    return rows


def _not_visible(bucket) -> bool:
    """A bucket the recording does not know: UNKNOWN (the futex list's form)
    or (node, UNKNOWN) (the exact counts' form)."""
    return (bucket[1] if isinstance(bucket, tuple) else bucket) == UNKNOWN


BUCKET_ROWS = 3           # interval bucket counts for the busiest processes only...
BUCKET_ROWS_MAX = 4096    # ...and only up to this many touched buckets: the lines stay small


def _with_bucket_counts(rows: list[dict], per_bucket: dict[int, dict]) -> None:
    """The busiest processes' lookups per bucket of their main hash over the
    interval (from the exact counts: keys (node, bucket); for the bucket × time
    picture). Read in user space from the map the interval reads anyway."""
    for r in rows[:BUCKET_ROWS]:
        counts = per_bucket.get(r["pid"]) or {}
        if (not counts or len(counts) > BUCKET_ROWS_MAX or r.get("buckets_unknown")
                or not all(isinstance(b, tuple) for b in counts)):
            continue
        r["bucket_counts"] = {(str(b) if node is None or node < 0 else f"{node}:{b}"): n
                              for (node, b), n in sorted(counts.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1]))}


def with_hash_state(rows: list[IntervalProcess], tl: Recording) -> None:
    """The installed hash (what the kernel uses now, not the busiest one seen)
    and a replacement waiting for its pivot, from the timeline so far."""
    for r in rows:
        inst = installed_at(r["pid"], tl)
        # `hash` stays the busiest hash (the JSON's meaning); the view shows this one.
        r["installed"] = None if inst is None else (f"private {inst['buckets']}" if inst["buckets"] else "global")
        pend = process_cost(r["pid"], tl)["pending"]
        r["pending"] = pend and {"buckets": pend["buckets"], "since_t": pend["since_t"]}


class IntervalReporter:
    """One row per `record -i` interval from the cumulative counts: printed
    (redrawn in place on a terminal), kept, and written as a JSON line."""

    def __init__(self, out=None, jsonl=None, timestamps: bool = False):
        self.out, self.jsonl, self.timestamps = out, jsonl, timestamps
        self.rows: list[dict] = []
        self._totals: dict[str, int] = {}
        self._futex_counts: dict = {}
        self._touches = None                # live_arrays.FutexTouches, where the readings are arrays
        self._bucket_counts: dict = {}
        self._elapsed = 0.0
        self._missed = 0

    def row(self, elapsed: float, futexes: list[dict] | dict, counters: dict[str, list[int]],
            missed_runs: int, comm_label, comms: dict[int, str],
            buckets: list[dict] | dict | None = None, events: list[dict] | None = None,
            infer_prctl: bool = False, at_attach: HashAtAttach | None = None) -> Interval:
        """The interval ending at `elapsed`; `comms` gets the new processes' names (comm_label).
        With `buckets` (the exact counts), each process's lookups, hash and buckets
        come from them, and only its futex count from the bounded per-futex list;
        with `events`, each process's installed and pending hash and the
        resizes so far (allocations the timeline tells, from the hash at attach).
        `futexes` and `buckets` are dicts (recorded data) or both numpy arrays
        (ArrayReader.interval_arrays's)."""
        c = {k: sum(v) for k, v in counters.items()}
        prev = self._totals or {k: 0 for k in c}
        delta = {k: c[k] - prev.get(k, 0) for k in c}
        self._totals = c
        # Rates over the time that really passed: a slow poll stretches an interval.
        span = round(elapsed - self._elapsed, 6)
        self._elapsed = elapsed
        missed, self._missed = missed_runs - self._missed, missed_runs
        row = {"t": round(elapsed, 3), "interval_s": span,
               "lookups": delta["PRIVATE"] + delta["GLOBAL"], "private": delta["PRIVATE"],
               "global": delta["GLOBAL"], "unattributed": delta["UNATTRIBUTED"],
               "lost_events": delta["LOST_EVENTS"], "missed_runs": missed, "resizes": 0}
        if isinstance(futexes, dict):
            row["processes"] = self._processes_of_arrays(futexes, buckets, span, comm_label, comms)
        else:
            row["processes"] = self._processes_of_dicts(futexes, buckets, span, comm_label, comms)
        if events is not None:
            tl = {**build_timeline(events, {}, infer_prctl=infer_prctl, at_attach=at_attach),
                  "duration_s": elapsed}
            row["resizes"] = len(tl["resizes"])
            with_hash_state(row["processes"], tl)
        self.rows.append(row)
        return row

    def _processes_of_dicts(self, futexes: list[dict], buckets: list[dict] | None, span: float,
                            comm_label, comms: dict[int, str]) -> list[IntervalProcess]:
        counts = futex_counts(futexes)
        for pid in ({k[0] for k in counts} | {b["tgid"] for b in buckets or []}) - set(comms):
            comms[pid] = comm_label(pid)
        rows = processes(self._futex_counts, counts, span, comms)
        self._futex_counts = counts
        if buckets is None:
            return rows
        return self._bucket_processes(bucket_counts(buckets), {r["pid"]: r["futexes"] for r in rows}, span, comms)

    def _processes_of_arrays(self, futexes: dict, buckets: dict, span: float,
                             comm_label, comms: dict[int, str]) -> list[IntervalProcess]:
        """The same from numpy arrays (maparrays.ArrayReader.interval_arrays,
        what record reads): the per-futex list never becomes a dict per futex."""
        from futextrace.record.live_arrays import FutexTouches, bucket_counts_of
        self._touches = self._touches or FutexTouches()
        listed = self._touches.update(futexes)
        bcounts = bucket_counts_of(buckets)
        for pid in ({k[0] for k in bcounts} | set(listed)) - set(comms):
            comms[pid] = comm_label(pid)
        return self._bucket_processes(bcounts, listed, span, comms)

    def _bucket_processes(self, bcounts: dict, listed: dict[int, int], span: float,
                          comms: dict[int, str]) -> list[IntervalProcess]:
        """Each process's row from the exact per-bucket counts, its futex count
        from the per-futex list (`listed`: pid -> futexes touched)."""
        rows = processes(self._bucket_counts, bcounts, span, comms)
        for r in rows:
            r["futexes"] = listed.get(r["pid"], 0)
        self._bucket_counts = bcounts
        return rows

    def show(self, row: dict) -> None:
        """Print the interval; the outputs are output/'s (the command gives
        them: output/ sits above record/): `out` an output/live_text.LiveView,
        which words the row, `jsonl` an output/jsonio.Output, so a write error
        is a FileProblem the recorder turns into the end of the run. Without
        an output the row is kept and written as a JSON line only."""
        if self.out is not None:
            self.out.show(row, self.timestamps)
        if self.jsonl:
            self.jsonl.write_jsonl(row)
