"""The default size of the per-CPU futexes map follows the CPU count."""
from futextrace.loading.loader import FUTEXES_BUDGET, default_max_futexes


def test_small_machines_keep_65536():
    assert [default_max_futexes(n) for n in (1, 2, 8)] == [65536] * 3


def test_big_machines_stay_within_the_budget():
    for n in (16, 64, 100, 128):
        entries = default_max_futexes(n)
        assert entries & (entries - 1) == 0 and entries >= 4096
        assert entries == 4096 or entries * (32 * n + 96) <= FUTEXES_BUDGET
    assert default_max_futexes(64) == 8192 and default_max_futexes(4096) == 4096
