#!/usr/bin/env python3
"""CPU and bytes read per scrape of `futextrace serve` (issue 44, item 4).

Two workloads, one after the other (futexbench, as footprint.py starts it):

  1024     futexbench -t 2 -f 1024: one 1,024-futex workload;
  full     futexbench -t 2 -f 65536 -b 16384: the per-futex list (the
           `futexes_*` row table) full (65,536 rows: its default size up to
           13 CPUs, 16,384 at 32) and the exact counts (`buckets_*`) busy
           (the futexes beyond the list are counted per bucket, 16,384
           buckets).

For each, the exporter's recorder and collector run in this process, as
`futextrace serve` runs them (all processes traced, tracepoint method unless
--method), the ring buffer polled in a thread of its own; then N scrapes
SCRAPE_GAP apart, each one collect() plus the text exposition (what the HTTP
handler does). A scrape's CPU is its thread's CPU time (time.thread_time: the
read, the numpy work, the families and the rendering, nothing else);
bytes read: the buffers the read's bpf(2) calls filled ("syscall") and the
memory-mapped maps it scanned ("mapping": the caches, the first-seen
filter), as the exporter serves them (futextrace_exporter_map_read_bytes).
The first scrape (which builds what later ones reuse) is left out; the
median, min and max of the others are printed, and how many of them were
real reads (the collector's read count went up).

A scrape closer to the last read than the collector's floor (serve's
--min-interval, or COST_FACTOR times the last read's CPU if longer) is
answered from that read, as `futextrace serve` does it; where a read costs
more than SCRAPE_GAP / COST_FACTOR of CPU (a full map under QEMU/TCG: 0.2-2 s)
most scrapes are then such cached answers. --read-each-scrape lifts the floor
for this process's collector (COST_FACTOR 0, no minimum interval), so each
measured scrape reads the maps: the cost of a read, not of the exporter's
schedule. The exporter itself is unchanged. --pause-load stops the
workload (SIGSTOP) for each scrape: under single-threaded TCG every busy
vCPU's clock runs while another is emulated, so the workload's busy
threads count in the read's thread CPU time there (3-7x in a 2-CPU guest).

--serve also runs `futextrace serve` as a process and measures it the way
footprint.py does (utime+stime over the scrapes, less its idle rate), for
comparison with the figure of the issue.

    sudo .venv/bin/python benchmarks/scrape_cost.py
    sudo .venv/bin/python benchmarks/scrape_cost.py --scrapes 10 --loads full --serve
    sudo .venv/bin/python benchmarks/scrape_cost.py --scrapes 6 --read-each-scrape
    sudo .venv/bin/python benchmarks/scrape_cost.py --scrapes 6 --read-each-scrape --pause-load

Not a test: it prints figures. Needs root and cc. In a guest:
tests/vm/guestrun.py 7.3-32cpu -- .venv/bin/python benchmarks/scrape_cost.py --read-each-scrape
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this checkout's futextrace, not an installed one

SCRAPE_GAP = 1.0    # seconds between scrapes: above serve's --min-interval and, where a read takes
                    # under SCRAPE_GAP / COST_FACTOR of CPU, the floor: each one reads the maps
LOADS = {"1024": ["-t", "2", "-f", "1024"], "full": ["-t", "2", "-f", "65536", "-b", "16384"]}


def in_process(bench: str, load: str, scrapes: int, method: str, settle: float,
               read_each: bool = False, pause_load: bool = False) -> dict:
    from prometheus_client import CollectorRegistry, generate_latest

    from futextrace.export import collector as collector_mod
    from futextrace.export.collector import FutexCollector
    from futextrace.export.serve_recorder import ServeRecorder
    from futextrace.record.session import RecordOptions

    wl = subprocess.Popen([bench, *LOADS[load], "-r", "3600"], stdout=subprocess.DEVNULL)
    rec = ServeRecorder(RecordOptions(method=method, announce=False))
    stop = threading.Event()
    cost_factor = collector_mod.COST_FACTOR
    if read_each:
        collector_mod.COST_FACTOR = 0    # this process's collectors only: no floor from the read's CPU
    try:
        time.sleep(0.3)
        rec.start()
        poller = threading.Thread(target=lambda: [rec.session.program.bpf.ring_buffer_poll(100)
                                                  for _ in iter(stop.is_set, True)], daemon=True)
        poller.start()
        collector = FutexCollector(rec, 10, 120.0, 0.0 if read_each else 0.1, background=False)
        registry = CollectorRegistry()
        registry.register(collector)
        time.sleep(settle)          # the maps fill
        cpu, nbytes, sizes, read = [], [], [], []
        for k in range(scrapes + 1):
            reads0 = collector.stats["reads"]
            if pause_load:
                wl.send_signal(signal.SIGSTOP)
            t0 = time.thread_time()
            page = generate_latest(registry)
            used = time.thread_time() - t0
            if pause_load:
                wl.send_signal(signal.SIGCONT)
            if k:
                cpu.append(used * 1000)
                nbytes.append(collector.stats.get("bytes_read", {}))   # a cached answer: its read's
                sizes.append(len(page))
                read.append(collector.stats["reads"] > reads0)
            time.sleep(SCRAPE_GAP)
        entries = {name: _entries(rec.session.program.bpf[f"{name}_index"]) for name in ("futexes", "buckets")}
        collector.close()
        return {"cpu_ms": cpu, "bytes": nbytes, "page": sizes, "read": read, "entries": entries,
                "ncpu": rec.session.program.ncpu_ids}
    finally:
        collector_mod.COST_FACTOR = cost_factor
        stop.set()
        wl.kill()
        wl.wait()
        rec.close()


def _entries(table) -> int:
    """Keys in a row table's index now (one more batch read: not part of any scrape)."""
    from futextrace.loading.batchread import lookup_batch
    batch = lookup_batch(table)
    return sum(1 for _ in table.keys()) if batch is None else batch[2]


