#!/usr/bin/env python3
"""Does tracing cost more per futex call as the set of distinct futexes grows?

For each size of the futex set, each round runs the workload untraced and then
traced by futextrace (tracepoint method, whole system; order alternated per
round), back to back, and divides the traced ops/s by the untraced: the figure
is the median of those per-round ratios, so a noisy machine shifts both halves
of a pair alike. Also printed per size: lookups the tracer could not attribute
to a bucket ("unattributed", map full), and how many lookups the bounded
per-futex list misses (the per-bucket and per-process counts stay exact).

Workload: the built-in futexbench, one thread, `-f N` distinct private futexes
(FUTEX_WAIT with a value that never matches: one hash lookup per call).

    sudo .venv/bin/python bench/futexset.py --pairs 3 --runtime 2
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from typing import NamedTuple

SIZES = [16, 4096, 16384, 262144, 1048576]


class Run(NamedTuple):
    ops_per_s: float        # the workload's own figure (wall clock)
    ops_per_cpu_s: float    # operations per CPU-second the workload used (user + system,
                            # BPF included): what a busy machine's waits do not disturb
    pid: int


def run_workload(nfutexes: int, runtime: str) -> Run:
    from futextrace.workload.build import workload_path
    argv = [str(workload_path()), "-t", "1", "-f", str(nfutexes), "-r", runtime]
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(p.pid, 0)     # reaped here, for its rusage
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if p.returncode != 0:
        raise RuntimeError(f"futexbench exited {p.returncode}: {text.strip()[-300:]}")
    r = json.loads(text)
    return Run(float(r["avg_ops_per_sec"]), r["total_ops"] / (usage.ru_utime + usage.ru_stime), r["pid"])


BPF_STATS = "/proc/sys/kernel/bpf_stats_enabled"


def bpf_run_stats(program) -> tuple[int, int]:
    """(run_time_ns, run_cnt) summed over the recorder's programs: the time
    spent in BPF, which a busy machine disturbs less than throughput."""
    from futextrace.loading.bpfsys import prog_stats
    fds = [fn.fd for fn in program._bpf.funcs.values()] + [fd for _, fd in program._tp_btf]
    stats = [prog_stats(fd) for fd in fds]
    return sum(s.run_time_ns for s in stats), sum(s.run_cnt for s in stats)


def run_traced(nfutexes: int, runtime: str, model) -> tuple[Run, dict]:
    """ops/s under futextrace, and the recording's totals (plus BPF ns per run)."""
    from futextrace.record.recorder import Recorder, RecordOptions
    rec = Recorder(RecordOptions(method="tracepoint", live_out=open(os.devnull, "w"), announce=False), model)
    rec.start()
    try:
        result = {}
        t = threading.Thread(target=lambda: result.update(ops=run_workload(nfutexes, runtime)))
        t.start()
        duration = rec.run(until=lambda: not t.is_alive())
        t.join()
        ns, runs = bpf_run_stats(rec.program)
        recording = rec.recording(duration)
        totals = recording["totals"]
        totals["bpf_ns_per_run"] = ns / runs if runs else 0.0
        # The workload's own lookups the per-futex list misses (the machine's
        # other processes are traced too, and share the list).
        mine = [p for p in recording["processes"] if p["pid"] == result["ops"].pid]
        totals["workload_missed"] = sum(h.get("futex_detail", {}).get("lookups_missed", 0)
                                        for p in mine for h in p["hashes"])
        return result["ops"], totals
    finally:
        rec.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3, help="rounds per size (untraced + traced each)")
    ap.add_argument("--runtime", default="2", help="workload seconds per run")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated futex set sizes")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("futexset.py: needs root")
    sizes = [int(s) for s in a.sizes.split(",")]
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; "
          f"futexbench -t 1 -r {a.runtime}, {a.pairs} rounds per size", flush=True)
    # SIGTERM ends the run through the `finally` below: the setting is restored.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with open(BPF_STATS) as f:
        stats_before = f.read().strip()
    with open(BPF_STATS, "w") as f:
        f.write("1")
    try:
        rows = measure(sizes, a)
    finally:
        with open(BPF_STATS, "w") as f:
            f.write(stats_before)
    print("\n| distinct futexes | untraced ops/s | retained throughput (median; range) "
          "| retained per CPU-second | BPF ns per run | unattributed lookups | lookups not in the per-futex list |")
    print("|---|---|---|---|---|---|---|")
    for n, base, med, lo, hi, ns, un, mi, cpu in rows:
        print(f"| {n:,} | {base:,.0f} | {med:.3f} ({lo:.3f}..{hi:.3f}) | {cpu:.3f} | {ns:.0f} | {un:,} | {mi:,} |")
    ref = rows[0]
    print(f"\n# retained minus the {ref[0]:,}-futex figure: "
          + ", ".join(f"{r[0]:,}: {r[2] - ref[2]:+.3f}" for r in rows[1:]))
    print(f"# retained per CPU-second minus the {ref[0]:,}-futex figure: "
          + ", ".join(f"{r[0]:,}: {r[8] - ref[8]:+.3f}" for r in rows[1:]))
    print(f"# BPF ns per run minus the {ref[0]:,}-futex figure: "
          + ", ".join(f"{r[0]:,}: {r[5] - ref[5]:+.0f}" for r in rows[1:]))
    print(f"# load average {os.getloadavg()[0]:.2f} at end")
    return 0


def one_round(n: int, i: int, runtime: str, model) -> dict:
    """Untraced and traced once each, in an order alternated by round."""
    if i % 2:
        traced, totals = run_traced(n, runtime, model)
        base = run_workload(n, runtime)
    else:
        base = run_workload(n, runtime)
        traced, totals = run_traced(n, runtime, model)
    r = {"untraced": base.ops_per_s, "ratio": traced.ops_per_s / base.ops_per_s,
         "cpu_ratio": traced.ops_per_cpu_s / base.ops_per_cpu_s, "ns": totals["bpf_ns_per_run"],
         "unattributed": totals["unattributed"], "missed": totals["workload_missed"]}
    print(f"# {n} futexes round {i + 1}: untraced {base.ops_per_s:,.0f} traced {traced.ops_per_s:,.0f} "
          f"ratio {r['ratio']:.3f} per CPU-second {r['cpu_ratio']:.3f} BPF {r['ns']:.0f} ns/run "
          f"unattributed {r['unattributed']:,} not in per-futex list {r['missed']:,}", flush=True)
    return r


def measure(sizes: list[int], a) -> list[tuple]:
    from futextrace.kernel import model as kmodel
    model = kmodel.load()
    rows = []
    for n in sizes:
        rounds = [one_round(n, i, a.runtime, model) for i in range(a.pairs)]

        def col(k):
            return [r[k] for r in rounds]
        ratios = col("ratio")
        rows.append((n, statistics.median(col("untraced")), statistics.median(ratios), min(ratios),
                     max(ratios), statistics.median(col("ns")), max(col("unattributed")),
                     max(col("missed")), statistics.median(col("cpu_ratio"))))
    return rows


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
