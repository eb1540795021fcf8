"""What a hash read at attach says about the history before the recording.

From the kernel's rules (kernel/futex/core.c): a custom hash was set with
prctl(SET_SLOTS, N) and is never resized automatically; SET_SLOTS 0 chooses the
global hash for good; an automatic hash only grows, each time a clone that
allocates (this kernel's clone rule, learned live) computes
max(16, min(roundup_pow_of_two(4 × min(threads, online CPUs)), global size)),
so N buckets mean the formula once gave N. Words: output/text/history_text.py.
"""
from __future__ import annotations

from futextrace.kernel.sizing import auto_buckets


def threads_for(buckets: int, online: int, gsize: int) -> int | None:
    """The fewest threads (before the clone) for which the formula gives `buckets`
    with these CPUs and global size; None: no thread count does."""
    return next((n for n in range(1, online + 1) if auto_buckets(n, online, gsize)["buckets"] == buckets),
                None)


def automatic_history(n: int, k: dict) -> dict:
    """How an automatic hash of n buckets came to be. case: inputs_unknown (no
    CPU count or global size), not_here (no thread count gives n with these
    CPUs: `biggest` is what they give at most) or formula (`threads`, the
    fewest that give n, and `formula`, their steps)."""
    online, gsize = k.get("online_cpus"), k.get("global_size")
    if not (online and gsize):
        return {"case": "inputs_unknown"}
    t = threads_for(n, online, gsize)
    if t is None:
        return {"case": "not_here", "biggest": auto_buckets(online, online, gsize)["buckets"]}
    return {"case": "formula", "threads": t, "formula": auto_buckets(t, online, gsize)}
