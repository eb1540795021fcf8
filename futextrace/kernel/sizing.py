"""How the kernel sizes a private futex hash automatically (kernel/futex/core.c
futex_hash_allocate_default()), with every step kept for explanations."""
from __future__ import annotations

from futextrace.kernel.constants import CLONE_THREAD

MIN_AUTO_BUCKETS = 16


def buckets_of(hash_mask: int) -> int:
    """A hash's bucket count from its hash_mask, as the kernel keeps it (buckets - 1)."""
    return hash_mask + 1


def roundup_pow_of_two(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def auto_buckets(threads: int, online_cpus: int, global_size: int) -> dict:
    """futex_hash_allocate_default(): the steps, for explanations."""
    used = min(threads, online_cpus)
    raw = roundup_pow_of_two(4 * used)
    return {"threads": threads, "online_cpus": online_cpus, "min": used, "times4": 4 * used,
            "pow2": raw, "global_size": global_size,
            "buckets": max(MIN_AUTO_BUCKETS, min(raw, global_size))}


def threads_before_clone(nr_threads: int, clone_flags: int | None) -> int:
    """The thread count the kernel's formula saw for a clone. task_newtask's
    nr_threads already counts a new thread (CLONE_THREAD); the formula ran
    before it was added."""
    return nr_threads - 1 if (clone_flags or 0) & CLONE_THREAD else nr_threads


def next_automatic(buckets: int, online_cpus: int, global_size: int) -> dict | None:
    """The next size the formula gives after `buckets`, and the fewest threads
    and online CPUs it needs (min(threads, CPUs) must reach `needs`): None when
    `buckets` is already the global size, the formula's ceiling."""
    for m in range(1, global_size + 1):
        f = auto_buckets(m, m, global_size)
        if f["buckets"] > buckets:
            return {"buckets": f["buckets"], "needs": m,
                    "ceiling_here": auto_buckets(online_cpus, online_cpus, global_size)["buckets"]}
    return None
