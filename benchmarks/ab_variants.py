#!/usr/bin/env python3
"""Two builds of futextrace's BPF program side by side, for design work on the
hot path: A is the tree's own (or another directory's, --base), B the same with
the bpf/ files another directory has (trace_tp.bpf.c and any of the headers the
loader pastes, loader.HOT_PATH_HEADERS) taken from it.
Both are loaded at once; each round runs every size, and per size three runs
back to back in a rotating order (untraced, A attached, B attached: the
other's hook detached, futexset.hot_path_detached), so both builds see the
same machine. Prints per size the median retained throughput of each
and the median per-round difference B - A. A build that changes maps or
futextrace.h is out of scope (B shares the tree's header).

    sudo .venv/bin/python benchmarks/ab_variants.py --variant DIR --sizes 16,262144,1048576 --rounds 14

With --bpf-ns, each build runs alone in turn and the figure is its BPF ns per
run from the kernel's run statistics, and the per-round difference of the gaps
(largest size minus smallest), B minus A: 5-10 ns differences that throughput
on a shared machine cannot resolve (the minimum is the quietest run).

    sudo .venv/bin/python benchmarks/ab_variants.py --variant DIR --bpf-ns --sizes 16,1048576 --rounds 80 --runtime 0.1

A 3-4 ns difference can be where the kernel placed a build's sys_enter image, not
its code: programs take their place in the kernel's program pack as their
verification ends, so a build whose tail-called program verifies faster than
sys_enter gets sys_enter placed after it (WAITV_CHUNK 8 against 32 measured +3 ns
that way, and 0 with the loads ordered; docs/design.md). Compare a build with a
copy of itself, or swap which one verifies first, before reading a few ns as code.

--b-call-sites compiles B with call sites (bpf/call_sites.h, as record runs), A
without: what taking them costs the hot path (--variant may then be left out).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from futexset import BPF_STATS, bpf_stats, hot_path_detached, run_workload  # noqa: E402

CONDITIONS = ("untraced", "A", "B")


def build(model, variant: Path | None, call_sites: bool = False):
    """futextrace's tracepoint program: the tree's own (variant None), or the
    tree's with each bpf/ file the variant directory has taken from there;
    `call_sites`: compiled with them (bpf/call_sites.h), as record has it."""
    from futextrace.loading import loader
    if variant is None:
        return loader.Program(model, "tracepoint", call_sites=call_sites)
    own = loader.source_for

    def source_variant(method: str) -> str:
        def read(name: str) -> str:
            return (variant / name if (variant / name).exists() else loader.bpf_dir() / name).read_text()
        text = read("trace_tp.bpf.c")
        for header in loader.HOT_PATH_HEADERS:
            text = text.replace(f'#include "{header}"', read(header), 1)
        return text + "\n" + read("lock_waits.h")
    loader.source_for = source_variant
    try:
        return loader.Program(model, "tracepoint", call_sites=call_sites)
    finally:
        loader.source_for = own


def load_pair(model, variant: Path | None, base: Path | None = None, b_call_sites: bool = False):
    a = build(model, base)
    return a, build(model, variant, b_call_sites)


def snapshot(prog) -> tuple[int, int]:
    """(runs, ns) of the program's BPF programs so far (kernel run statistics)."""
    from futextrace.loading.bpfsys import prog_stats
    s = [prog_stats(fd) for fd in prog.program_fds()]
    return sum(x.run_cnt for x in s), sum(x.run_time_ns for x in s)


def throughput(a, sizes, prog_a, prog_b) -> None:
    """Per round and size: untraced, A, B in a rotating order; retained ratios."""
    ratios = {n: {"A": [], "B": []} for n in sizes}
    for i in range(a.rounds):
        for n in (sizes if i % 2 == 0 else sizes[::-1]):
            ops = {}
            for cond in CONDITIONS[i % 3:] + CONDITIONS[:i % 3]:
                with contextlib.ExitStack() as detached:
                    for name, prog in (("A", prog_a), ("B", prog_b)):
                        if cond != name:
                            detached.enter_context(hot_path_detached(prog))
                    ops[cond] = run_workload(n, a.runtime)["avg_ops_per_sec"]
            for name in "AB":
                ratios[n][name].append(ops[name] / ops["untraced"])
    ref = sizes[0]
    med = {n: {k: statistics.median(v) for k, v in r.items()} for n, r in ratios.items()}
    print(f"# {a.rounds} rounds, futexbench -t 1 -r {a.runtime}; A = {a.base or 'the tree'}, "
          f"B = {a.variant or 'the tree'}{' with call sites' if a.b_call_sites else ''}; {BPF_STATS} off")
    for n in sizes:
        diff = statistics.median(b - x for x, b in zip(ratios[n]["A"], ratios[n]["B"]))
        print(f"{n:>9,} futexes: A {med[n]['A']:.3f} ({med[n]['A'] - med[ref]['A']:+.3f} vs {ref:,}), "
              f"B {med[n]['B']:.3f} ({med[n]['B'] - med[ref]['B']:+.3f}), B - A per round {diff:+.3f}")


