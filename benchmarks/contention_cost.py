#!/usr/bin/env python3
"""What the bucket-lock contention hooks (lock:contention_begin/end) cost.

Two measurements that do not depend on a quiet machine:

1. Uncontended: the built-in futexbench `-t 1` (one thread, no lock ever
   waited for) runs under futextrace; the contention programs' runs while it
   runs are counted (kernel.bpf_stats_enabled: run_cnt, run_time_ns, for the
   whole system, other processes' lock waits included) and the waits
   attributed to the workload's pid. The hooks sit on the lock slow path
   only, so an uncontended workload runs none of their instructions.
2. Contended: tests/host/lockpair.c (two futexes in one bucket of a 16-slot
   hash), rounds alternating with and without the hooks (FUTEXTRACE_NO_CONTENTION,
   the rest of futextrace attached in both): futex calls per second, and the
   programs' ns per run.

Also prints the run-to-run spread of each side, which is what "measurable" means here.

    sudo .venv/bin/python benchmarks/contention_cost.py --rounds 5
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASE = 0x7E0000000000


def _stats(program) -> tuple[int, int]:
    from futextrace.loading.bpfsys import prog_stats
    runs = ns = 0
    for fd in program.contention_fds:
        s = prog_stats(fd)
        runs, ns = runs + s.run_cnt, ns + s.run_time_ns
    return runs, ns


def _record(argv, contention: bool, model, env=None):
    """Run argv under a Recorder; (stdout, bucket-lock waits of its process, contention
    programs' (runs, ns) during it, system-wide)."""
    from futextrace.record.recorder import Recorder, RecordOptions
    os.environ.pop("FUTEXTRACE_NO_CONTENTION", None)
    if not contention:
        os.environ["FUTEXTRACE_NO_CONTENTION"] = "1"
    rec = Recorder(RecordOptions(method="tracepoint", announce=False), model)
    rec.start()
    os.environ.pop("FUTEXTRACE_NO_CONTENTION", None)
    try:
        before = _stats(rec.session.program)
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
        out = {}
        t = threading.Thread(target=lambda: out.update(stdout=p.communicate()[0]))
        t.start()
        rec.run(until=lambda: not t.is_alive())
        t.join()
        after = _stats(rec.session.program)
        waits = [x for x in rec.recording(1.0)["contention"]["processes"] if x["pid"] == p.pid]
        return out["stdout"], sum(x["waits"] for x in waits), (after[0] - before[0], after[1] - before[1])
    finally:
        rec.close()


def uncontended(model, runtime: str) -> None:
    from futextrace.workload.build import workload_path
    argv = [str(workload_path()), "-t", "1", "-r", runtime]
    out, waits, (runs, ns) = _record(argv, True, model)
    ops = json.loads(out)["avg_ops_per_sec"]
    print(f"uncontended: futexbench -t 1 -r {runtime}: {ops:,.0f} ops/s; bucket-lock waits attributed to it: "
          f"{waits}; contention programs ran {runs:,} times system-wide meanwhile "
          f"({ns / max(runs, 1):,.0f} ns per run, other processes' lock waits)")


def contended(model, rounds: int, seconds: str) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    exe = Path(tempfile.mkdtemp()) / "lockpair"
    subprocess.run([cc, "-O2", "-pthread", "-o", str(exe), str(REPO / "tests/host/lockpair.c")], check=True)
    sys.path.insert(0, str(REPO))
    from tests.helpers.fidelity_ref import private_bucket
    a = BASE + 64
    b = next(BASE + 64 * i for i in range(2, 1000) if private_bucket(BASE + 64 * i, 15) == private_bucket(a, 15))
    argv = [str(exe), seconds, hex(a), hex(b)]
    calls = {True: [], False: []}
    per_run = []
    for i in range(rounds):
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            out, w, (runs, ns) = _record(argv, on, model, env={"LOCKPAIR_RT": "1"})
            n = int(out.split("done")[1].split()[0]) / float(seconds)
            calls[on].append(n)
            if on:
                per_run.append(ns / max(runs, 1))
                print(f"# round {i + 1} hooks on:  {n:,.0f} futex calls/s, {w:,} waits, "
                      f"{ns / max(runs, 1):,.0f} ns per program run", flush=True)
            else:
                print(f"# round {i + 1} hooks off: {n:,.0f} futex calls/s", flush=True)
    ratios = [x / y for x, y in zip(calls[True], calls[False])]
    print(f"contended (two futexes, one bucket, SCHED_FIFO bursts): on/off futex calls per second, "
          f"median {statistics.median(ratios):.3f} (range {min(ratios):.3f}..{max(ratios):.3f}); "
          f"hooks on {statistics.median(calls[True]):,.0f}/s, off {statistics.median(calls[False]):,.0f}/s; "
          f"{statistics.median(per_run):,.0f} ns per program run (median)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runtime", default="2", help="seconds per run")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("contention_cost.py: needs root")
    # BPF_ENABLE_STATS (cmd 32, BPF_STATS_RUN_TIME): run_cnt/run_time_ns counted while the fd is
    # open, and off again after (the sysctl is shared with whoever else turned it on).
    from futextrace.loading.bpfsys import bpf
    stats_fd = bpf(32, bytearray(8))
    from futextrace.kernel import modelcache
    model, _ = modelcache.load_running()
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    uncontended(model, a.runtime)
    contended(model, a.rounds, a.runtime)
    print(f"# load average {os.getloadavg()[0]:.2f} at end")
    os.close(stats_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
