#!/usr/bin/env python3
"""Does tracing cost more per futex call as the set of distinct futexes grows?

Workload: the built-in futexbench, one thread, `-f N` distinct private futexes
(FUTEX_WAIT with a value that never matches: one hash lookup per call).

futextrace (tracepoint method, whole system) is loaded once; its futex hook is
detached and attached again while a workload runs (maps kept). Each round
starts one workload process per size and, while it runs, gives three
conditions turns of `--slot` seconds each (a rotating order, `--cycles` turns):

  untraced    no BPF program on sys_enter
  bare hook   a BPF program on the same tp_btf sys_enter hook that returns at
              once: what any sys_enter tracer pays, whatever it does
  futextrace  the real thing

The workload's own samples of its op count (futexbench --interval-ms, every
5 ms) give the ops in each turn's window, so each turn's ratios compare runs a
fraction of a second apart in one process: a machine that gets busier or
quieter between runs (a shared VM does, by ±5% within seconds) no longer
decides the figure. Sizes are interleaved within each round, and the rounds
(separate processes, so separate placements in memory) are what the spread
mostly comes from. The table prints, per size, the median of the per-turn
ratios to the untraced window (with the interquartile range) for the bare hook
and for futextrace, and their ratio (what futextrace's own work costs). BPF run
statistics are off during these runs (they cost time per run); one more traced
run per size with a fresh recorder and statistics on gives the BPF ns per run,
the lookups the tracer could not attribute to a bucket ("map full") and the
workload's distinct futexes as counted (exact while the per-futex list has
room, else an estimate from the first-seen filter; futexbench -t 1 -f N has
N futexes).

    sudo .venv/bin/python benchmarks/futexset.py
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from getppid_loop import build_getppid, getppid_ns  # noqa: E402

SIZES = [16, 4096, 16384, 262144, 1048576]
CONDITIONS = ("untraced", "bare", "futextrace")
WARMUP = 0.6          # seconds before the first turn: a million futexes' first pass faults pages in
SETTLE = 0.02         # seconds after a switch before a turn's window opens
SAMPLE_MS = 5         # futexbench --interval-ms
BPF_STATS = "/proc/sys/kernel/bpf_stats_enabled"
BARE_HOOK = "int ft_bare_sys_enter(u64 *ctx) { return 0; }"
GETPPID_CALLS = 500_000    # getppid() calls per tax run (getppid_loop.py)


def run_workload(nfutexes: int, runtime: str) -> dict:
    from futextrace.workload.build import workload_path
    argv = [str(workload_path()), "-t", "1", "-f", str(nfutexes), "-r", runtime]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"futexbench exited {p.returncode}: {p.stderr.strip()[-300:]}")
    return json.loads(p.stdout)


class BareHook:
    """A tp_btf sys_enter program that does nothing, attached on demand."""

    def __init__(self, btf_id: int):
        from futextrace.kernel.headers import bcc_environment
        from futextrace.loading import tpbtf
        bcc_environment()      # BCC's header path, before it compiles anything
        from bcc import BPF
        self._bpf = BPF(text=BARE_HOOK)
        self._prog = tpbtf.load(self._bpf, "ft_bare_sys_enter", btf_id)

    @contextlib.contextmanager
    def attached(self):
        from futextrace.loading import tpbtf
        link = tpbtf.attach_loaded(self._prog)
        try:
            yield
        finally:
            os.close(link)

    def close(self):
        os.close(self._prog)
        self._bpf.cleanup()


@contextlib.contextmanager
def hot_path_detached(program):
    """The futex hot path (the tracepoint method's tp_btf sys_enter hook)
    detached for the `with` block and attached again after, every map and
    count kept: untraced and traced runs alternate with one loaded program."""
    if program.method != "tracepoint" or not program.detach_counting_hook():
        raise SystemExit("futexset.py: only the tracepoint method's tp_btf hook can be detached and reattached")
    try:
        yield
    finally:
        program.reattach_counting_hook()


def switch_to(cond: str, program, bare: BareHook, stack: contextlib.ExitStack) -> None:
    """Hooks as `cond` wants them, for as long as `stack` is open."""
    if cond != "futextrace":
        stack.enter_context(hot_path_detached(program))
    if cond == "bare":
        stack.enter_context(bare.attached())


def rate(samples: list[tuple[int, int]], t0: int, t1: int) -> float:
    """Ops per second between CLOCK_MONOTONIC ns t0 and t1, from the
    workload's cumulative (ns, ops) samples, linearly interpolated."""
    def ops_at(t):
        for (ta, oa), (tb, ob) in zip(samples, samples[1:]):
            if ta <= t <= tb:
                return oa + (ob - oa) * (t - ta) / (tb - ta)
        raise ValueError("window outside the workload's samples")
    return (ops_at(t1) - ops_at(t0)) * 1e9 / (t1 - t0)


def one_round(i: int, sizes: list[int], cycles: int, slot: float, program, bare: BareHook,
              results: dict) -> None:
    """Every size once, in an order reversed every other round. Per size one
    workload process runs throughout while the three conditions take turns,
    `slot` seconds each (rotating order, `cycles` turns), so that each turn's
    ratios compare runs a fraction of a second apart on the same process."""
    from futextrace.workload.build import workload_path
    for n in (sizes if i % 2 == 0 else sizes[::-1]):
        runtime = WARMUP + cycles * len(CONDITIONS) * (slot + SETTLE + 0.05) + 0.5   # 0.05: a switch
        wl = subprocess.Popen([str(workload_path()), "-t", "1", "-f", str(n), "-r", f"{runtime:.2f}",
                               "--interval-ms", str(SAMPLE_MS)], stdout=subprocess.PIPE, text=True)
        windows = []
        try:
            time.sleep(WARMUP)         # the first pass faults the futex pages in
            for c in range(cycles):
                order = CONDITIONS[(i + c) % 3:] + CONDITIONS[:(i + c) % 3]
                for cond in order:
                    with contextlib.ExitStack() as stack:
                        switch_to(cond, program, bare, stack)
                        time.sleep(SETTLE)
                        t0 = time.monotonic_ns()
                        time.sleep(slot)
                        windows.append((c, cond, t0, time.monotonic_ns()))
        finally:
            out, _ = wl.communicate()
        if wl.returncode != 0:
            raise RuntimeError(f"futexbench exited {wl.returncode}")
        samples = [(x["mono_ns"], x["ops"]) for x in json.loads(out)["samples"]]
        per_cycle: dict[int, dict[str, float]] = {}
        for c, cond, t0, t1 in windows:
            try:
                per_cycle.setdefault(c, {})[cond] = rate(samples, t0, t1)
            except ValueError:     # switching took longer than planned: the workload had ended
                print(f"# round {i + 1} {n} futexes: turn {c + 1} left out (after the workload's end)")
        complete = [ops for _, ops in sorted(per_cycle.items()) if len(ops) == len(CONDITIONS)]
        if not complete:
            raise RuntimeError(f"no complete turn for {n} futexes: switching outran the workload")
        for ops in complete:
            results[n].append({"untraced": ops["untraced"], "bare": ops["bare"] / ops["untraced"],
                               "futextrace": ops["futextrace"] / ops["untraced"]})
        last = results[n][-len(complete):]
        print(f"# round {i + 1} {n} futexes: untraced {statistics.median(r['untraced'] for r in last):,.0f} ops/s, "
              f"retained (median of {cycles} turns): bare hook {statistics.median(r['bare'] for r in last):.3f}, "
              f"futextrace {statistics.median(r['futextrace'] for r in last):.3f}", flush=True)


def measure_tax(rounds: int, program, bare: BareHook, tax: dict) -> None:
    """ns per getppid() under each condition, the conditions back to back in a
    rotating order each round: what a non-futex syscall pays."""
    exe = build_getppid()
    for i in range(rounds):
        for cond in CONDITIONS[i % 3:] + CONDITIONS[:i % 3]:
            with contextlib.ExitStack() as stack:
                switch_to(cond, program, bare, stack)
                tax[cond].append(getppid_ns(exe, GETPPID_CALLS))


def measure_throughput(sizes: list[int], rounds: int, cycles: int, slot: float, model,
                       tax: dict | None = None, tax_rounds: int = 0) -> dict:
    from futextrace.record.recorder import Recorder, RecordOptions
    from futextrace.loading.loader import sys_enter_btf_id
    btf_id = sys_enter_btf_id(model)
    if btf_id is None:
        sys.exit("futexset.py: needs the tp_btf sys_enter hook (this kernel or FUTEXTRACE_NO_TP_BTF refuses it)")
    bare = BareHook(btf_id)
    rec = Recorder(RecordOptions(method="tracepoint", announce=False), model)
    rec.start()
    results = {n: [] for n in sizes}
    failure = []

    def work():
        try:
            for i in range(rounds):
                one_round(i, sizes, cycles, slot, rec.session.program, bare, results)
            if tax is not None:
                measure_tax(tax_rounds, rec.session.program, bare, tax)
        except BaseException as e:    # reported by the main thread
            failure.append(e)
    try:
        t = threading.Thread(target=work)
        t.start()
        rec.run(until=lambda: not t.is_alive())   # the recorder keeps draining its ring buffer
        t.join()
    finally:
        rec.close()
        bare.close()
    if failure:
        raise failure[0]
    return results


def measure_detail(n: int, runtime: str, model) -> dict:
    """One traced run with a fresh recorder and BPF statistics on."""
    from futextrace.loading.bpfsys import prog_stats
    from futextrace.record.recorder import Recorder, RecordOptions
    rec = Recorder(RecordOptions(method="tracepoint", announce=False), model)
    rec.start()
    try:
        out = {}
        t = threading.Thread(target=lambda: out.update(run_workload(n, runtime)))
        t.start()
        duration = rec.run(until=lambda: not t.is_alive())
        t.join()
        stats = [prog_stats(fd) for fd in rec.session.program.program_fds()]
        runs = sum(s.run_cnt for s in stats)
        recording = rec.recording(duration)
        mine = [p for p in recording["processes"] if p["pid"] == out["pid"]]
        return {"bpf_ns": sum(s.run_time_ns for s in stats) / runs if runs else 0.0,
                "unattributed": recording["totals"]["unattributed"],
                "distinct": sum(h["distinct_futexes"] for p in mine for h in p["hashes"]),
                "exact": not any("estimates" in h for p in mine for h in p["hashes"])}
    finally:
        rec.close()


@contextlib.contextmanager
def bpf_stats(on: bool):
    with open(BPF_STATS) as f:
        before = f.read().strip()
    with open(BPF_STATS, "w") as f:
        f.write("1" if on else "0")
    try:
        yield
    finally:
        with open(BPF_STATS, "w") as f:
            f.write(before)


def quartiles(xs: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return q[0], q[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=12, help="rounds: one workload process per size each")
    ap.add_argument("--cycles", type=int, default=5, help="turns of the three conditions per round")
    ap.add_argument("--slot", type=float, default=0.1, help="seconds per condition per turn")
    ap.add_argument("--runtime", default="0.5", help="seconds of the statistics run per size")
    ap.add_argument("--tax-rounds", type=int, default=9, help="rounds of the getppid() tax measurement")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated futex set sizes")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("futexset.py: needs root")
    sizes = [int(s) for s in a.sizes.split(",")]
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; futexbench -t 1, "
          f"{a.rounds} rounds of {a.cycles} turns, {a.slot} s per condition", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # `finally` blocks restore the settings
    from futextrace.kernel import model as kmodel
    model = kmodel.load()
    with bpf_stats(False):
        tax = {c: [] for c in CONDITIONS}
        results = measure_throughput(sizes, a.rounds, a.cycles, a.slot, model, tax, a.tax_rounds)
    with bpf_stats(True):
        detail = {n: measure_detail(n, a.runtime, model) for n in sizes}
    print_table(sizes, results, detail)
    print_tax(tax)
    print(f"# load average {os.getloadavg()[0]:.2f} at end")
    return 0


def print_tax(tax: dict) -> None:
    """The other-syscall tax: ns per getppid() above the untraced median."""
    base = statistics.median(tax["untraced"])
    (bl, bh), (fl, fh) = quartiles(tax["bare"]), quartiles(tax["futextrace"])
    print(f"\n# getppid(): untraced {base:.1f} ns per call; tax (median of {len(tax['untraced'])} rounds, IQR): "
          f"bare hook +{statistics.median(tax['bare']) - base:.1f} ns ({bl - base:+.1f}..{bh - base:+.1f}), "
          f"futextrace +{statistics.median(tax['futextrace']) - base:.1f} ns ({fl - base:+.1f}..{fh - base:+.1f})")


def print_table(sizes, results, detail) -> None:
    print("\n| distinct futexes | untraced ops/s | retained, bare hook (median; IQR) "
          "| retained, futextrace (median; IQR) | futextrace / bare hook | BPF ns per run "
          "| unattributed lookups | distinct futexes counted (exact or estimate) |")
    print("|---|---|---|---|---|---|---|---|")
    med = {}
    for n in sizes:
        rs = results[n]
        bare, ft = [r["bare"] for r in rs], [r["futextrace"] for r in rs]
        own = statistics.median(r["futextrace"] / r["bare"] for r in rs)
        med[n] = (statistics.median(bare), statistics.median(ft), own)
        (bl, bh), (fl, fh) = quartiles(bare), quartiles(ft)
        d = detail[n]
        print(f"| {n:,} | {statistics.median(r['untraced'] for r in rs):,.0f} "
              f"| {med[n][0]:.3f} ({bl:.3f}..{bh:.3f}) | {med[n][1]:.3f} ({fl:.3f}..{fh:.3f}) "
              f"| {own:.3f} | {d['bpf_ns']:.0f} | {d['unattributed']:,} "
              f"| {d['distinct']:,} {'exact' if d['exact'] else 'estimate'} |")
    ref = sizes[0]
    for label, k in (("futextrace", 1), ("bare hook", 0), ("futextrace / bare hook", 2)):
        print(f"# {label}, minus the {ref:,}-futex figure: "
              + ", ".join(f"{n:,}: {med[n][k] - med[ref][k]:+.3f}" for n in sizes[1:]))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
