#!/usr/bin/env python3
"""Footprint of `futextrace record` and `futextrace serve` beside bpftrace and
prometheus-node-exporter (issue 44): memory, start-up time, CPU per scrape.

In one run, under three loads: "quiet" (an idle host: the traced process is a
`sleep`, nothing else runs; starts only: the exporters' with 3 scrapes, not
compared), "workload" (the built-in futexbench running, 2 threads, 4096
futexes, as `futextrace bench` runs it: on a 2-CPU host it keeps both CPUs in
use), and "busy" (the workload and a bounded busy loop per CPU), it measures:

  record   `futextrace record -p WORKLOAD -d N` (and once with -i 1, a row
           a second read from the maps): time from the command's start
           to "Tracing ..." on its stderr (printed once attached), max RSS
           (the child's rusage, ru_maxrss), RSS at steady state, and whether
           libLLVM/libclang are mapped then (/proc/PID/maps) with how much of
           them is resident (/proc/PID/smaps Rss).
  serve    `futextrace serve` on a free loopback port: time to "serving ...",
           RSS after K scrapes of http://127.0.0.1:PORT/metrics, max RSS
           (VmHWM), CPU per scrape (utime+stime from /proc/PID/stat over the
           K scrapes, less the exporter's own rate between scrapes measured
           before them), LLVM mapped.
  bpftrace `bpftrace -e 'tracepoint:raw_syscalls:sys_enter /args->id == 202/
           { @[cpu] = count(); }'` plus a BEGIN probe that prints a line
           (bpftrace runs BEGIN once every other probe is attached): start
           time, max RSS, LLVM mapped.
  node-exporter  prometheus-node-exporter on a free loopback port, default
           collectors: time to its first answer, RSS after K scrapes, CPU per
           scrape.

Then, with --scrape-loads (default "1024,full"), the cost of the exporter's
read alone: scrape_cost.py --read-each-scrape, run as a process of its own
(the exporter's recorder and collector in that process, every process traced,
10 scrapes a second apart, each one's thread CPU (the map read, the numpy
work, the families, the text exposition), beside futexbench -t 2 -f 1024
("1024") and with the per-futex list full and 16,384 buckets ("full")): the
issue's 10 ms and 30 ms targets. The CPU per scrape of the exporter rows
above is the whole process's instead, ticks of 10 ms, the HTTP request
and the ring buffer's thread included.

The program cache ($FUTEXTRACE_CACHE/prog) is warmed by one unmeasured
`record` first, so every futextrace figure is a warm start. Each start is
repeated --repeat times (median shown, min-max beside). The last lines are a
Markdown table for the README. A tool that is not installed is named as
missing and skipped (`apt-get install -y bpftrace prometheus-node-exporter`).

    sudo .venv/bin/python benchmarks/footprint.py
    sudo .venv/bin/python benchmarks/footprint.py --scrapes 20 --repeat 3 --only futextrace

Not a test: it prints figures. Needs root and cc. Scrapes go to 127.0.0.1 only.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
BPFTRACE_PROG = ("BEGIN { printf(\"attached\\n\"); } "
                 "tracepoint:raw_syscalls:sys_enter /args->id == 202/ { @[cpu] = count(); }")
NODE_EXPORTER = "prometheus-node-exporter"
LLVM_LIBS = ("libLLVM", "libclang")
SCRAPE_GAP = 1.0          # seconds between scrapes: above serve's --min-interval, so each one reads the maps


# --- /proc ------------------------------------------------------------------------

def status_kib(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK   # utime + stime


def llvm_resident(pid: int) -> tuple[bool, float]:
    """(is libLLVM or libclang mapped, MiB of them resident) for a running process."""
    mapped, rss_kib, in_llvm = False, 0, False
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split(None, 1)[0]
                if "-" in head and not head.endswith(":"):       # a mapping's first line
                    in_llvm = any(lib in line for lib in LLVM_LIBS)
                    mapped |= in_llvm
                elif in_llvm and head == "Rss:":
                    rss_kib += int(line.split()[1])
    except OSError:
        pass
    return mapped, rss_kib / 1024


def wait_rusage(p: subprocess.Popen, timeout: float) -> int:
    """Reap the child; its ru_maxrss in KiB (0 when it had to be killed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_maxrss
        time.sleep(0.05)
    p.kill()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_maxrss


# --- helpers ----------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read()


def wait_line(stream, marker: str, timeout: float) -> float | None:
    """Seconds until a line containing `marker` is read from `stream` (None: never).
    The stream is drained on in a thread afterwards, so the child never blocks on a full pipe."""
    t0, found = time.monotonic(), threading.Event()

    def reader():
        for line in stream:
            if marker in line and not found.is_set():
                found.set()
    threading.Thread(target=reader, daemon=True).start()
    return time.monotonic() - t0 if found.wait(timeout) else None


def median_range(values: list[float], fmt: str) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    m = fmt.format(statistics.median(values))
    return m if len(values) == 1 else f"{m} ({fmt.format(min(values))}-{fmt.format(max(values))})"


class Busy:
    """One busy loop per CPU, each ending by itself after `seconds` at the latest."""

    def __init__(self, seconds: float):
        code = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"
        self.procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(os.cpu_count() or 1)]

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()


