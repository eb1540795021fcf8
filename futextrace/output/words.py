"""Small pieces of wording shared by every text output."""
from __future__ import annotations


def count_noun(n: int, noun: str) -> str:
    """"1 thread", "2 threads", "1,024 waits": the count and its noun, agreed."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
