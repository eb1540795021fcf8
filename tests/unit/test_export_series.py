"""The exporter's bounded, monotonic series (futextrace/export/series.py) on
hand-made sequences of cumulative readings: expected values are worked out
here from the inputs, never taken from the module under test."""
import random

from futextrace.export.series import SeriesBook


def feed(book, steps, now0=0.0, dt=1.0, dead=()):
    """Each step: {pid: cumulative private lookups}; returns the series after each."""
    out = []
    for i, step in enumerate(steps):
        readings = {pid: (f"p{pid}", {"private": n}) for pid, n in step.items()}
        book.update(readings, now0 + i * dt, alive=lambda pid: pid not in dead)
        out.append({(pid, comm, h): v for pid, comm, h, v in book.series()})
    return out


def other(series):
    return series[("", "other", "private")]


def test_other_never_goes_backwards_when_a_process_is_promoted_and_demoted():
    book = SeriesBook(max_processes=1, grace_s=60)
    # pid 1 busy first; pid 2 overtakes it (promoted out of "other"), then 1 again.
    steps = [{1: 100, 2: 10}, {1: 150, 2: 500}, {1: 1000, 2: 510}, {1: 1001, 2: 2000}]
    series = feed(book, steps)
    # Worked out by hand: each interval's delta goes to the series that is exported then.
    assert [other(s) for s in series] == [10, 10 + 50, 60 + 10, 70 + 1]
    assert series[0][("1", "p1", "private")] == 100
    assert series[1][("2", "p2", "private")] == 490 and ("1", "p1", "private") not in series[1]
    assert series[2][("1", "p1", "private")] == 100 + 850          # resumes where it stopped
    assert series[3][("2", "p2", "private")] == 490 + 1490
    # Each process's own series never decreases while it is exported.
    seen = {}
    for s in series:
        for key, v in s.items():
            assert v >= seen.get(key, 0), key
            seen[key] = v


def test_random_churn_keeps_every_series_monotonic_and_bounded():
    rng = random.Random(15)
    n, book = 3, SeriesBook(max_processes=3, grace_s=5)
    counts, dead, last = {}, set(), {}
    for t in range(300):
        for _ in range(rng.randint(0, 4)):            # processes come...
            counts[rng.randint(1, 10**6)] = 0
        for pid in rng.sample(sorted(set(counts) - dead), k=min(3, len(set(counts) - dead))):
            dead.add(pid) if rng.random() < 0.3 else None   # ...and go
        for pid in set(counts) - dead:
            counts[pid] += rng.choice([0, 0, 1, 10, 1000])
        book.update({p: (f"c{p}", {"private": c}) for p, c in counts.items()}, float(t),
                    alive=lambda p: p not in dead)
        s = {(pid, comm, h): v for pid, comm, h, v in book.series()}
        for key, v in s.items():
            assert v >= last.get(key, 0), (t, key)
        last.update(s)
        assert len(s) <= 2 * n + 1
    # Dropped series took their counts with them; nothing was counted twice.
    assert sum(s.values()) <= sum(counts.values())


def test_exited_process_keeps_its_value_for_the_grace_period_then_goes():
    book = SeriesBook(max_processes=2, grace_s=10)
    feed(book, [{1: 500, 2: 5}])
    book.update({1: ("p1", {"private": 500}), 2: ("p2", {"private": 9})}, 3.0, alive=lambda p: p != 1)
    assert ("1", "p1", "private", 500) in book.series()
    book.update({1: ("p1", {"private": 500}), 2: ("p2", {"private": 9})}, 12.9, alive=lambda p: p != 1)
    assert ("1", "p1", "private", 500) in book.series()
    book.update({1: ("p1", {"private": 500}), 2: ("p2", {"private": 9})}, 13.1, alive=lambda p: p != 1)
    assert [s[0] for s in book.series()] == ["2", "", ""]   # pid 2, then other private/global


def test_a_reused_pid_does_not_count_the_old_process_twice():
    book = SeriesBook(max_processes=1, grace_s=0)
    feed(book, [{7: 100}])
    book.update({7: ("p7", {"private": 100})}, 1.0, alive=lambda p: False)   # exits
    book.update({7: ("p7", {"private": 100})}, 2.0, alive=lambda p: False)   # grace 0: dropped
    # A new process gets PID 7; the kernel map keys by tgid, so its counts add on.
    book.update({7: ("new", {"private": 130})}, 3.0, alive=lambda p: True)
    assert ("7", "new", "private", 30) in book.series()


def test_a_lower_reading_is_not_a_negative_delta():
    book = SeriesBook(max_processes=1, grace_s=60)
    series = feed(book, [{1: 100}, {1: 90}, {1: 120}])
    assert [s[("1", "p1", "private")] for s in series] == [100, 100, 120]
