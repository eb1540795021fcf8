#!/usr/bin/env python3
"""How long does `futextrace snapshot` take with 10,000 processes running?

Starts --procs sleeping processes from a small C helper (every 10th sets a
custom hash of 32 buckets with prctl, every 50th starts two threads, so the
snapshot has rows to print), then times, side by side in one run:

- the whole command, `futextrace snapshot --json FILE`, as a user runs it
  (Python start-up and the kernel model included), with the system's own
  processes only and then with the sleepers;
- its parts in this process: the kernel model, loading the task iterator
  (compiled instructions from the cache), one read of every task, the rows.

    sudo .venv/bin/python benchmarks/snapshot_scale.py --procs 10000 --runs 5

Not a test: it prints figures (target: under 1 s on 2 CPUs). Needs root and cc.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SLEEPERS_C = r"""
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>
static void *idle(void *arg) { (void)arg; for (;;) pause(); return NULL; }
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    setpgid(0, 0);                       /* one group: killed together */
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); break; }
        if (pid == 0) {
            if (i % 10 == 0) prctl(78, 1, 32, 0, 0);   /* PR_FUTEX_HASH_SET_SLOTS 32 */
            if (i % 50 == 0) { pthread_t t; pthread_create(&t, NULL, idle, NULL);
                               pthread_create(&t, NULL, idle, NULL); }
            for (;;) pause();
        }
    }
    printf("ready\n"); fflush(stdout);
    char c; while (read(0, &c, 1) > 0) {}   /* until our stdin closes */
    kill(0, SIGKILL);
    return 0;
}
"""


def build(tmp: Path) -> Path:
    src, exe = tmp / "sleepers.c", tmp / "sleepers"
    src.write_text(SLEEPERS_C)
    subprocess.run(["cc", "-O2", "-pthread", "-o", str(exe), str(src)], check=True)
    return exe


def command_time(out: Path) -> tuple[float, int]:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "futextrace.cli", "snapshot", "--json", str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    took = time.perf_counter() - t
    return took, len(json.loads(out.read_text())["processes"])


def parts() -> dict[str, float]:
    from futextrace.kernel import model as kmodel
    from futextrace.loading.iterator import TaskIterator
    from futextrace.procs.hashrows import iterator_rows
    t0 = time.perf_counter()
    model = kmodel.load()
    t1 = time.perf_counter()
    with TaskIterator(model) as it:
        t2 = time.perf_counter()
        records = it.read()
        t3 = time.perf_counter()
        iterator_rows(records, [])
        t4 = time.perf_counter()
    return {"model": t1 - t0, "iterator load": t2 - t1, "iterator read": t3 - t2,
            "rows": t4 - t3, "records": len(records)}


def measure(label: str, runs: int, out: Path):
    cmd = [command_time(out) for _ in range(runs)]
    p = [parts() for _ in range(runs)]
    med = lambda xs: statistics.median(xs)  # noqa: E731
    print(f"{label}: {p[0]['records']} processes read, {cmd[0][1]} rows listed")
    print(f"  futextrace snapshot (whole command)  median {med([c[0] for c in cmd]):.3f} s"
          f"  (min {min(c[0] for c in cmd):.3f}, max {max(c[0] for c in cmd):.3f})")
    for key in ("model", "iterator load", "iterator read", "rows"):
        print(f"    {key:<16} median {med([x[key] for x in p]) * 1000:8.1f} ms")
    own = med([x["iterator load"] + x["iterator read"] + x["rows"] for x in p])
    print(f"    snapshot's own work (iterator load + read + rows) median {own * 1000:.1f} ms")
    return med([c[0] for c in cmd])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        exe = build(tmp)
        command_time(tmp / "warm.json")    # compiles the iterator once, into the cache
        base = measure("system only", args.runs, tmp / "s.json")
        t = time.perf_counter()
        helper = subprocess.Popen([str(exe), str(args.procs)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert helper.stdout.readline().strip() == "ready"
            print(f"started {args.procs} sleepers in {time.perf_counter() - t:.1f} s")
            loaded = measure(f"with {args.procs} sleepers", args.runs, tmp / "l.json")
        finally:
            helper.stdin.close()
            helper.wait()
    print(f"ratio with/without sleepers: {loaded / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
