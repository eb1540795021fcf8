#!/usr/bin/env python3
"""What call sites cost (bpf/call_sites.h): the BPF time of the futex hot
path with and without them, side by side, from the kernel's run statistics
(kernel.bpf_stats_enabled), which a busy machine disturbs far less than
throughput.

1. First lookups: tests/data/manyfutexes.c touches N distinct futexes (each
   new: one first-seen lookup and one stack) and about 3N more lookups.
   Two tracepoint-method programs are loaded, without (A) and with (B) call
   sites; each round runs the workload under each alone (the other's hook
   detached), order alternating. The extra ns per stack taken is B's BPF time
   minus A's, divided by the stacks B took in that run.
2. Bucket-lock waits: tests/host/lockpair.c (two futexes in one bucket) under
   A and B in turn: lock:contention_end's ns per run. A stack is taken for a
   futex's first CALL_SITE_WAITS waits per CPU only; every later wait pays
   one compare.

    sudo .venv/bin/python benchmarks/call_site_cost.py --rounds 6 --futexes 1000
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCKPAIR_BASE = 0x7E0000000000   # tests/host/lockpair.c maps its futexes here: both threads on one futex
sys.path.insert(0, str(REPO / "benchmarks"))
from futexset import bpf_stats, hot_path_detached  # noqa: E402


def build(cc: str, src: Path, out: Path) -> Path:
    subprocess.run([cc, "-O2", "-pthread", "-o", str(out), str(src)], check=True)
    return out


def stats(fds: list[int]) -> tuple[int, int]:
    from futextrace.loading.bpfsys import prog_stats
    s = [prog_stats(fd) for fd in fds]
    return sum(x.run_cnt for x in s), sum(x.run_time_ns for x in s)


def stacks_taken(prog) -> int:
    return len(prog.bpf["call_sites"]) if prog.call_sites else 0


def first_lookups(a, progs, exe: Path, tmp: Path) -> None:
    per_stack, per_run = [], {"A": [], "B": []}
    for i in range(a.rounds):
        delta = {}
        for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
            prog, other = progs[name], progs["B" if name == "A" else "A"]
            with hot_path_detached(other):
                s0, (c0, t0) = stacks_taken(prog), stats(prog.program_fds())
                subprocess.run([str(exe), str(tmp / "out.json"), str(a.futexes)], check=True)
                s1, (c1, t1) = stacks_taken(prog), stats(prog.program_fds())
            delta[name] = (t1 - t0, c1 - c0, s1 - s0)
            per_run[name].append((t1 - t0) / max(1, c1 - c0))
        (ta, _ca, _), (tb, _cb, sb) = delta["A"], delta["B"]
        if sb:
            per_stack.append((tb - ta) / sb)
    print(f"first lookups: manyfutexes {a.futexes:,} distinct futexes (~{4 * a.futexes:,} lookups) a run, "
          f"{a.rounds} rounds")
    for name, label in (("A", "without call sites"), ("B", "with call sites")):
        print(f"  {label:<20} BPF ns per program run: median {statistics.median(per_run[name]):7.1f}, "
              f"min {min(per_run[name]):7.1f}")
    if per_stack:
        print(f"  extra BPF ns per stack taken (B - A) / stacks: median {statistics.median(per_stack):,.0f} ns "
              f"(min {min(per_stack):,.0f}, max {max(per_stack):,.0f})")
    else:
        print("  B took no stacks (budget spent?)")


def lock_waits(a, progs, exe: Path) -> None:
    ns = {"A": [], "B": []}
    for i in range(a.rounds):
        for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
            prog, other = progs[name], progs["B" if name == "A" else "A"]
            # Both programs' contention hooks stay attached (each sees every wait);
            # the futex hot path is the one under test's.
            with hot_path_detached(other):
                c0, t0 = stats(prog.contention_fds)
                subprocess.run([str(exe), "0.5", hex(LOCKPAIR_BASE), hex(LOCKPAIR_BASE)], check=True, capture_output=True)
                c1, t1 = stats(prog.contention_fds)
            ns[name].append((t1 - t0) / max(1, c1 - c0))
    print(f"bucket-lock waits: lockpair 0.5 s a run, {a.rounds} rounds (contention_begin + _end ns per run)")
    for name, label in (("A", "without call sites"), ("B", "with call sites")):
        print(f"  {label:<20} median {statistics.median(ns[name]):7.1f} ns, min {min(ns[name]):7.1f} ns")
    print(f"  B - A: {statistics.median(ns['B']) - statistics.median(ns['A']):+.1f} ns per run "
          f"(a stack only for a futex's first 3 waits per CPU)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--futexes", type=int, default=1000,
                    help="distinct futexes a run (rounds x this must stay within a CPU's stack budget)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("call_site_cost.py: needs root")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        sys.exit("call_site_cost.py: no C compiler (scripts/bootstrap.sh installs gcc)")
    from futextrace.kernel import model as kmodel
    from futextrace.loading.callsites import call_site_macros
    from futextrace.loading.loader import Program
    from futextrace.kernel.topology import nr_cpu_ids
    budget = call_site_macros(True, nr_cpu_ids())["CALL_SITES_PER_CPU"]
    if a.rounds * (a.futexes + 16) > budget:
        sys.exit(f"call_site_cost.py: {a.rounds} x {a.futexes} futexes would pass a CPU's budget of {budget} stacks")
    model = kmodel.load()
    with tempfile.TemporaryDirectory() as d, bpf_stats(True):
        tmp = Path(d)
        many = build(cc, REPO / "tests/data/manyfutexes.c", tmp / "manyfutexes")
        pair = build(cc, REPO / "tests/host/lockpair.c", tmp / "lockpair")
        progs = {"A": Program(model, "tracepoint"), "B": Program(model, "tracepoint", call_sites=True)}
        try:
            first_lookups(a, progs, many, tmp)
            lock_waits(a, progs, pair)
        finally:
            for p in progs.values():
                p.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
