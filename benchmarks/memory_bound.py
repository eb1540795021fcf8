#!/usr/bin/env python3
"""Does `futextrace record` stay bounded on a thread-churning workload?

Records a small native driver (threads created and exiting all the time, each
waking many distinct futexes, so futex keys never stop coming) with
`futextrace record -i 5 --jsonl`, and prints, every --every seconds, the tracer's
RSS (VmRSS) and the entry count of each of its BPF maps (found through the
tracer's own file descriptors, /proc/PID/fdinfo map_id, so other tools' maps
with the same names are never counted).

    sudo .venv/bin/python benchmarks/memory_bound.py --minutes 10

Not a test: it prints figures for the README. Needs root, bpftool and cc.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Threads are born and die continuously; each one wakes (no waiters: a pure hash
# lookup) futexes spread over a 64 MiB array, so distinct keys grow without end.
CHURN_C = r"""
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#define WORDS (16u << 20)
static uint32_t *words;
static void *worker(void *arg) {
    uint64_t x = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < 2000; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        syscall(SYS_futex, &words[x % WORDS], FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
    }
    return 0;
}
int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 60;
    words = calloc(WORDS, sizeof *words);
    struct timespec t0, t; clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t n = 0;
    do {
        pthread_t th[8];
        for (int i = 0; i < 8; i++) pthread_create(&th[i], 0, worker, (void *)(uintptr_t)++n);
        for (int i = 0; i < 8; i++) pthread_join(th[i], 0);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
    return 0;
}
"""


def build_driver(tmp: Path) -> Path:
    src, out = tmp / "churn.c", tmp / "churn"
    src.write_text(CHURN_C)
    subprocess.run(["cc", "-O2", "-pthread", "-o", str(out), str(src)], check=True)
    return out


def rss_kib(pid: int) -> int | None:
    try:
        m = re.search(r"^VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(), re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


def map_ids(pid: int) -> set[int]:
    """IDs of the BPF maps the process holds open."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            m = re.search(r"^map_id:\s+(\d+)", Path(f"/proc/{pid}/fdinfo/{fd}").read_text(), re.M)
        except OSError:
            continue
        if m:
            ids.add(int(m.group(1)))
    return ids


MEMLOCK: dict[str, int] = {}


def map_entries(map_id: int) -> tuple[str, int, int | None]:
    """(name, max_entries, entries now); entries None for maps not worth dumping.
    Each map's kernel memory (bytes_memlock) is kept in MEMLOCK by name."""
    out = subprocess.run(["bpftool", "-j", "map", "show", "id", str(map_id)],
                         capture_output=True, text=True)
    if out.returncode != 0:      # the recording ended between two samples
        return None
    info = json.loads(out.stdout)
    MEMLOCK[info["name"]] = int(info.get("bytes_memlock", 0))
    if info["type"] in ("ringbuf", "array", "percpu_array"):
        return info["name"], info["max_entries"], None   # fixed size by construction
    dump = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(map_id)],
                          capture_output=True, text=True).stdout
    return info["name"], info["max_entries"], len(json.loads(dump or "[]"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--every", type=float, default=15, help="seconds between samples")
    a = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("bpftool"):
        sys.exit("memory_bound.py: needs root and bpftool")
    secs = a.minutes * 60
    with tempfile.TemporaryDirectory() as tmp:
        driver = build_driver(Path(tmp))
        jsonl = Path(tmp) / "intervals.jsonl"
        cmd = [sys.executable, "-m", "futextrace.cli", "record", "-q", "-i", "5",
               "--jsonl", str(jsonl), "--", str(driver), str(secs)]
        print("# " + " ".join(cmd), flush=True)
        tracer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while tracer.poll() is None and not (jsonl.exists() and jsonl.stat().st_size):
            time.sleep(0.2)     # the first interval line: attached and running
        ids = map_ids(tracer.pid) if tracer.poll() is None else set()
        header = None
        t0 = time.monotonic()
        while tracer.poll() is None:
            rss = rss_kib(tracer.pid)
            maps = sorted(m for m in (map_entries(i) for i in ids) if m is not None)
            if not maps:
                break
            counted = [(n, mx, e) for n, mx, e in maps if e is not None]
            if header is None:
                header = "  t(s)  RSS(MiB)  " + "  ".join(f"{n}(/{mx})" for n, mx, _ in counted) \
                         + "  lookups/s  unattributed(5s)"
                print(header)
                print(f"# kernel map memory on {os.cpu_count()} CPUs (bytes_memlock): "
                      + ", ".join(f"{n} {b / 2**20:.1f} MiB" for n, b in sorted(MEMLOCK.items()))
                      + f"; {sum(MEMLOCK.values()) / 2**20:.1f} MiB in all")
            last = json.loads(jsonl.read_text().splitlines()[-1])
            print(f"{time.monotonic() - t0:6.0f}  {rss / 1024 if rss else 0:8.1f}  "
                  + "  ".join(f"{e:>{len(n) + len(str(mx)) + 3}}" for n, mx, e in counted)
                  + f"  {last['lookups'] / last['interval_s']:9.0f}  {last['unattributed']:>16}",
                  flush=True)
            end = time.monotonic() + a.every
            while tracer.poll() is None and time.monotonic() < end:
                time.sleep(0.2)
        err = tracer.stderr.read()
        rows = [json.loads(l) for l in jsonl.read_text().splitlines()]
    print(f"# tracer exit {tracer.returncode}{': ' + err.strip() if err.strip() else ''}; "
          f"{len(rows)} intervals, {sum(r['lookups'] for r in rows)} lookups, "
          f"{sum(r['unattributed'] for r in rows)} unattributed, "
          f"{sum(r['lost_events'] for r in rows)} events lost")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
