"""The kernel's jhash2 and futex bucket formulas in Python.

Used to check the BPF side's figures independently (tests) and to compute
buckets for recorded data. Source: include/linux/jhash.h, kernel/futex/core.c.
"""
from __future__ import annotations

import struct

JHASH_INITVAL = 0xDEADBEEF
PAGE_SIZE = 4096
M32 = 0xFFFFFFFF


def _rol32(w: int, s: int) -> int:
    return ((w << s) | (w >> (32 - s))) & M32


def _mix(a, b, c):
    a = (a - c) & M32; a ^= _rol32(c, 4); c = (c + b) & M32
    b = (b - a) & M32; b ^= _rol32(a, 6); a = (a + c) & M32
    c = (c - b) & M32; c ^= _rol32(b, 8); b = (b + a) & M32
    a = (a - c) & M32; a ^= _rol32(c, 16); c = (c + b) & M32
    b = (b - a) & M32; b ^= _rol32(a, 19); a = (a + c) & M32
    c = (c - b) & M32; c ^= _rol32(b, 4); b = (b + a) & M32
    return a, b, c


def _final(a, b, c):
    c ^= b; c = (c - _rol32(b, 14)) & M32
    a ^= c; a = (a - _rol32(c, 11)) & M32
    b ^= a; b = (b - _rol32(a, 25)) & M32
    c ^= b; c = (c - _rol32(b, 16)) & M32
    a ^= c; a = (a - _rol32(c, 4)) & M32
    b ^= a; b = (b - _rol32(a, 14)) & M32
    c ^= b; c = (c - _rol32(b, 24)) & M32
    return a, b, c


def jhash2(words: list[int], initval: int) -> int:
    length = len(words)
    a = b = c = (JHASH_INITVAL + (length << 2) + initval) & M32
    k = list(words)
    while length > 3:
        a = (a + k[0]) & M32; b = (b + k[1]) & M32; c = (c + k[2]) & M32
        a, b, c = _mix(a, b, c)
        length -= 3
        k = k[3:]
    if length == 3:
        c = (c + k[2]) & M32
    if length >= 2:
        b = (b + k[1]) & M32
    if length >= 1:
        a = (a + k[0]) & M32
        a, b, c = _final(a, b, c)
    return c


def _u64_words(v: int) -> list[int]:
    return list(struct.unpack("<II", struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)))


def private_hash(uaddr: int) -> int:
    """The 32-bit hash of a private futex before the mask: its bucket in a
    private hash of S buckets is private_hash & (S - 1)."""
    offset = uaddr % PAGE_SIZE
    return jhash2(_u64_words(uaddr - offset), offset)


def private_bucket(uaddr: int, hash_mask: int) -> int:
    """Bucket of a private futex in a process's private hash."""
    return private_hash(uaddr) & hash_mask


def global_hash(mm: int, uaddr: int) -> int:
    offset = uaddr % PAGE_SIZE
    return jhash2(_u64_words(mm) + _u64_words(uaddr - offset), offset)


def global_bucket(mm: int, uaddr: int, mask: int, shift: int, nr_node_ids: int) -> tuple[int, int]:
    """(node, bucket) of a private futex key in the global hash."""
    h = global_hash(mm, uaddr)
    return (h >> shift) % nr_node_ids, h & mask
