#!/usr/bin/env python3
"""Retained futex throughput under the kprobe method, against empty kprobes.

Needs a kernel with kprobes: the build machines have none, so this runs in a VM
guest (tests/vm/guestrun.py boots one and runs a command in it). Each round runs
every condition once, back to back (order rotated per round), and divides each
traced run's ops/s by that round's untraced run; the figure printed is the
median over --pairs rounds. Under QEMU/TCG absolute ops/s are tens of times
below real hardware: only the ratios mean something.

Conditions:
  untraced             the workload alone
  kprobe-empty         an empty BPF program on a kprobe at futex_hash's entry
  kretprobe-empty      an empty BPF program on a kretprobe on futex_hash
  futextrace-kprobe    futextrace's kprobe method (futex_hash kretprobe, refcount
                       and resize probes), whole system, ring buffer drained
  futextrace-tracepoint  futextrace's tracepoint method, for comparison
Workload: the built-in futexbench `-t 1 -r RUNTIME`. The empty programs are
compiled once and attached per run; futextrace's recorder compiles per run
(before the workload starts: only the workload's run is timed).

    python tests/vm/guestrun.py 7.3 -- .venv/bin/python benchmarks/kprobe_overhead.py --pairs 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading

CONDITIONS = ["untraced", "kprobe-empty", "kretprobe-empty", "futextrace-kprobe", "futextrace-tracepoint"]
EMPTY = "int on_entry(struct pt_regs *ctx) { return 0; }\nint on_return(struct pt_regs *ctx) { return 0; }\n"


def run_workload(argv: list[str]) -> float:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return float(json.loads(r.stdout)["avg_ops_per_sec"])


def run_empty(bpf, cond: str, argv: list[str]) -> float:
    if cond == "kprobe-empty":
        bpf.attach_kprobe(event="futex_hash", fn_name="on_entry")
    else:
        bpf.attach_kretprobe(event="futex_hash", fn_name="on_return", maxactive=64)
    try:
        return run_workload(argv)
    finally:
        if cond == "kprobe-empty":
            bpf.detach_kprobe(event="futex_hash")
        else:
            bpf.detach_kretprobe(event="futex_hash")


def run_futextrace(method: str, argv: list[str], model) -> float:
    from futextrace.record.recorder import Recorder, RecordOptions
    rec = Recorder(RecordOptions(method=method, announce=False), model)
    rec.start()
    try:
        result = {}
        t = threading.Thread(target=lambda: result.update(ops=run_workload(argv)))
        t.start()
        rec.run(until=lambda: not t.is_alive())   # drains the ring buffer like `record` does
        t.join()
        return result["ops"]
    finally:
        rec.close()


def run_condition(cond: str, argv: list[str], bpf, model) -> float:
    if cond == "untraced":
        return run_workload(argv)
    if cond.endswith("-empty"):
        return run_empty(bpf, cond, argv)
    return run_futextrace(cond.split("-", 1)[1], argv, model)


def report(argv: list[str], ops: dict[str, list[float]]) -> None:
    print(f"\nfutexbench: {' '.join(argv)}")
    print(f"  {'condition':<22} {'median ops/s':>13} {'retained (median of per-round ratios)':>38}")
    for c in CONDITIONS:
        ratios = [x / u for x, u in zip(ops[c], ops["untraced"])]
        print(f"  {c:<22} {statistics.median(ops[c]):>13,.0f} {statistics.median(ratios):>37.1%}"
              f"   (range {min(ratios):.1%}..{max(ratios):.1%})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3, help="rounds (each runs every condition once)")
    ap.add_argument("--runtime", default="2", help="workload seconds per run")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("kprobe_overhead.py: needs root")
    if not os.path.isdir("/sys/bus/event_source/devices/kprobe"):
        sys.exit("kprobe_overhead.py: this kernel has no kprobes: run it in a VM guest "
                 "(python tests/vm/guestrun.py SERIES -- ...)")
    from futextrace.kernel import model as kmodel
    from futextrace.kernel.headers import bcc_environment
    from futextrace.workload.build import workload_path
    model = kmodel.load()
    bcc_environment()
    from bcc import BPF
    bpf = BPF(text=EMPTY)
    argv = [str(workload_path()), "-t", "1", "-r", a.runtime]
    print(f"# kernel {os.uname().release}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f} at start; {a.pairs} rounds, conditions in rotated order", flush=True)
    ops = {c: [] for c in CONDITIONS}
    for i in range(a.pairs):
        order = CONDITIONS[i % len(CONDITIONS):] + CONDITIONS[:i % len(CONDITIONS)]
        for c in order:
            ops[c].append(run_condition(c, argv, bpf, model))
        print(f"# round {i + 1}: " + ", ".join(f"{c} {ops[c][-1]:,.0f}" for c in CONDITIONS), flush=True)
    bpf.cleanup()
    report(argv, ops)
    print(f"# load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
