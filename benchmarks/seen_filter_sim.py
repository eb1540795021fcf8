#!/usr/bin/env python3
"""How many new futexes the first-seen filter takes as seen, by simulation.

The filter (bpf/futex_common.h first_seen) is 2^LOGW 64-bit words; a futex key
hashes to one word and sets K bits in it. A new futex whose K bits are all set
already is missed (counted as seen: not in the distinct count). This inserts n
random keys in order, counts the misses, and prints the end-of-run estimate
user space makes from the fill alone (loading/maps.py seen_filter: mean over
words of (popcount/64)^K), times n: the bound the estimates' error uses.

    .venv/bin/python bench/seen_filter_sim.py [--logw 18 19] [--k 4 5 6]
"""
from __future__ import annotations

import argparse

import numpy as np

SIZES = (2048, 65536, 262144, 1048576)


def simulate(n: int, logw: int, k: int, rng: np.random.Generator) -> tuple[int, float]:
    words = np.zeros(1 << logw, dtype=np.uint64)
    h = rng.integers(0, 2**64 - 1, size=n, dtype=np.uint64)
    idx = (h >> np.uint64(64 - logw)).astype(np.int64)
    mask = np.zeros(n, dtype=np.uint64)
    for j in range(k):
        mask |= np.uint64(1) << ((h >> np.uint64(6 * j)) & np.uint64(63))
    missed = 0
    chunk = max(1, n // 400)     # in order, a chunk at a time: the fill grows as in a run
    for s in range(0, n, chunk):
        i, m = idx[s:s + chunk], mask[s:s + chunk]
        missed += int(np.sum((words[i] & m) == m))
        np.bitwise_or.at(words, i, m)
    rate = float(np.mean((np.bitwise_count(words) / 64.0) ** k))
    return missed, rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logw", type=int, nargs="+", default=[17, 18, 19])
    ap.add_argument("--k", type=int, nargs="+", default=[4, 6, 8])
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    print(f"{'words':>8} {'K':>2} {'futexes':>9} {'missed':>7} {'missed %':>9} {'bound n*rate':>13}")
    for logw in a.logw:
        for k in a.k:
            for n in SIZES:
                missed, rate = simulate(n, logw, k, rng)
                print(f"{1 << logw:>8} {k:>2} {n:>9,} {missed:>7,} {100 * missed / n:>8.3f}% {n * rate:>13,.1f}")


if __name__ == "__main__":
    main()
