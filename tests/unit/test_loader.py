"""The default size of the per-CPU futexes map follows the CPU count."""
from futextrace.loading.loader import FUTEXES_BUDGET, default_max_futexes, futex_cache_slots


def test_small_machines_keep_65536():
    assert [default_max_futexes(n) for n in (1, 2, 8)] == [65536] * 3


def test_big_machines_stay_within_the_budget():
    for n in (16, 64, 100, 128):
        entries = default_max_futexes(n)
        assert entries & (entries - 1) == 0 and entries >= 4096
        assert entries == 4096 or entries * (32 * n + 96) <= FUTEXES_BUDGET
    assert default_max_futexes(64) == 8192 and default_max_futexes(4096) == 4096


def test_lookup_cache_holds_perf_benchs_default_within_its_budget():
    """2,048 slots per CPU (perf bench's 1,024 futexes per thread, twice over) up
    to 32 CPUs; beyond, halved per doubling so the cache stays within 4 MiB;
    never below 256."""
    assert [futex_cache_slots(n) for n in (1, 2, 32)] == [2048] * 3
    assert [futex_cache_slots(n) for n in (33, 64, 128, 256, 4096)] == [1024, 1024, 512, 256, 256]
    for n in (1, 2, 3, 8, 32, 48, 64, 100, 256):
        slots = futex_cache_slots(n)
        assert slots & (slots - 1) == 0
        assert slots * 64 * n <= 4 << 20
