#!/usr/bin/env python3
"""What the fentry method costs against the kprobe method, in one guest run.

Needs a kernel where both load (6.17-7.1 with kprobes and BPF trampolines: a
Debian 6.18 guest; the build machines refuse fentry and have no kprobes), so
it runs in a VM guest (tests/vm/guestrun.py). Three figures, side by side:

1. Retained throughput of the built-in futexbench (`-t 1 -r RUNTIME`): each
   round runs every condition once, back to back, order rotated per round, and
   divides each traced run's ops/s by that round's untraced run (median over
   --pairs rounds). Conditions: untraced; empty kprobe+kretprobe on futex_hash
   (the kprobe method's hook); an empty fexit on futex_hash (the fentry
   method's); futextrace's kprobe, fentry and tracepoint methods.
2. Per-run program time from the kernel's own BPF statistics
   (kernel.bpf_stats_enabled=1: run_time_ns / run_cnt of each program) for
   futextrace's kprobe and fentry methods, per lookup: the programs on
   futex_hash summed. This is the program alone: neither the trap nor the
   trampoline that calls it is inside it.
3. The tax on a syscall that is not a futex call: ns per getppid() in a C loop,
   untraced and under each futextrace method.

Under QEMU/TCG absolute times are tens of times those of real hardware and an
int3 trap is emulated in software: only ratios within this run mean anything.

    sudo .venv/bin/python tests/vm/guestrun.py 6.18 -- .venv/bin/python benchmarks/fentry_cost.py --pairs 3
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import struct
import subprocess
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from getppid_loop import build_getppid, getppid_ns  # noqa: E402

CONDITIONS = ["untraced", "kprobe-empty", "fexit-empty", "futextrace-kprobe", "futextrace-fentry",
              "futextrace-tracepoint"]
EMPTY = ("int on_entry(struct pt_regs *ctx) { return 0; }\n"
         "int on_return(struct pt_regs *ctx) { return 0; }\n"
         "int on_fexit(u64 *ctx) { return 0; }\n")
STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")
HOT = {"kprobe": ("kp_futex_hash", "kr_futex_hash"), "fentry": ("fx_futex_hash",)}


def run_workload(argv: list[str]) -> float:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return float(json.loads(r.stdout)["avg_ops_per_sec"])


def prog_name_and_stats(fd: int) -> tuple[str, int, int]:
    """(name, run_time_ns, run_cnt) from bpf_prog_info (name at offset 64)."""
    from futextrace.loading.bpfsys import BPF_OBJ_GET_INFO_BY_FD, bpf
    info = ctypes.create_string_buffer(216)
    bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("<IIQ", fd, 216, ctypes.addressof(info)))
    name = info.raw[64:80].split(b"\0")[0].decode()
    run_ns, run_cnt = struct.unpack_from("<QQ", info.raw, 192)
    return name, run_ns, run_cnt


def hot_stats(program, method: str) -> tuple[int, int]:
    """(run_time_ns summed over the futex_hash programs, lookups = fexit or kretprobe runs)."""
    total_ns, lookups = 0, 0
    for fd in program.program_fds():
        name, ns, cnt = prog_name_and_stats(fd)
        if name in HOT[method]:
            total_ns += ns
            if name != "kp_futex_hash":
                lookups += cnt
    return total_ns, lookups


def run_futextrace(method: str, argv: list[str], model, stats: dict, ppid: tuple | None) -> float:
    from futextrace.record.recorder import Recorder, RecordOptions
    rec = Recorder(RecordOptions(method=method, announce=False), model)
    rec.start()
    try:
        if rec.session.method != method:
            raise RuntimeError(f"asked for {method}, got {rec.session.method}: {rec.session.why}")
        if ppid:
            stats.setdefault(f"getppid-{method}", []).append(getppid_ns(*ppid))
        result = {}
        before = hot_stats(rec.session.program, method) if method in HOT else (0, 0)
        t = threading.Thread(target=lambda: result.update(ops=run_workload(argv)))
        t.start()
        rec.run(until=lambda: not t.is_alive())   # drains the ring buffer like `record` does
        t.join()
        if method in HOT:
            after = hot_stats(rec.session.program, method)
            ns, n = after[0] - before[0], after[1] - before[1]
            if n:
                stats.setdefault(f"ns-{method}", []).append(ns / n)
        return result["ops"]
    finally:
        rec.close()


def run_empty(bpf, cond: str, argv: list[str], model) -> float:
    if cond == "kprobe-empty":
        bpf.attach_kprobe(event="futex_hash", fn_name="on_entry")
        bpf.attach_kretprobe(event="futex_hash", fn_name="on_return", maxactive=64)
        try:
            return run_workload(argv)
        finally:
            bpf.detach_kprobe(event="futex_hash")
            bpf.detach_kretprobe(event="futex_hash")
    from futextrace.loading import fentry
    links = [fentry.load_attach(bpf, "on_fexit", fentry.BPF_TRACE_FEXIT, model.func_btf_ids["futex_hash"])]
    try:
        return run_workload(argv)
    finally:
        fentry.close(links)


def report(argv: list[str], ops: dict[str, list[float]], stats: dict) -> None:
    print(f"\nfutexbench: {' '.join(argv)}")
    print(f"  {'condition':<22} {'median ops/s':>13} {'retained (median of per-round ratios)':>38}")
    for c in CONDITIONS:
        ratios = [x / u for x, u in zip(ops[c], ops["untraced"])]
        print(f"  {c:<22} {statistics.median(ops[c]):>13,.0f} {statistics.median(ratios):>37.1%}"
              f"   (range {min(ratios):.1%}..{max(ratios):.1%})")
    fk = [f / k for f, k in zip(ops["futextrace-fentry"], ops["futextrace-kprobe"])]
    ek = [f / k for f, k in zip(ops["fexit-empty"], ops["kprobe-empty"])]
    print(f"  fentry/kprobe throughput, futextrace: median {statistics.median(fk):.3f} "
          f"(range {min(fk):.3f}..{max(fk):.3f}); empty hooks: median {statistics.median(ek):.3f} "
          f"(range {min(ek):.3f}..{max(ek):.3f})")
    for m in HOT:
        v = stats.get(f"ns-{m}", [])
        if v:
            print(f"  bpf_stats, futextrace-{m}: {statistics.median(v):,.0f} ns of program per lookup "
                  f"(median of {len(v)}; range {min(v):,.0f}..{max(v):,.0f}; programs {'+'.join(HOT[m])})")
    for key in ("getppid-untraced", "getppid-kprobe", "getppid-fentry", "getppid-tracepoint"):
        v = stats.get(key, [])
        if v:
            print(f"  {key:<20} {statistics.median(v):8,.0f} ns per call (median of {len(v)}; "
                  f"range {min(v):,.0f}..{max(v):,.0f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3, help="rounds (each runs every condition once)")
    ap.add_argument("--runtime", default="2", help="workload seconds per run")
    ap.add_argument("--getppid", type=int, default=200000, help="getppid() calls per tax measurement")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("fentry_cost.py: needs root")
    from futextrace.kernel.modelcache import load_running
    from futextrace.kernel.headers import bcc_environment
    from futextrace.loading import fentry
    from futextrace.workload.build import workload_path
    model, _ = load_running()
    if not os.path.isdir("/sys/bus/event_source/devices/kprobe") or fentry.refusal(model):
        sys.exit(f"fentry_cost.py: needs kprobes and fentry (fentry: {fentry.refusal(model) or 'ok'}); run it "
                 "in a 6.17-7.1 VM guest (python tests/vm/guestrun.py 6.18 -- ...)")
    bcc_environment()
    from bcc import BPF
    bpf = BPF(text=EMPTY)
    argv = [str(workload_path()), "-t", "1", "-r", a.runtime]
    ppid = (build_getppid(), a.getppid)
    stats_was = STATS_SYSCTL.read_text().strip()
    STATS_SYSCTL.write_text("1")
    print(f"# kernel {os.uname().release}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f} at start; {a.pairs} rounds, conditions in rotated order; "
          "kernel.bpf_stats_enabled=1 throughout", flush=True)
    ops = {c: [] for c in CONDITIONS}
    stats: dict[str, list[float]] = {}
    try:
        for i in range(a.pairs):
            order = CONDITIONS[i % len(CONDITIONS):] + CONDITIONS[:i % len(CONDITIONS)]
            for c in order:
                if c == "untraced":
                    stats.setdefault("getppid-untraced", []).append(getppid_ns(*ppid))
                    ops[c].append(run_workload(argv))
                elif c.endswith("-empty"):
                    ops[c].append(run_empty(bpf, c, argv, model))
                else:
                    ops[c].append(run_futextrace(c.split("-", 1)[1], argv, model, stats, ppid))
            print(f"# round {i + 1}: " + ", ".join(f"{c} {ops[c][-1]:,.0f}" for c in CONDITIONS), flush=True)
    finally:
        STATS_SYSCTL.write_text(stats_was)
        bpf.cleanup()
    report(argv, ops, stats)
    print(f"# load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
