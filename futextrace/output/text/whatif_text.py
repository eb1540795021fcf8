"""The what-if sizing table (analysis/whatif.py) in words: its notes in the
explanation's JSON, and its text."""
from __future__ import annotations

from futextrace.analysis.whatif import HOT_SHARE


def _notes(t: dict) -> list[str]:
    facts, beyond = t["facts"], t["facts"]["beyond"]
    notes = []
    if facts["not_listed"]:
        notes.append(f"top {t['futexes']} futexes by lookups; {facts['not_listed']} futexes with "
                     f"{facts['not_listed_lookups']} lookups not in the list")
    said = [f"{beyond['futexes_unlisted']:,} futexes of this process are beyond the per-futex list (it was "
            "full): they are not in the table" if beyond.get("futexes_unlisted") else "",
            f"{beyond['lookups_missed']:,} lookups of this process are beyond the per-futex list (it was "
            "full): their futexes are not in the table" if beyond.get("lookups_missed") else "",
            f"{beyond['unattributed']:,} lookups were not attributed at all (map full): not in the table"
            if beyond.get("unattributed") else ""]
    if any(said):
        notes.append("; ".join(n for n in said if n))
    return notes


def worded_table(t: dict | None) -> dict | None:
    """analysis.whatif.table() with its hot rule and notes, keys in the schema's order."""
    if t is None:
        return None
    return {"futexes": t["futexes"], "lookups": t["lookups"], "hot": t["hot"],
            "hot_rule": f"a hot futex has at least {HOT_SHARE:.0%} of the listed lookups",
            "bucket_bytes": t["bucket_bytes"], "rows": t["rows"],
            "smallest_without_hot_sharing": t["smallest_without_hot_sharing"], "partial": t["partial"],
            "notes": _notes(t)}

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
