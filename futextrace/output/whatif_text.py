"""The what-if sizing table (analysis/whatif.py) as text."""
from __future__ import annotations


def render(t: dict) -> list[str]:
    out = [f"what-if sizing ({t['futexes']} futexes, {t['hot']} hot; {t['hot_rule']}; "
           "collisions: futexes beyond one per bucket):",
           f"    {'buckets':>8} {'used':>7} {'collisions':>10} {'busiest':>8} {'hot sharing':>11} {'memory':>10}"]
    for r in t["rows"]:
        mem = f"{r['memory_bytes'] / 1024:.0f} KiB" if r["memory_bytes"] else "?"
        out.append(f"    {r['buckets']:>8} {r['buckets_used']:>7} {r['futexes_sharing']:>10} "
                   f"{r['busiest_share']:>8.1%} {r['hot_sharing']:>11} {mem:>10}")
    out += [f"    note: {n}" for n in t["notes"]]
    return out
