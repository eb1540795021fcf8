"""Metric families (names, HELP, labels) from a reading and the series book.

Every name here is what dashboards/futextrace.json queries; the test of the
dashboard parses a real /metrics page, not this file.
"""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from futextrace.export.reading import Reading
from futextrace.export.series import HighWater, SeriesBook

PROC = ["pid", "comm"]


def _lookups(book: SeriesBook):
    f = CounterMetricFamily(
        "futextrace_lookups", "Futex hash lookups by process and hash (private: the process's own "
        "hash, global: the system hash); the top --max-processes processes by recent lookups, the "
        "rest summed in comm=\"other\" (pid=\"\")", labels=PROC + ["hash"])
    for pid, comm, h, v in book.series():
        f.add_metric([pid, comm, h], v)
    return f


def _system(reading: Reading, hw: HighWater):
    f = CounterMetricFamily("futextrace_system_lookups", "Futex hash lookups of every traced "
                            "process, by hash (not limited by --max-processes)", labels=["hash"])
    for h, v in sorted(reading.lookups.items()):
        f.add_metric([h], hw.update(("lookups", h), v))
    return f


def _process_gauges(reading: Reading, book: SeriesBook):
    specs = [
        ("futextrace_hash_buckets", "Buckets of the futex hash the process uses now (0: the global "
         "hash); kind: custom (prctl PR_FUTEX_HASH_SET_SLOTS), auto (sized by the kernel), global", "buckets"),
        ("futextrace_bucket_max_over_mean", "Lookups in the busiest bucket of the process's busiest "
         "private hash divided by the mean over all its buckets (1: perfectly even), since start", "max_over_mean"),
        ("futextrace_buckets_used", "Buckets of the process's busiest private hash that got any "
         "lookup, since start", "buckets_used"),
        ("futextrace_bucket_collisions", "Collisions: futexes beyond one per bucket in the "
         "process's busiest private hash (sum of futexes - 1 over buckets), since start; an estimate "
         "within futextrace_futexes_error_percent when that is above 0", "collisions"),
        ("futextrace_futexes", "Distinct futexes seen in the process's busiest private hash, "
         "since start; an estimate within futextrace_futexes_error_percent when that is above 0", "futexes"),
        ("futextrace_futexes_error_percent", "Error bound (±, percent) of futextrace_futexes and "
         "futextrace_bucket_collisions: 0 when exact; above 0 when futexes beyond the per-futex list "
         "are counted by the first-seen filter, which may take a new futex as seen", "futexes_error_pct"),
        ("futextrace_hash_pending_buckets", "Buckets of a replacement hash waiting for its pivot "
         "(0: none); the process's refcounts are atomic meanwhile", "pending_buckets"),
        ("futextrace_atomic_refcount_seconds", "Time the process had a replacement hash pending "
         "(refcounts atomic), since start; measured (kprobe) or inferred (tracepoint) as "
         "futextrace_refcount_ops", "atomic_seconds"),
        ("futextrace_atomic_lookups", "Private futex lookups the process made while its hash's "
         "refcount was atomic, since start", "atomic_lookups"),
    ]
    out = []
    for name, help_, attr in specs:
        labels = PROC + (["kind"] if attr == "buckets" else [])
        f = GaugeMetricFamily(name, help_, labels=labels)
        for pid in sorted(book.labelled):
            p = reading.processes.get(pid)
            v = getattr(p, attr) if p else None
            if v is None:
                continue
            comm = book.procs[pid].comm
            f.add_metric([str(pid), comm] + ([p.kind or "unknown"] if attr == "buckets" else []), v)
        out.append(f)
    return out


def _kernel_counters(reading: Reading, hw: HighWater):
    rc = CounterMetricFamily(
        "futextrace_refcount_ops", "Private futex hash reference count gets/puts: path percpu "
        "(per-CPU counter) or atomic (the shared atomic, while a resize is pending); source: "
        "measured (probed) or inferred (one get and put per private lookup)",
        labels=["op", "path", "source"])
    for (op, path), v in sorted(reading.refcount.items()):
        rc.add_metric([op, path, reading.refcount_source], hw.update(("ref", op, path), v))
    rs = CounterMetricFamily("futextrace_resizes", "Private futex hash resizes by trigger "
                             "(clone: automatic, prctl) and result (ok or the errno)",
                             labels=["trigger", "result"])
    for (trigger, result), v in sorted(reading.resizes.items()):
        rs.add_metric([trigger, result], hw.update(("resize", trigger, result), v))
    out = [rc, rs]
    out.append(GaugeMetricFamily("futextrace_futexes_unlisted", "Futexes (all processes) beyond the "
                                 "bounded per-futex list: counted per bucket by the first-seen filter, "
                                 "without addresses; bucket and process counts stay exact",
                                 value=reading.futexes_unlisted))
    helps = {"unattributed_lookups": "Lookups counted but not attributed to a bucket: the buckets map "
                                     "was full",
             "lost_events": "Events lost because the ring buffer was full",
             "missed_runs": "Runs of the tracer's programs the kernel skipped (their lookups are "
                            "not counted)",
             "read_faults": "Failed memory reads in the BPF program",
             "kernel_mismatch_lookups": "Lookups whose computed bucket differed from the kernel's"}
    for name, help_ in helps.items():
        out.append(CounterMetricFamily(f"futextrace_{name}", help_,
                                       value=hw.update(("total", name), reading.totals.get(name, 0))))
    return out


