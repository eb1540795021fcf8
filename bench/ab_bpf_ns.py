#!/usr/bin/env python3
"""BPF ns per run of two builds of the hot path side by side, from the
kernel's own run statistics (kernel.bpf_stats_enabled): A is the tree's build,
B the same program with bpf/futex_common.h from `--variant DIR` (as in
bench/ab_variants.py). Per round and size each build runs futexbench alone
(the other's hook detached), in an order alternated by round. Prints, per
size, the median and the minimum ns per run of each, and the median per-round
difference of the gaps (largest size minus smallest), B minus A: the figure
that says whether B's miss path is cheaper, with far less noise than
throughput on a shared machine (the minimum is the quietest run).

    sudo .venv/bin/python bench/ab_bpf_ns.py --variant DIR --rounds 80 --runtime 0.1
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_variants import load_pair  # noqa: E402
from futexset import bpf_stats, run_workload  # noqa: E402


def snapshot(prog) -> tuple[int, int]:
    """(runs, ns) of the program's BPF programs so far."""
    from futextrace.loading.bpfsys import prog_stats
    s = [prog_stats(fd) for fd in prog.program_fds()]
    return sum(x.run_cnt for x in s), sum(x.run_time_ns for x in s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", required=True, type=Path, help="directory holding B's futex_common.h")
    ap.add_argument("--sizes", default="16,1048576")
    ap.add_argument("--rounds", type=int, default=80)
    ap.add_argument("--runtime", default="0.1")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("ab_bpf_ns.py: needs root")
    if not (a.variant / "futex_common.h").is_file():
        sys.exit(f"ab_bpf_ns.py: no futex_common.h in {a.variant}")
    sizes = [int(s) for s in a.sizes.split(",")]
    from futextrace.kernel import model as kmodel
    model = kmodel.load()
    ns = {n: {"A": [], "B": []} for n in sizes}
    with bpf_stats(True):
        pa, pb = load_pair(model, a.variant)
        try:
            for i in range(a.rounds):
                for n in sizes:
                    for name in (("A", "B") if i % 2 == 0 else ("B", "A")):
                        prog, other = (pa, pb) if name == "A" else (pb, pa)
                        with other.hot_path_detached():
                            c0, t0 = snapshot(prog)
                            run_workload(n, a.runtime)
                            c1, t1 = snapshot(prog)
                        ns[n][name].append((t1 - t0) / max(1, c1 - c0))
        finally:
            pa.close()
            pb.close()
    print(f"# B = {a.variant}/futex_common.h, {a.rounds} rounds, futexbench -t 1 -r {a.runtime}")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
