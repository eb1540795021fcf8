#!/usr/bin/env python3
"""Two builds of futextrace's BPF program side by side, for design work on the
hot path: A is the tree's own, B the same with bpf/futex_common.h taken from
another directory. Both are loaded at once; each round runs every size, and per
size three runs back to back in a rotating order (untraced, A attached, B
attached: the other's hook detached, Program.hot_path_detached), so both builds
see the same machine. Prints per size the median retained throughput of each
and the median per-round difference B - A. A build that changes maps or
futextrace.h is out of scope (B shares the tree's header).

    sudo .venv/bin/python bench/ab_variants.py --variant DIR --sizes 16,262144,1048576 --rounds 14
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from futexset import BPF_STATS, bpf_stats, run_workload  # noqa: E402

CONDITIONS = ("untraced", "A", "B")


def load_pair(model, variant: Path):
    from futextrace.loading import loader
    a = loader.Program(model, "tracepoint")
    common = (variant / "futex_common.h").read_text()
    own = loader.source_for

    def source_b(method: str) -> str:        # the tree's program text with B's common part
        text = (loader.bpf_dir() / "trace_tp.bpf.c").read_text()
        return text.replace('#include "futex_common.h"', common, 1)
    loader.source_for = source_b
    try:
        b = loader.Program(model, "tracepoint")
    finally:
        loader.source_for = own
    return a, b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", required=True, type=Path, help="directory holding B's futex_common.h")
    ap.add_argument("--sizes", default="16,262144,1048576")
    ap.add_argument("--rounds", type=int, default=14)
    ap.add_argument("--runtime", default="0.5")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("ab_variants.py: needs root")
    if not (a.variant / "futex_common.h").is_file():
        sys.exit(f"ab_variants.py: no futex_common.h in {a.variant}")
    sizes = [int(s) for s in a.sizes.split(",")]
    from futextrace.kernel import model as kmodel
    model = kmodel.load()
    ratios = {n: {"A": [], "B": []} for n in sizes}
    with bpf_stats(False):
        prog_a, prog_b = load_pair(model, a.variant)
        try:
            for i in range(a.rounds):
                for n in (sizes if i % 2 == 0 else sizes[::-1]):
                    ops = {}
                    for cond in CONDITIONS[i % 3:] + CONDITIONS[:i % 3]:
                        with contextlib.ExitStack() as detached:
                            for name, prog in (("A", prog_a), ("B", prog_b)):
                                if cond != name:
                                    detached.enter_context(prog.hot_path_detached())
                            ops[cond] = run_workload(n, a.runtime)["avg_ops_per_sec"]
                    for name in "AB":
                        ratios[n][name].append(ops[name] / ops["untraced"])
        finally:
            prog_a.close()
            prog_b.close()
    ref = sizes[0]
    med = {n: {k: statistics.median(v) for k, v in r.items()} for n, r in ratios.items()}
    print(f"# {a.rounds} rounds, futexbench -t 1 -r {a.runtime}; B = {a.variant}/futex_common.h; {BPF_STATS} off")
    for n in sizes:
        diff = statistics.median(b - x for x, b in zip(ratios[n]["A"], ratios[n]["B"]))
        print(f"{n:>9,} futexes: A {med[n]['A']:.3f} ({med[n]['A'] - med[ref]['A']:+.3f} vs {ref:,}), "
              f"B {med[n]['B']:.3f} ({med[n]['B'] - med[ref]['B']:+.3f}), B - A per round {diff:+.3f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