def families(reading: Reading, book: SeriesBook, hw: HighWater) -> list:
    """What one read of the kernel maps says (served again until the next read)."""
    out = [_lookups(book), _system(reading, hw), *_process_gauges(reading, book),
           *_kernel_counters(reading, hw)]
    out.append(GaugeMetricFamily("futextrace_resizes_pending", "Resizes requested whose result "
                                 "is not known yet", value=reading.resizes_pending))
    out.append(GaugeMetricFamily("futextrace_global_hash_buckets", "Buckets of the global futex "
                                 "hash (all NUMA nodes)", value=reading.global_buckets))
    info = InfoMetricFamily("futextrace", "How futextrace traces this kernel: attach method, "
                            "kernel release, the clone rule that sizes private hashes")
    info.add_metric([], reading.info)
    out.append(info)
    return out


def exporter_families(book: SeriesBook, stats: dict) -> list:
    """The exporter's own state, fresh at every scrape (a failed read shows here)."""
    out = []
    exp = GaugeMetricFamily("futextrace_exporter_processes", "Processes the exporter tracks: "
                            "labelled (own series), exited (kept for the grace period), tracked "
                            "(in the maps)", labels=["state"])
    exp.add_metric(["labelled"], len(book.labelled))
    exp.add_metric(["exited"], len(book.exited))
    exp.add_metric(["tracked"], len(book.procs))
    out.append(exp)
    hist = GaugeMetricFamily("futextrace_exporter_retained", "What the exporter's recorder keeps "
                             "between reads: events (resize history of live processes and of "
                             "those in their grace period), comms, states (per-process), "
                             "forgotten (gone processes whose futexes are still in the per-CPU "
                             "cache)", labels=["kind"])
    for kind, n in sorted(stats.get("history", {}).items()):
        hist.add_metric([kind], n)
    out.append(hist)
    out.append(CounterMetricFamily("futextrace_exporter_map_reads", "Reads of the kernel maps "
                                   "(only when scraped, at most one per read floor)",
                                   value=stats["reads"]))
    out.append(CounterMetricFamily("futextrace_exporter_map_read_errors", "Reads of the kernel "
                                   "maps that failed (the last good read was served instead)",
                                   value=stats.get("errors", 0)))
    out.append(GaugeMetricFamily("futextrace_exporter_map_read_seconds", "Time the last read "
                                 "of the kernel maps took", unit="seconds", value=stats["read_s"]))
    out.append(GaugeMetricFamily("futextrace_exporter_map_read_cpu_seconds", "CPU time the last "
                                 "read of the kernel maps took (its thread's: reading, summing, "
                                 "building the metric families)", unit="seconds",
                                 value=stats.get("read_cpu_s", 0.0)))
    read = GaugeMetricFamily("futextrace_exporter_map_read_bytes", "Bytes the last read of the "
                             "kernel maps read, by way: syscall (the buffers bpf(2) filled) or mapping "
                             "(memory-mapped maps scanned, no copy by the kernel)", labels=["via"], unit="bytes")
    for via, n in sorted(stats.get("bytes_read", {}).items()):
        read.add_metric([via], n)
    out.append(read)
    out.append(GaugeMetricFamily("futextrace_exporter_read_age_seconds", "Age of the read this "
                                 "scrape got: near 0 when it was read for this scrape; older when "
                                 "the read exceeded its budget (the last complete read is served) "
                                 "or the scrape came within the read floor of the last read",
                                 unit="seconds", value=stats.get("age_s", 0.0)))
    out.append(CounterMetricFamily("futextrace_exporter_reads_over_budget", "Scrapes whose read "
                                   "took longer than --read-budget: they got the last complete read",
                                   value=stats.get("over_budget", 0)))
    out.append(GaugeMetricFamily("futextrace_exporter_read_floor_seconds", "Scrapes closer than "
                                 "this to the last read get that read again: --min-interval, or 5 "
                                 "times the CPU time the last read took if longer", unit="seconds",
                                 value=stats["floor_s"]))
    return out
