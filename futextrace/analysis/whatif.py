"""What-if sizing: how the kernel would spread a process's private futexes over
each candidate private-hash size.

For a private futex the private hash's bucket is
jhash2(page address as two u32 words, initval = offset in the page) & hash_mask
(kernel/futex/core.c __futex_hash_private): no per-process seed, no mm pointer,
nothing that changes between runs. So the bucket of every recorded address in
a hash of any size is known exactly; what the table cannot know is the futexes
the recording does not list (see `partial`), and where the lookups of a futex
would go if the program's futex addresses themselves changed (another run, ASLR).
Only private keys are placed (shared futexes always use the global hash).
"""
from __future__ import annotations

from futextrace.kernel.jhash import private_hash
from futextrace.recording import ProcessFutexList

SIZES = [1 << s for s in range(4, 18)]      # 16 ... 131072, the sizes SET_SLOTS takes that matter
HOT_SHARE = 0.01          # a hot futex: at least 1% of the process's listed private lookups
MAX_LISTED = 10000        # futexes kept per process in the recording (busiest first)


def futex_list(futexes: list[dict]) -> ProcessFutexList:
    """A process's private-key futexes for the recording, busiest first and bounded."""
    private = sorted((f for f in futexes if f["kind"] in ("private", "global")),
                     key=lambda f: -f["lookups"])
    kept, rest = private[:MAX_LISTED], private[MAX_LISTED:]
    return {"listed": [{"uaddr": hex(f["uaddr"]), "lookups": f["lookups"]} for f in kept],
            "not_listed": len(rest), "not_listed_lookups": sum(f["lookups"] for f in rest)}


def _row(size: int, hashed: list[tuple[int, int]], hot: set[int], bucket_bytes: int | None) -> dict:
    buckets: dict[int, list[int]] = {}
    for i, (h, _) in enumerate(hashed):
        buckets.setdefault(h & (size - 1), []).append(i)
    total = sum(n for _, n in hashed) or 1
    busiest = max(sum(hashed[i][1] for i in members) for members in buckets.values())
    hot_sharing = sum(1 for members in buckets.values() if len(members) > 1 for i in members if i in hot)
    return {"buckets": size, "buckets_used": len(buckets), "futexes_sharing": len(hashed) - len(buckets),
            "busiest_share": round(busiest / total, 4), "hot_sharing": hot_sharing,
            "memory_bytes": size * bucket_bytes if bucket_bytes else None}


def table(listing: dict, bucket_bytes: int | None, beyond: dict | None = None) -> dict | None:
    """The what-if table for one process's futex listing (futex_list's output);
    `beyond`: what the listing misses (futexes_unlisted, lookups_missed,
    unattributed), said in the table's notes (output/text/whatif_text.py)."""
    listed = listing.get("listed") or []
    if not listed:
        return None
    hashed = [(private_hash(int(f["uaddr"], 16)), f["lookups"]) for f in listed]
    total = sum(n for _, n in hashed)
    hot = {i for i, (_, n) in enumerate(hashed) if n >= HOT_SHARE * total}
    rows = [_row(size, hashed, hot, bucket_bytes) for size in SIZES]
    smallest = next((r["buckets"] for r in rows if hot and not r["hot_sharing"]), None)
    beyond = {k: v for k, v in (beyond or {}).items() if v}
    return {"futexes": len(listed), "lookups": total, "hot": len(hot),
            "bucket_bytes": bucket_bytes, "rows": rows, "smallest_without_hot_sharing": smallest,
            "partial": bool(listing.get("not_listed") or beyond),
            "facts": {"not_listed": listing.get("not_listed"), "not_listed_lookups": listing.get("not_listed_lookups"),
                      "beyond": beyond}}
