#!/usr/bin/env python3
"""Cost and stability of `futextrace serve` under a scrape every second.

Starts the exporter on a free loopback port, then a thread-churning workload
(bench/memory_bound.py's driver: threads born and dying all the time, futex
keys that never stop coming) plus a new short-lived futexbench process every
--spawn-every seconds (PIDs that come and go, so the series bound and the
exit grace period are exercised). It first measures the exporter idle (no
scrapes: its ring-buffer polling only), then scrapes /metrics every second
and prints, every --every seconds: the exporter's RSS, its CPU per scrape
(CPU time over the window minus the idle rate, divided by the scrapes), the
scrape latency, the number of series served and of labelled processes, and
the time one read of the kernel maps took, and what the exporter's recorder
retains (events, per-process comms: bounded by the live processes and those
in their grace period).

    sudo .venv/bin/python bench/exporter_soak.py --minutes 10

Not a test: it prints figures for the README. Needs root and cc.
Flat RSS and a flat series count over the run are what it is for.
"""
from __future__ import annotations

import argparse
import os
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


def start_exporter(port: int, max_processes: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "futextrace.cli", "serve", "--listen", f"127.0.0.1:{port}",
           "--max-processes", str(max_processes), "--grace", "10"]
    print("# " + " ".join(cmd), flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()   # "serving http://...": attached and listening
    if "serving" not in line:
        sys.exit(f"exporter_soak.py: the exporter did not start: {line.strip()}")
    return p


def idle_cpu_rate(pid: int, seconds: float) -> float:
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_s(pid) - c0) / (time.monotonic() - t0)


def soak(url: str, pid: int, seconds: float, every: float, idle_rate: float, spawn) -> None:
    print("  t(s)  RSS(MiB)  CPU/scrape(ms)  scrape p50/max(ms)  series  labelled  tracked  "
          "map read(ms)  unattributed  kept events/comms", flush=True)
    t_start = time.monotonic()
    while time.monotonic() - t_start < seconds:
        c0, w0, lat = cpu_s(pid), time.monotonic(), []
        next_scrape = w0
        while time.monotonic() - w0 < every:
            spawn()
            latency, text = scrape(url)
            lat.append(latency)
            next_scrape += 1.0
            time.sleep(max(0.0, next_scrape - time.monotonic()))
        window = time.monotonic() - w0
        per_scrape = (cpu_s(pid) - c0 - idle_rate * window) / len(lat)
        f = series_figures(text)
        rss = rss_kib(pid) or 0
        print(f"{time.monotonic() - t_start:6.0f}  {rss / 1024:8.1f}  {per_scrape * 1000:14.1f}  "
              f"{statistics.median(lat) * 1000:8.1f}/{max(lat) * 1000:<9.1f}  {f['series']:6}  "
              f"{f['labelled']:8}  {f['tracked']:7}  {f['read_ms']:12.1f}  {f['unattributed']:12}  "
              f"{f['events']:6}/{f['comms']}",
              flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=2, help="scraping time (the README's figures: 10)")
    ap.add_argument("--every", type=float, default=30, help="seconds between printed rows")
    ap.add_argument("--idle", type=float, default=20, help="seconds measured without scrapes first")
    ap.add_argument("--spawn-every", type=float, default=2, help="seconds between short-lived processes")
    ap.add_argument("--max-processes", type=int, default=10)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("exporter_soak.py: needs root")
    from futextrace.workload.build import workload_path
    bench = str(workload_path())
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    with tempfile.TemporaryDirectory() as tmp:
        driver = build_driver(Path(tmp))
        exporter = start_exporter(port, a.max_processes)
        churn = subprocess.Popen([str(driver), str(a.idle + a.minutes * 60 + 60)])
        kids, last_spawn = [], [0.0]

        def spawn():
            if time.monotonic() - last_spawn[0] >= a.spawn_every:
                last_spawn[0] = time.monotonic()
                kids.append(subprocess.Popen([bench, "-t", "2", "-f", "64", "-n", "200"],
                                             stdout=subprocess.DEVNULL))
                kids[:] = [k for k in kids if k.poll() is None]
        try:
            rate = idle_cpu_rate(exporter.pid, a.idle)
            print(f"# idle (no scrapes, churn running): exporter CPU {rate * 1000:.1f} ms/s, "
                  f"RSS {(rss_kib(exporter.pid) or 0) / 1024:.1f} MiB", flush=True)
            soak(url, exporter.pid, a.minutes * 60, a.every, rate, spawn)
        finally:
            churn.kill()
            for k in kids:
                k.kill()
            exporter.terminate()
            rc = exporter.wait(timeout=60)
            print(f"# exporter exit {rc} after SIGTERM", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
