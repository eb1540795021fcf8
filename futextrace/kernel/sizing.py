"""How the kernel sizes a private futex hash automatically (kernel/futex/core.c
futex_hash_allocate_default()), with every step kept for explanations."""
from __future__ import annotations

from futextrace.kernel.constants import CLONE_THREAD

MIN_AUTO_BUCKETS = 16


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
