"""The exporter's wait book on numpy columns (export/waitarrays.py) against
analysis.lockwaits.WaitBook, the dicts' one: random cumulative lock_waits
reads, fed to both, give the same new waits, wait time and cause per bucket,
read after read; and a hand-made case with its answer worked out here."""
import random

from futextrace.analysis.lockwaits import WaitBook
from futextrace.export.waitarrays import ArrayWaitBook, columns_of


def reads(seed: int, n: int = 8):
    """n cumulative reads of a lock_waits map: rows grow, new rows appear,
    some rows stay, some processes' rows go (forgotten between reads)."""
    rnd = random.Random(seed)
    table: dict[tuple, list[int]] = {}
    for _ in range(n):
        for _ in range(rnd.randint(0, 30)):
            key = (rnd.choice([11, 12, 13]), rnd.choice([15, 63]), rnd.randrange(8), rnd.choice([0, 0x100, 0x140, 0x180]))
            w = table.setdefault(key, [0, 0])
            w[0] += rnd.randint(0, 3)
            w[1] += rnd.randint(0, 5000)
        yield [{"tgid": t, "hash_mask": m, "bucket": b, "uaddr": u, "waits": w, "wait_ns": ns, "max_ns": 0}
               for (t, m, b, u), (w, ns) in table.items()]


def test_both_books_give_the_same_deltas_and_causes():
    for seed in range(10):
        plain, arrays = WaitBook(), ArrayWaitBook()
        for i, rows in enumerate(reads(seed)):
            if i == 5:
                plain.forget({12})
                arrays.forget({12})
            assert arrays.feed(columns_of(rows)) == plain.feed(rows)


def test_a_bucket_becomes_a_collision_once_a_second_futex_waits():
    book = ArrayWaitBook()
    row = {"tgid": 7, "hash_mask": 15, "bucket": 3, "uaddr": 0x100, "waits": 2, "wait_ns": 900, "max_ns": 0}
    assert book.feed(columns_of([row])) == {(7, 15, 3): (2, 900, "same_futex")}
    assert book.feed(columns_of([row])) == {}                      # nothing grew
    other = {**row, "uaddr": 0x140, "waits": 1, "wait_ns": 50}
    assert book.feed(columns_of([{**row, "waits": 3, "wait_ns": 1000}, other])) == {
        (7, 15, 3): (1 + 1, 100 + 50, "collision")}