def bpf_ns(a, sizes, prog_a, prog_b) -> None:
    """Per round and size: A and B alone in turn (order alternated by round),
    BPF ns per run from the kernel's run statistics; the per-round gap between
    the largest and the smallest size, B minus A."""
    ns = {n: {"A": [], "B": []} for n in sizes}
    for i in range(a.rounds):
        for n in sizes:
            for name in (("A", "B") if i % 2 == 0 else ("B", "A")):
                prog, other = (prog_a, prog_b) if name == "A" else (prog_b, prog_a)
                with hot_path_detached(other):
                    c0, t0 = snapshot(prog)
                    run_workload(n, a.runtime)
                    c1, t1 = snapshot(prog)
                ns[n][name].append((t1 - t0) / max(1, c1 - c0))
    print(f"# B = {a.variant or 'the tree'}{' with call sites' if a.b_call_sites else ''}, {a.rounds} rounds, "
          f"futexbench -t 1 -r {a.runtime}, BPF ns per run")
    for n in sizes:
        A, B = ns[n]["A"], ns[n]["B"]
        print(f"{n:>9,} futexes: A median {statistics.median(A):6.1f} min {min(A):6.1f} ns | "
              f"B median {statistics.median(B):6.1f} min {min(B):6.1f} ns")
    lo, hi = sizes[0], sizes[-1]
    gaps = {k: [h - l for l, h in zip(ns[lo][k], ns[hi][k])] for k in "AB"}
    d = [b - x for x, b in zip(gaps["A"], gaps["B"])]
    q = statistics.quantiles(d, n=4) if len(d) > 1 else [d[0]] * 3
    print(f"gap ({hi:,} minus {lo:,}): A {statistics.median(gaps['A']):.1f} ns, B {statistics.median(gaps['B']):.1f} ns; "
          f"B minus A per round: median {statistics.median(d):+.1f} ns (IQR {q[0]:+.1f}..{q[2]:+.1f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", type=Path, default=None,
                    help="directory holding B's bpf/ files (default: B is the tree's own)")
    ap.add_argument("--b-call-sites", action="store_true",
                    help="B takes call sites (bpf/call_sites.h, record's default), A does not")
    ap.add_argument("--base", type=Path, default=None,
                    help="directory holding A's bpf/ files (default: A is the tree's own)")
    ap.add_argument("--sizes", default="16,262144,1048576")
    ap.add_argument("--rounds", type=int, default=14)
    ap.add_argument("--runtime", default="0.5")
    ap.add_argument("--bpf-ns", action="store_true",
                    help="compare BPF ns per run (kernel run statistics) instead of throughput: far less noisy")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("ab_variants.py: needs root")
    if a.variant is None and not a.b_call_sites:
        sys.exit("ab_variants.py: give --variant DIR, --b-call-sites, or both")
    for d in filter(None, (a.variant, a.base)):
        if not any(d.glob("*.h")) and not (d / "trace_tp.bpf.c").is_file():
            sys.exit(f"ab_variants.py: no bpf/ file in {d}")
    sizes = [int(s) for s in a.sizes.split(",")]
    from futextrace.kernel import model as kmodel
    model = kmodel.load()
    with bpf_stats(a.bpf_ns):
        prog_a, prog_b = load_pair(model, a.variant, a.base, a.b_call_sites)
        try:
            (bpf_ns if a.bpf_ns else throughput)(a, sizes, prog_a, prog_b)
        finally:
            prog_a.close()
            prog_b.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
