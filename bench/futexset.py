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
import statistics
import subprocess
import sys
import threading

SIZES = [16, 4096, 16384, 262144, 1048576]


def run_workload(nfutexes: int, runtime: str) -> float:
    from futextrace.workload.build import workload_path
    argv = [str(workload_path()), "-t", "1", "-f", str(nfutexes), "-r", runtime]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"futexbench exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return float(json.loads(r.stdout)["avg_ops_per_sec"])


BPF_STATS = "/proc/sys/kernel/bpf_stats_enabled"


def bpf_run_stats(program) -> tuple[int, int]:
    """(run_time_ns, run_cnt) summed over the recorder's programs: the time
    spent in BPF, which a busy machine disturbs less than throughput."""
    from futextrace.loading.bpfsys import prog_stats
    fds = [fn.fd for fn in program._bpf.funcs.values()] + [fd for _, fd in program._tp_btf]
    stats = [prog_stats(fd) for fd in fds]
    return sum(s.run_time_ns for s in stats), sum(s.run_cnt for s in stats)


def run_traced(nfutexes: int, runtime: str, model) -> tuple[float, dict]:
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
        totals = rec.recording(duration)["totals"]
        totals["bpf_ns_per_run"] = ns / runs if runs else 0.0
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
    with open(BPF_STATS) as f:
        stats_before = f.read().strip()
    with open(BPF_STATS, "w") as f:
        f.write("1")
    try:
        rows = measure(sizes, a)
    finally:
        with open(BPF_STATS, "w") as f:
            f.write(stats_before)
    print(f"\n| distinct futexes | untraced ops/s | retained throughput (median; range) "
          f"| BPF ns per run | unattributed lookups | lookups not in the per-futex list |")
    print("|---|---|---|---|---|---|")
    for n, base, med, lo, hi, ns, un, mi in rows:
        print(f"| {n:,} | {base:,.0f} | {med:.3f} ({lo:.3f}..{hi:.3f}) | {ns:.0f} | {un:,} | {mi:,} |")
    ref = rows[0]
    print(f"\n# retained minus the {ref[0]:,}-futex figure: "
          + ", ".join(f"{r[0]:,}: {r[2] - ref[2]:+.3f}" for r in rows[1:]))
    print(f"# BPF ns per run minus the {ref[0]:,}-futex figure: "
          + ", ".join(f"{r[0]:,}: {r[5] - ref[5]:+.0f}" for r in rows[1:]))
    print(f"# load average {os.getloadavg()[0]:.2f} at end")
    return 0


def measure(sizes: list[int], a) -> list[tuple]:
    from futextrace.kernel import model as kmodel
    model = kmodel.load()
    rows = []
    for n in sizes:
        ratios, untraced, unattr, missed, ns = [], [], [], [], []
        for i in range(a.pairs):
            if i % 2:
                traced, totals = run_traced(n, a.runtime, model)
                base = run_workload(n, a.runtime)
            else:
                base = run_workload(n, a.runtime)
                traced, totals = run_traced(n, a.runtime, model)
            ratios.append(traced / base)
            untraced.append(base)
            unattr.append(totals["unattributed"])
            missed.append(totals.get("futex_list", {}).get("lookups_missed", 0))
            ns.append(totals["bpf_ns_per_run"])
            print(f"# {n} futexes round {i + 1}: untraced {base:,.0f} traced {traced:,.0f} "
                  f"ratio {ratios[-1]:.3f} BPF {ns[-1]:.0f} ns/run unattributed {unattr[-1]:,} "
                  f"not in per-futex list {missed[-1]:,}", flush=True)
        rows.append((n, statistics.median(untraced), statistics.median(ratios), min(ratios),
                     max(ratios), statistics.median(ns), max(unattr), max(missed)))
    return rows


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
