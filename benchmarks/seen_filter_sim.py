#!/usr/bin/env python3
"""How many new futexes the first-seen filter takes as seen, by simulation.

The filter is bpf/futex_common.h first_seen(), computed here the same way in
numpy: 2^LOGW 64-bit words; a futex's 32-byte span picks a 64-byte line, its
slot in the span (rotated by the span's hash) a word of that line, and the key's
hash SEEN_K bits in the word. Keys are inserted one by one in address order; a
new key whose bits are all set already is missed (not counted as distinct).
Beside the misses it prints the bound user space states from the filter's fill
at the end (loading/maps.py seen_filter: mean over words of (popcount/64)^K,
times the futexes): the fill only grows, so it should never be below the misses.
Three layouts: an array of futexes (perf bench, futexbench), one futex per
64-byte line (mutexes in structs), random addresses.

    .venv/bin/python benchmarks/seen_filter_sim.py [--logw 18 19] [--k 6 8]
"""
from __future__ import annotations

import argparse

import numpy as np

U = np.uint64
SIZES = (2048, 16384, 65536, 100000, 262144, 1048576)
SPAN_SHIFT = 5


def fmix64(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> U(33))
    x = x * U(0xFF51AFD7ED558CCD)
    x = x ^ (x >> U(33))
    x = x * U(0xC4CEB9FE1A85EC53)
    return x ^ (x >> U(33))


def simulate(addrs: np.ndarray, logw: int, k: int, tgid: int = 1234, mask: int = 4095) -> tuple[int, float]:
    with np.errstate(over="ignore"):
        x = fmix64((addrs >> U(SPAN_SHIFT)) + U(tgid) * U(0x9E3779B97F4A7C15)
                   + U(mask | (1 << 32)) * U(0xC2B2AE3D27D4EB4F))
        y = fmix64(x ^ addrs)
        word = ((x >> U(64 - logw + 3)) << U(3)) | (((addrs >> U(2)) + x) & U(7))
    bits = np.zeros(len(addrs), dtype=U)
    for j in range(k):
        bits |= U(1) << ((y >> U(6 * j)) & U(63))
    filt = [0] * (1 << logw)
    missed = 0
    for w, b in zip(word.tolist(), bits.tolist()):
        if filt[w] & b == b:
            missed += 1
        else:
            filt[w] |= b
    fill = np.bitwise_count(np.array(filt, dtype=U)) / 64.0
    return missed, len(addrs) * float(np.mean(fill ** k))


def layouts(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"array": U(0x55A620CDB3C0) + U(4) * np.arange(n, dtype=U),
            "64-byte stride": U(0x7F0000000000) + U(64) * np.arange(n, dtype=U),
            "random": rng.integers(0, 2**40, size=n, dtype=U) << U(3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logw", type=int, nargs="+", default=[18, 19])
    ap.add_argument("--k", type=int, nargs="+", default=[6])
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    print(f"{'words':>8} {'K':>2} {'futexes':>9} {'layout':>15} {'missed':>7} {'missed %':>9} {'stated bound':>13}")
    for logw in a.logw:
        for k in a.k:
            for n in SIZES:
                for name, addrs in layouts(n, rng).items():
                    missed, bound = simulate(addrs, logw, k)
                    print(f"{1 << logw:>8} {k:>2} {n:>9,} {name:>15} {missed:>7,} {100 * missed / n:>8.4f}% "
                          f"{bound:>13,.2f}")


if __name__ == "__main__":
    main()
