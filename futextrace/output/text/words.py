"""Small pieces of wording shared by every text output."""
from __future__ import annotations


def count_noun(n: int, noun: str, plural: str | None = None) -> str:
    """"1 thread", "2 threads", "1,024 waits": the count and its noun, agreed."""
    return f"{n:,} " + (noun if n == 1 else plural or noun + "s")


def blind_spot_lines(spots: list[str], indent: str) -> list[str]:
    """"cannot see:" and one line per blind spot under it."""
    return [f"{indent}cannot see:", *(f"{indent}  - {s}" for s in spots)] if spots else []
