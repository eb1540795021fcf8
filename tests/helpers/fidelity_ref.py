"""The tests' own jhash2 and futex bucket formulas, written from the kernel's
include/linux/jhash.h and kernel/futex/core.c, independent of
futextrace.kernel.jhash (test_fidelity_jhash.py checks it against a C copy of
the kernel's algorithm compiled by the test)."""
from __future__ import annotations

M32 = 0xFFFFFFFF
JHASH_INITVAL = 0xDEADBEEF
PAGE = 4096


def _rol(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & M32


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    a = (a - c) & M32; a ^= _rol(c, 4); c = (c + b) & M32
    b = (b - a) & M32; b ^= _rol(a, 6); a = (a + c) & M32
    c = (c - b) & M32; c ^= _rol(b, 8); b = (b + a) & M32
    a = (a - c) & M32; a ^= _rol(c, 16); c = (c + b) & M32
    b = (b - a) & M32; b ^= _rol(a, 19); a = (a + c) & M32
    c = (c - b) & M32; c ^= _rol(b, 4); b = (b + a) & M32
    return a, b, c


def _final(a: int, b: int, c: int) -> int:
    c ^= b; c = (c - _rol(b, 14)) & M32
    a ^= c; a = (a - _rol(c, 11)) & M32
    b ^= a; b = (b - _rol(a, 25)) & M32
    c ^= b; c = (c - _rol(b, 16)) & M32
    a ^= c; a = (a - _rol(c, 4)) & M32
    b ^= a; b = (b - _rol(a, 14)) & M32
    c ^= b; c = (c - _rol(b, 24)) & M32
    return c


def jhash2(words: list[int], initval: int) -> int:
    """jhash2(k, length, initval) over 32-bit words."""
    n = len(words)
    a = b = c = (JHASH_INITVAL + (n << 2) + initval) & M32
    k = list(words)
    while n > 3:
        a = (a + k[0]) & M32; b = (b + k[1]) & M32; c = (c + k[2]) & M32
        a, b, c = _mix(a, b, c)
        k, n = k[3:], n - 3
    if n == 0:
        return c
    if n >= 3:
        c = (c + k[2]) & M32
    if n >= 2:
        b = (b + k[1]) & M32
    a = (a + k[0]) & M32
    return _final(a, b, c)


def private_bucket(uaddr: int, hash_mask: int) -> int:
    """__futex_hash_private(): jhash2(&key->private.address, 2, offset) & mask."""
    offset, address = uaddr % PAGE, uaddr - uaddr % PAGE
    return jhash2([address & M32, address >> 32], offset) & hash_mask
