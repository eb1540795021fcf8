#!/usr/bin/env python3
"""How much futex throughput survives tracing? Retained-throughput ratios.

Each round runs every condition once, back to back (order rotated per round),
and divides each traced run's ops/s by that round's untraced run; the figure
printed is the median over --pairs rounds. Side by side like this, a noisy
machine shifts both halves of a pair alike.

Conditions:
  untraced     the workload alone
  raw-empty    an empty BPF program on raw_tracepoint:sys_enter (every syscall)
  btf-empty    an empty BPF program on tp_btf:sys_enter, the hook futextrace uses
  tp-empty     an empty BPF program on tracepoint syscalls:sys_enter_futex
  bcc-count    a BCC per-CPU counter on syscalls:sys_enter_futex (issue 3's reference)
  bpftrace     `@[cpu] = count()` on tracepoint:syscalls:sys_enter_futex, when
               bpftrace is installed (issue 3's reference)
  futextrace   futextrace's tracepoint method, whole system, ring buffer drained
               (Recorder API directly: no CLI start-up in the numbers)
  futextrace-comm-bpf   the same with --comm WORKLOAD, the name compared in BPF
               (bpf_get_current_comm and a 16-byte-key lookup on every syscall)
  futextrace-comm-tgid  the same with --comm WORKLOAD resolved to tgids by the
               proc connector (one tgid lookup per syscall)
  futextrace-no-lock    futextrace without the bucket-lock contention hooks
               (FUTEXTRACE_NO_CONTENTION): futextrace / futextrace-no-lock is what
               lock:contention_begin/end cost the workload
Workloads: the built-in futexbench `-t 1 -r 2`, and `perf bench futex hash -t 1 -r 2 -s`
when perf is installed. BPF programs are compiled and attached before the
workload starts and detached after it ends: only the workload's run is timed.

    sudo .venv/bin/python benchmarks/overhead.py --pairs 8
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

CONDITIONS = ["untraced", "raw-empty", "btf-empty", "tp-empty", "bcc-count", "futextrace",
              "futextrace-comm-bpf", "futextrace-comm-tgid", "futextrace-no-lock"]
if shutil.which("bpftrace"):
    CONDITIONS.insert(CONDITIONS.index("futextrace"), "bpftrace")
EMPTY = {"raw-empty": "RAW_TRACEPOINT_PROBE(sys_enter) { return 0; }",
         "btf-empty": "int ft_btf_sys_enter(u64 *ctx) { return 0; }",
         "tp-empty": "TRACEPOINT_PROBE(syscalls, sys_enter_futex) { return 0; }",
         "bcc-count": "BPF_PERCPU_ARRAY(n, u64, 1);\n"
                      "TRACEPOINT_PROBE(syscalls, sys_enter_futex) "
                      "{ u32 k = 0; u64 *v = n.lookup(&k); if (v) (*v)++; return 0; }"}
BPFTRACE = "tracepoint:syscalls:sys_enter_futex { @[cpu] = count(); }"


def workloads(runtime: str) -> dict[str, tuple[list[str], callable]]:
    from futextrace.workload.build import workload_path
    out = {"futexbench": ([str(workload_path()), "-t", "1", "-r", runtime],
                          lambda o: float(json.loads(o)["avg_ops_per_sec"]))}
    if shutil.which("perf"):
        def perf_ops(o):
            m = re.search(r"Averaged (\d+) operations/sec", o)
            if not m:
                raise RuntimeError(f"perf printed no result: {o[-300:]!r}")
            return float(m[1])
        # perf takes whole seconds only.
        secs = str(max(1, round(float(runtime))))
        out["perf-hash"] = (["perf", "bench", "futex", "hash", "-t", "1", "-r", secs, "-s"], perf_ops)
    return out


def run_workload(argv, parse) -> float:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return parse(r.stdout + r.stderr)


def run_under_bpftrace(argv, parse) -> float:
    bt = subprocess.Popen(["bpftrace", "-e", BPFTRACE], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    try:
        line = bt.stdout.readline()          # "Attaching 1 probe...", printed as it attaches
        if not line.startswith("Attaching"):
            raise RuntimeError(f"bpftrace did not attach: {line!r}")
        time.sleep(1)
        return run_workload(argv, parse)
    finally:
        bt.send_signal(signal.SIGINT)        # prints its map and detaches
        bt.communicate(timeout=30)


def run_traced(cond: str, argv, parse, model) -> float:
    if cond == "untraced":
        return run_workload(argv, parse)
    if cond == "bpftrace":
        return run_under_bpftrace(argv, parse)
    if cond in EMPTY:
        from futextrace.kernel.headers import bcc_environment
        bcc_environment()
        from bcc import BPF
        b = BPF(text=EMPTY[cond])      # auto-attached at load, except tp_btf
        links = []
        try:
            if cond == "btf-empty":
                from futextrace.loading import tpbtf
                links.extend(tpbtf.attach(b, "ft_btf_sys_enter", model.tp_btf_ids["sys_enter"]))
            return run_workload(argv, parse)
        finally:
            for fd in links:
                os.close(fd)
            b.cleanup()
    from futextrace.record.recorder import Recorder, RecordOptions
    comms = [os.path.basename(argv[0])[:15]] if cond.startswith("futextrace-comm") else []
    os.environ.pop("FUTEXTRACE_NO_CONTENTION", None)
    if cond == "futextrace-no-lock":
        os.environ["FUTEXTRACE_NO_CONTENTION"] = "1"
    rec = Recorder(RecordOptions(method="tracepoint", announce=False,
                                 comms=comms, comm_in_bpf=cond == "futextrace-comm-bpf"), model)
    rec.start()
    os.environ.pop("FUTEXTRACE_NO_CONTENTION", None)
    try:
        result = {}
        t = threading.Thread(target=lambda: result.update(ops=run_workload(argv, parse)))
        t.start()
        rec.run(until=lambda: not t.is_alive())   # drains the ring buffer like `record` does
        t.join()
        return result["ops"]
    finally:
        rec.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=5, help="rounds (each runs every condition once)")
    ap.add_argument("--runtime", default="2", help="workload seconds per run")
    ap.add_argument("--conditions", default=",".join(CONDITIONS),
                    help="comma-separated subset of the conditions (untraced is always run)")
    a = ap.parse_args()
    wanted = ["untraced"] + [c for c in a.conditions.split(",") if c in CONDITIONS and c != "untraced"]
    CONDITIONS[:] = wanted
    if os.geteuid() != 0:
        sys.exit("overhead.py: needs root")
    from futextrace.kernel import model as kmodel
    model = kmodel.load()
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; "
          f"{a.pairs} rounds, conditions in rotated order", flush=True)
    for name, (argv, parse) in workloads(a.runtime).items():
        ops = {c: [] for c in CONDITIONS}
        for i in range(a.pairs):
            order = CONDITIONS[i % len(CONDITIONS):] + CONDITIONS[:i % len(CONDITIONS)]
            for c in order:
                ops[c].append(run_traced(c, argv, parse, model))
            print(f"# {name} round {i + 1}: " + ", ".join(f"{c} {ops[c][-1]:,.0f}" for c in CONDITIONS),
                  flush=True)
        print(f"\n{name}: {' '.join(argv)}")
        print(f"  {'condition':<11} {'median ops/s':>13} {'retained (median of per-round ratios)':>38}")
        for c in CONDITIONS:
            ratios = [x / u for x, u in zip(ops[c], ops["untraced"])]
            print(f"  {c:<11} {statistics.median(ops[c]):>13,.0f} {statistics.median(ratios):>37.1%}"
                  f"   (range {min(ratios):.1%}..{max(ratios):.1%})")
        if "futextrace" in ops and "futextrace-no-lock" in ops:
            r = [x / y for x, y in zip(ops["futextrace"], ops["futextrace-no-lock"])]
            print(f"  lock contention hooks: futextrace / futextrace-no-lock median {statistics.median(r):.3f}"
                  f" (range {min(r):.3f}..{max(r):.3f})")
        print(flush=True)
    print(f"# load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