def futextrace_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "futextrace.cli", *args]


# --- one measurement each ---------------------------------------------------------

def measure_record(pid: int, duration: float, *more: str) -> dict:
    t0 = time.monotonic()
    p = subprocess.Popen(futextrace_cmd("record", "-p", str(pid), "-d", f"{duration:g}", *more),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        attached = wait_line(p.stderr, "Tracing", 120)
        attach_s = None if attached is None else time.monotonic() - t0
        # Steady state: attached and polling; with -i, after several rows.
        time.sleep(duration - 1.5 if more else min(1.0, duration / 2))
        steady_rss = status_kib(p.pid, "VmRSS")
        mapped, llvm_mib = llvm_resident(p.pid)
    finally:
        maxrss = wait_rusage(p, duration + 60)
    return {"attach_s": attach_s, "maxrss_mib": maxrss / 1024, "rss_mib": (steady_rss or 0) / 1024,
            "llvm": mapped, "llvm_mib": llvm_mib, "rc": p.returncode}


def measure_exporter(cmd: list[str], port: int, ready_marker: str | None, scrapes: int, idle_s: float) -> dict:
    """Start an exporter, wait until it is ready, measure its idle CPU rate, then
    `scrapes` scrapes SCRAPE_GAP apart: CPU per scrape net of the idle rate."""
    url = f"http://127.0.0.1:{port}/metrics"
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        if ready_marker:
            ready = wait_line(p.stderr, ready_marker, 120)
        else:                                       # ready when it answers
            wait_line(p.stderr, "\0never\0", 0)     # drain stderr
            ready = None
            while time.monotonic() - t0 < 60 and p.poll() is None:
                try:
                    scrape(url)
                    ready = time.monotonic() - t0
                    break
                except OSError:
                    time.sleep(0.01)
        if ready is None:
            return {"error": f"not ready (exit {p.poll()})"}
        ready_s = time.monotonic() - t0 if ready_marker else ready
        scrape(url)                                 # the first scrape builds what later ones reuse
        time.sleep(SCRAPE_GAP)
        c0, w0 = cpu_s(p.pid), time.monotonic()
        time.sleep(idle_s)
        idle_rate = (cpu_s(p.pid) - c0) / (time.monotonic() - w0)
        c0, w0, size = cpu_s(p.pid), time.monotonic(), 0
        for k in range(scrapes):
            size = len(scrape(url))
            time.sleep(max(0.0, w0 + (k + 1) * SCRAPE_GAP - time.monotonic()))
        used, window = cpu_s(p.pid) - c0, time.monotonic() - w0
        mapped, llvm_mib = llvm_resident(p.pid)
        return {"attach_s": ready_s, "rss_mib": (status_kib(p.pid, "VmRSS") or 0) / 1024,
                "maxrss_mib": (status_kib(p.pid, "VmHWM") or 0) / 1024,
                "scrape_ms": (used - idle_rate * window) / scrapes * 1000,
                "gross_scrape_ms": used / scrapes * 1000, "idle_ms_s": idle_rate * 1000,
                "llvm": mapped, "llvm_mib": llvm_mib, "bytes": size}
    finally:
        p.send_signal(signal.SIGTERM)
        wait_rusage(p, 30)


def measure_bpftrace(seconds: float) -> dict:
    t0 = time.monotonic()
    p = subprocess.Popen(["bpftrace", "-e", BPFTRACE_PROG], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    try:
        attached = wait_line(p.stdout, "attached", 120)
        attach_s = None if attached is None else time.monotonic() - t0
        time.sleep(seconds)
        rss = status_kib(p.pid, "VmRSS")
        mapped, llvm_mib = llvm_resident(p.pid)
    finally:
        p.send_signal(signal.SIGINT)
        maxrss = wait_rusage(p, 30)
    return {"attach_s": attach_s, "maxrss_mib": maxrss / 1024, "rss_mib": (rss or 0) / 1024,
            "llvm": mapped, "llvm_mib": llvm_mib}


# --- the run ----------------------------------------------------------------------

def describe(tool: str, load: str, runs: list[dict], scrape: bool = True) -> dict:
    """A table row of these runs; `scrape` False: no CPU per scrape (a start's
    3 scrapes of nothing are under the clock's 10 ms tick, and less the idle
    rate can even come out negative)."""
    ok = [r for r in runs if "error" not in r]
    for r in runs:
        print(f"# {tool} [{load}]: " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                                  for k, v in r.items()), flush=True)
    def col(key, fmt):
        return median_range([r.get(key) for r in ok], fmt)
    llvm = "-" if not ok else ("yes, " + col("llvm_mib", "{:.0f}") + " MiB resident"
                               if any(r["llvm"] for r in ok) else "no")
    return {"tool": tool, "load": load, "maxrss": col("maxrss_mib", "{:.0f}"), "rss": col("rss_mib", "{:.0f}"),
            "attach": col("attach_s", "{:.2f}"), "scrape": col("scrape_ms", "{:.1f}") if scrape else "-",
            "llvm": llvm}


def run_load(load: str, a, bench: str, have: dict) -> list[dict]:
    rows = []
    # quiet: the traced process sleeps and nothing else runs, the idle host of the
    # start-up target; there the exporters' starts only (a few scrapes of nothing).
    quiet = load == "quiet"
    workload = subprocess.Popen(["sleep", "3600"] if quiet else [bench, "-t", "2", "-f", "4096", "-r", "3600"],
                                stdout=subprocess.DEVNULL)
    busy = Busy(1800) if load == "busy" else None
    try:
        time.sleep(0.5)
        if a.only in (None, "futextrace"):
            rows.append(describe("futextrace record", load,
                                 [measure_record(workload.pid, a.duration) for _ in range(a.repeat)]))
        if a.only in (None, "futextrace") and quiet:
            for pids, name in ((["-p", str(workload.pid)], "serve -p"), ([], "serve, all processes")):
                port = free_port()
                serve = futextrace_cmd("serve", "--listen", f"127.0.0.1:{port}", *pids)
                rows.append(describe(f"futextrace {name} (start only)", load,
                                     [measure_exporter(serve, port, "serving", 3, 2) for _ in range(a.repeat)],
                                     scrape=False))
        if a.only in (None, "futextrace") and not quiet:
            rows.append(describe("futextrace record -i 1", load,
                                 [measure_record(workload.pid, max(a.duration, 6), "-i", "1")]))
            port = free_port()
            serve = futextrace_cmd("serve", "--listen", f"127.0.0.1:{port}", "-p", str(workload.pid))
            rows.append(describe(f"futextrace serve -p ({a.scrapes} scrapes)", load,
                                 [measure_exporter(serve, port, "serving", a.scrapes, a.idle)]))
            port = free_port()
            serve = futextrace_cmd("serve", "--listen", f"127.0.0.1:{port}")
            rows.append(describe(f"futextrace serve, all processes ({a.scrapes} scrapes)", load,
                                 [measure_exporter(serve, port, "serving", a.scrapes, a.idle)]))
        if a.only in (None, "others") and have["bpftrace"]:
            rows.append(describe("bpftrace (one tracepoint, per-CPU count)", load,
                                 [measure_bpftrace(a.duration) for _ in range(a.repeat)]))
        if a.only in (None, "others") and have[NODE_EXPORTER] and not quiet:
            port = free_port()
            cmd = [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}"]
            rows.append(describe(f"prometheus-node-exporter ({a.scrapes} scrapes)", load,
                                 [measure_exporter(cmd, port, None, a.scrapes, a.idle)]))
    finally:
        if busy:
            busy.stop()
        workload.kill()
        workload.wait()
    return rows


def read_cost(load: str) -> dict:
    """A row of the exporter's read alone: scrape_cost.py --read-each-scrape in a
    process of its own, as `serve` is (measured in this process after the runs
    above, one full-map run took 31 ms a read where a fresh process took 24)."""
    script = Path(__file__).resolve().parent / "scrape_cost.py"
    p = subprocess.run([sys.executable, str(script), "--loads", load, "--scrapes", "10", "--read-each-scrape"],
                       capture_output=True, text=True, timeout=600)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith(f"{load}: ")), None)
    print(f"# futextrace serve's read [{load}]: " + (line or f"failed (exit {p.returncode}): {p.stderr[-300:]}"),
          flush=True)
    got = re.search(r"CPU per scrape (\S+ \(\S+\)) ms", line or "")
    name = {"1024": "futexbench -t 2 -f 1024", "full": "per-futex list full, 16,384 buckets"}.get(load, load)
    return {"tool": f"futextrace serve's read alone (scrape_cost.py, 10 reads; {name})", "load": "workload",
            "maxrss": "-", "rss": "-", "attach": "-", "scrape": got.group(1) if got else "failed", "llvm": "-"}


