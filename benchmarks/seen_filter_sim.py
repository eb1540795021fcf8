#!/usr/bin/env python3
"""How many new futexes the first-seen filter takes as seen, by simulation.

The filter is bpf/seen_filter.h first_seen(), computed here the same way in
numpy: 2^LOGW 64-bit words; a futex's 32-byte span picks a 64-byte line, its
slot in the span (rotated by the span's hash) a word of that line, and the key's
hash sets SEEN_K bits in that word and SEEN_K more in the same slot of a second
line, also picked by the span's hash. Keys are inserted one by one in address
order; a new key whose bits are all set already is missed (not counted as
distinct). Beside the misses it prints the bound user space states from the
filter's fill at the end
(loading/maps.py seen_filter: (mean over words of (popcount/64)^K)^2, the two
lines being independent, times the futexes): the fill only grows, so it should
never be below the misses.
Three layouts: an array of futexes (perf bench, futexbench), one futex per
64-byte line (mutexes in structs), random addresses.

    .venv/bin/python benchmarks/seen_filter_sim.py [--logw 18 19] [--k 6 8] [--words 1 2]
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


def key_bits(h: np.ndarray, k: int) -> np.ndarray:
    """SEEN_K bit positions from the hash's top 6*k bits (as seen_bits())."""
    bits = np.zeros(len(h), dtype=U)
    for j in range(k):
        bits |= U(1) << ((h >> U(64 - 6 * (j + 1))) & U(63))
    return bits


def simulate(addrs: np.ndarray, logw: int, k: int, tgid: int = 1234, mask: int = 4095,
             words: int = 2) -> tuple[int, float]:
    """Misses and the stated bound for `addrs` inserted in order; `words`: 1
    (one word per key, the first build) or 2 (as first_seen: the key's slot in
    two lines, each picked by the span's hash)."""
    with np.errstate(over="ignore"):
        x = fmix64((addrs >> U(SPAN_SHIFT)) + U(tgid) * U(0x9E3779B97F4A7C15)
                   + U(mask | (1 << 32)) * U(0xC2B2AE3D27D4EB4F))
        y = fmix64(x ^ addrs)
        slot = ((addrs >> U(2)) + x) & U(7)
        word1 = ((x >> U(64 - logw + 3)) << U(3)) | slot
        word2 = (((x >> U(20)) & U((1 << (logw - 3)) - 1)) << U(3)) | slot
        bits1, bits2 = key_bits(y, k), key_bits(y * U(0x9E3779B97F4A7C15), k)
    filt = [0] * (1 << logw)
    missed = 0
    for w1, w2, b1, b2 in zip(word1.tolist(), word2.tolist(), bits1.tolist(), bits2.tolist()):
        if filt[w1] & b1 == b1 and (words == 1 or filt[w2] & b2 == b2):
            missed += 1
        else:
            filt[w1] |= b1
            if words == 2:
                filt[w2] |= b2
    per_word = float(np.mean((np.bitwise_count(np.array(filt, dtype=U)) / 64.0) ** k))
    return missed, len(addrs) * per_word ** words


def layouts(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"array": U(0x55A620CDB3C0) + U(4) * np.arange(n, dtype=U),
            "64-byte stride": U(0x7F0000000000) + U(64) * np.arange(n, dtype=U),
            "random": rng.integers(0, 2**40, size=n, dtype=U) << U(3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logw", type=int, nargs="+", default=[18, 19])
    ap.add_argument("--k", type=int, nargs="+", default=[6])
    ap.add_argument("--words", type=int, nargs="+", default=[2], choices=(1, 2),
                    help="words per key: 1 (the first build) or 2 (first_seen now: two lines)")
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    print(f"{'words':>8} {'K':>2} {'per key':>7} {'futexes':>9} {'layout':>15} {'missed':>7} {'missed %':>9} "
          f"{'stated bound':>13}")
    for logw in a.logw:
        for k in a.k:
            for per_key in a.words:
                for n in SIZES:
                    for name, addrs in layouts(n, rng).items():
                        missed, bound = simulate(addrs, logw, k, words=per_key)
                        print(f"{1 << logw:>8} {k:>2} {per_key:>7} {n:>9,} {name:>15} {missed:>7,} "
                              f"{100 * missed / n:>8.4f}% {bound:>13,.4g}")


if __name__ == "__main__":
    main()