def as_serve(bench: str, load: str, scrapes: int) -> dict:
    """`futextrace serve` as a process, measured as footprint.py measures it."""
    sys.path.insert(0, str(Path(__file__).parent))
    import footprint
    wl = subprocess.Popen([bench, *LOADS[load], "-r", "3600"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        port = footprint.free_port()
        cmd = footprint.futextrace_cmd("serve", "--listen", f"127.0.0.1:{port}")
        return footprint.measure_exporter(cmd, port, "serving", scrapes, 5)
    finally:
        wl.kill()
        wl.wait()


def spread(values: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scrapes", type=int, default=20)
    ap.add_argument("--loads", default="1024,full", help="comma-separated: " + ", ".join(LOADS))
    ap.add_argument("--method", default="tracepoint")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds the maps fill before the first scrape")
    ap.add_argument("--serve", action="store_true", help="also measure `futextrace serve` as a process")
    ap.add_argument("--read-each-scrape", action="store_true",
                    help="no floor in this process's collector: every measured scrape reads the maps")
    ap.add_argument("--pause-load", action="store_true",
                    help="stop the workload (SIGSTOP) during each scrape: no busy threads beside the read")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("scrape_cost.py: needs root")
    from futextrace.workload.build import workload_path
    bench = str(workload_path())
    print(f"# {os.cpu_count()} CPUs, kernel {os.uname().release}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          + ("each scrape a read (no floor)" if a.read_each_scrape else "the collector's floor as serve's")
          + (", the workload stopped during each scrape" if a.pause_load else ""),
          flush=True)
    for load in a.loads.split(","):
        r = in_process(bench, load, a.scrapes, a.method, a.settle, a.read_each_scrape, a.pause_load)
        ways = sorted({via for b in r["bytes"] for via in b})
        print(f"{load}: CPU per scrape {spread(r['cpu_ms'], '{:.1f}')} ms, bytes read per scrape "
              + ", ".join(f"{via} {spread([b.get(via, 0) for b in r['bytes']], '{:.0f}')}" for via in ways)
              + f", page {statistics.median(r['page']):.0f} B, "
              f"map entries {r['entries']}, {r['ncpu']} possible CPUs, "
              f"real reads {sum(r['read'])} of {len(r['read'])} scrapes", flush=True)
        if not all(r["read"]):
            print(f"{load}: CPU per scrape, real reads only: "
                  + (spread([c for c, f in zip(r['cpu_ms'], r['read']) if f], '{:.1f}') + " ms"
                     if any(r["read"]) else "none"), flush=True)
        if a.serve:
            s = as_serve(bench, load, a.scrapes)
            print(f"{load}: futextrace serve process: " + ", ".join(
                f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items()), flush=True)
    print(f"# end: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