def warm_cache(bench: str) -> None:
    """Start each futextrace command measured once, unmeasured: every start measured is a
    warm start (each program variant, -p or not, has its own program cache entry)."""
    warm = subprocess.Popen([bench, "-t", "1", "-r", "600"], stdout=subprocess.DEVNULL)
    try:
        subprocess.run(futextrace_cmd("record", "-p", str(warm.pid), "-d", "0.5"), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False, timeout=300)
        for pids in (["-p", str(warm.pid)], []):
            p = subprocess.Popen(futextrace_cmd("serve", "--listen", f"127.0.0.1:{free_port()}", *pids),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            wait_line(p.stderr, "serving", 300)
            p.send_signal(signal.SIGTERM)
            wait_rusage(p, 30)
    finally:
        warm.kill()
        warm.wait()


def table(rows: list[dict]) -> str:
    out = ["| tool | CPUs | max RSS (MiB) | RSS at steady state (MiB) | start → attached/ready (s) "
           "| CPU per scrape (ms) | libLLVM/libclang mapped |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append(f"| {r['tool']} | {r['load']} | {r['maxrss']} | {r['rss']} | {r['attach']} | {r['scrape']} "
                   f"| {r['llvm']} |")
    return "\n".join(out)


def interrupted(*_) -> None:
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=3, help="record -d and bpftrace's run, seconds")
    ap.add_argument("--repeat", type=int, default=3, help="starts of record and bpftrace per load")
    ap.add_argument("--scrapes", type=int, default=20, help="scrapes per exporter (one a second)")
    ap.add_argument("--idle", type=float, default=5, help="seconds of an exporter's idle rate before scraping")
    ap.add_argument("--loads", default="quiet,workload,busy",
                    help="quiet (the traced process sleeps, nothing else runs: starts only), workload "
                         "(futexbench, 2 threads), busy (the workload and a busy loop per CPU); comma-separated")
    ap.add_argument("--only", choices=["futextrace", "others"], help="measure only futextrace, or only the others")
    ap.add_argument("--scrape-loads", default="1024,full",
                    help="scrape_cost.py's loads whose read it measures, in a process of its own (\"\": none)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("footprint.py: needs root")
    signal.signal(signal.SIGTERM, interrupted)     # ends as Ctrl-C does: every child stopped
    have = {tool: bool(shutil.which(tool)) for tool in ("bpftrace", NODE_EXPORTER)}
    for tool, found in have.items():
        if not found:
            print(f"# {tool}: not installed, not measured (apt-get install -y {tool})", flush=True)
    from futextrace.workload.build import workload_path
    bench = str(workload_path())
    import futextrace
    print(f"# futextrace from {Path(futextrace.__file__).parent}, cache "
          f"{os.environ.get('FUTEXTRACE_CACHE', '/var/cache/futextrace')}, {os.cpu_count()} CPUs, "
          f"kernel {os.uname().release}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    warm_cache(bench)
    rows = []
    for load in a.loads.split(","):
        rows += run_load(load, a, bench, have)
    if a.only in (None, "futextrace"):
        rows += [read_cost(load) for load in a.scrape_loads.split(",") if load]
    print(f"# end: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
