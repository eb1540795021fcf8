#!/usr/bin/env python3
"""Cost and stability of `futextrace serve` under a scrape every second.

Starts the exporter on a free loopback port, then a thread-churning workload
(benchmarks/memory_bound.py's driver: threads born and dying all the time, futex
keys that never stop coming) plus a new short-lived futexbench process every
--spawn-every seconds (PIDs that come and go, so the series bound and the
exit grace period are exercised). It first measures the exporter idle (no
scrapes: its ring-buffer polling only), then scrapes /metrics every second
and prints, every --every seconds: the exporter's RSS (and its anonymous part),
its share of one CPU over the row, its CPU per scrape
(CPU time over the window minus the idle rate, divided by the scrapes), the
scrape latency, the number of series served and of labelled processes, and
the time one read of the kernel maps took, and what the exporter's recorder
retains (events, per-process comms: bounded by the live processes and those
in their grace period).

    sudo .venv/bin/python benchmarks/exporter_soak.py --minutes 10
    sudo .venv/bin/python benchmarks/exporter_soak.py --minutes 10 --interval 15 --every 60

--interval is the scrape interval (1 s by default; Prometheus's default is 15 s).
--steady replaces the thread-churning driver by one long-lived futexbench (2
threads, 4096 futexes, no threads born or dying): a service in steady state,
where the exporter's ring-buffer polling costs little and scrapes dominate.
--tracemalloc DIR runs the exporter under tracemalloc and writes, every row,
the Python allocations that grew most since the first row (DIR/row-N.txt):
for finding what grows, not for the cost figures (tracing costs CPU and RSS).

Not a test: it prints figures for the README. Needs root and cc.
Flat RSS and a flat series count over the run are what it is for.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from memory_bound import build_driver, rss_kib  # noqa: E402  (the same churn driver)

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK   # utime + stime


def rss_anon_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> tuple[float, str]:
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=60) as r:
        text = r.read().decode()
    return time.monotonic() - t0, text


def series_figures(text: str) -> dict:
    samples = [l for l in text.splitlines() if l.startswith("futextrace_")]
    def value(prefix: str) -> float:
        return next((float(line.rsplit(" ", 1)[1]) for line in samples if line.startswith(prefix)), 0.0)
    return {"series": len(samples),
            "labelled": int(value('futextrace_exporter_processes{state="labelled"}')),
            "tracked": int(value('futextrace_exporter_processes{state="tracked"}')),
            "read_ms": value("futextrace_exporter_map_read_seconds") * 1000,
            "reads": int(value("futextrace_exporter_map_reads_total")),
            "unattributed": int(value("futextrace_unattributed_lookups_total")),
            "events": int(value('futextrace_exporter_retained{kind="events"}')),
            "comms": int(value('futextrace_exporter_retained{kind="comms"}'))}


# Run as `python -X tracemalloc=10 -c TRACED_SERVE OUTDIR serve ARGS...`: SIGUSR2 dumps a
# snapshot to OUTDIR/row-N.snap (cheap); report_tracemalloc() compares them afterwards.
TRACED_SERVE = r"""
import itertools, signal, sys, tracemalloc
from pathlib import Path
out, rows = Path(sys.argv[1]), itertools.count(1)
signal.signal(signal.SIGUSR2, lambda *_: tracemalloc.take_snapshot().dump(str(out / f"row-{next(rows):03d}.snap")))
sys.argv = ["futextrace"] + sys.argv[2:]
from futextrace.cli import main
sys.exit(main())
"""


def report_tracemalloc(out: Path) -> None:
    """Per row: Python memory traced, and what grew most since the first row's snapshot."""
    import tracemalloc
    snaps = sorted(out.glob("row-*.snap"))
    if len(snaps) < 2:
        return
    first = tracemalloc.Snapshot.load(str(snaps[0]))
    lines = []
    for path in snaps[1:]:
        snap = tracemalloc.Snapshot.load(str(path))
        lines.append(f"== {path.name}: traced {sum(t.size for t in snap.traces) / 2**20:.2f} MiB")
        for stat in snap.compare_to(first, "traceback")[:8]:
            lines.append(f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks, now {stat.size / 1024:.1f} KiB")
            lines += ["      " + line for line in stat.traceback.format(limit=4)]
    (out / "growth.txt").write_text("\n".join(lines) + "\n")
    print(f"# tracemalloc: {out / 'growth.txt'}", flush=True)


def start_exporter(port: int, max_processes: int, traced: Path | None) -> subprocess.Popen:
    serve = ["serve", "--listen", f"127.0.0.1:{port}", "--max-processes", str(max_processes), "--grace", "10"]
    if traced:
        cmd = [sys.executable, "-X", "tracemalloc=10", "-c", TRACED_SERVE, str(traced)] + serve
    else:
        cmd = [sys.executable, "-m", "futextrace.cli"] + serve
    print("# " + " ".join(c if c != TRACED_SERVE else "TRACED_SERVE" for c in cmd), flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()   # "serving http://...": attached and listening
    if "serving" not in line:
        sys.exit(f"exporter_soak.py: the exporter did not start: {line.strip()}")
    return p


def idle_cpu_rate(pid: int, seconds: float) -> float:
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_s(pid) - c0) / (time.monotonic() - t0)


def soak(url: str, pid: int, seconds: float, every: float, interval: float, idle_rate: float, spawn,
         traced: bool) -> None:
    print("  t(s)  RSS(MiB) anon  CPU(%)  CPU/scrape(ms)  scrape p50/max(ms)  series  labelled  tracked  "
          "map read(ms)  unattributed  kept events/comms  load1", flush=True)
    t_start = time.monotonic()
    while time.monotonic() - t_start < seconds:
        c0, w0, lat = cpu_s(pid), time.monotonic(), []
        next_scrape = w0
        while time.monotonic() - w0 < every:
            spawn()
            latency, text = scrape(url)
            lat.append(latency)
            while time.monotonic() < next_scrape + interval:   # the workload keeps spawning
                spawn()
                time.sleep(max(0.0, min(0.5, next_scrape + interval - time.monotonic())))
            next_scrape += interval
        window = time.monotonic() - w0
        used = cpu_s(pid) - c0
        per_scrape = (used - idle_rate * window) / len(lat)
        f = series_figures(text)
        rss = rss_kib(pid) or 0
        if traced:
            os.kill(pid, signal.SIGUSR2)
        print(f"{time.monotonic() - t_start:6.0f}  {rss / 1024:8.1f} {rss_anon_kib(pid) / 1024:5.1f}  "
              f"{used / window * 100:6.2f}  {per_scrape * 1000:14.1f}  "
              f"{statistics.median(lat) * 1000:8.1f}/{max(lat) * 1000:<9.1f}  {f['series']:6}  "
              f"{f['labelled']:8}  {f['tracked']:7}  {f['read_ms']:12.1f}  {f['unattributed']:12}  "
              f"{f['events']:6}/{f['comms']:<6}  {os.getloadavg()[0]:5.2f}",
              flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=2, help="scraping time (the README's figures: 10)")
    ap.add_argument("--every", type=float, default=30, help="seconds between printed rows")
    ap.add_argument("--idle", type=float, default=20, help="seconds measured without scrapes first")
    ap.add_argument("--spawn-every", type=float, default=2, help="seconds between short-lived processes")
    ap.add_argument("--max-processes", type=int, default=10)
    ap.add_argument("--interval", type=float, default=1, help="seconds between scrapes")
    ap.add_argument("--steady", action="store_true", help="a long-lived futexbench instead of the thread churn")
    ap.add_argument("--tracemalloc", type=Path, metavar="DIR",
                    help="run the exporter under tracemalloc; each row's growth goes to DIR/row-N.txt")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("exporter_soak.py: needs root")
    from futextrace.workload.build import workload_path
    bench = str(workload_path())
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    with tempfile.TemporaryDirectory() as tmp:
        driver = build_driver(Path(tmp))
        if a.tracemalloc:
            a.tracemalloc.mkdir(parents=True, exist_ok=True)
        exporter = start_exporter(port, a.max_processes, a.tracemalloc)
        lasting = str(a.idle + a.minutes * 60 + 60)
        churn = subprocess.Popen([bench, "-t", "2", "-f", "4096", "-r", lasting], stdout=subprocess.DEVNULL) \
            if a.steady else subprocess.Popen([str(driver), lasting])
        kids, last_spawn = [], [0.0]

        def spawn():
            if time.monotonic() - last_spawn[0] >= a.spawn_every:
                last_spawn[0] = time.monotonic()
                kids.append(subprocess.Popen([bench, "-t", "2", "-f", "64", "-n", "200"],
                                             stdout=subprocess.DEVNULL))
                kids[:] = [k for k in kids if k.poll() is None]
        try:
            rate = idle_cpu_rate(exporter.pid, a.idle)
            load = "steady futexbench" if a.steady else "churn"
            print(f"# idle (no scrapes, {load} running): exporter CPU {rate * 1000:.1f} ms/s, "
                  f"RSS {(rss_kib(exporter.pid) or 0) / 1024:.1f} MiB; scrape every {a.interval:g} s; "
                  f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
            soak(url, exporter.pid, a.minutes * 60, a.every, a.interval, rate, spawn, bool(a.tracemalloc))
        finally:
            churn.kill()
            for k in kids:
                k.kill()
            exporter.terminate()
            try:
                print(f"# exporter exit {exporter.wait(timeout=60)} after SIGTERM", flush=True)
            except subprocess.TimeoutExpired:
                exporter.kill()
                print("# exporter still running 60 s after SIGTERM: killed", flush=True)
        if a.tracemalloc:
            report_tracemalloc(a.tracemalloc)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
