"""record -i's array path (record/live_arrays.py) against its dict path
(record/live.py on recorded data): the same readings, once as the dicts a
recording holds and once as the arrays ArrayReader.interval_arrays gives,
must give the same interval rows."""
import random

import numpy as np

from futextrace.kernel.layout import KIND
from futextrace.record import live

PRIVATE, GLOBAL = KIND["FT_PRIVATE"], KIND["FT_GLOBAL"]


def reading(rnd: random.Random, futexes: dict, buckets: dict):
    """Grow the cumulative counts a little: some futexes looked up again, some
    new; how many lookups were added."""
    added = 0
    for _ in range(rnd.randint(0, 40)):
        tgid = rnd.choice([101, 102, 103])
        kind, mask = rnd.choice([(PRIVATE, 15), (PRIVATE, 63), (GLOBAL, 0)])
        uaddr = rnd.randrange(0, 1 << 12, 4)
        node = -1 if kind == PRIVATE else rnd.choice([0, 1])
        bucket = (uaddr * 2654435761 >> 9) & (mask or 255)
        n = rnd.randint(1, 30)
        futexes[(tgid, kind, uaddr, mask)] = futexes.get((tgid, kind, uaddr, mask), 0) + n
        buckets[(tgid, kind, mask, node, bucket)] = buckets.get((tgid, kind, mask, node, bucket), 0) + n
        added += n
    return added


def as_dicts(futexes: dict, buckets: dict):
    fl = [{"tgid": t, "kind": k, "uaddr": u, "hash_mask": m, "per_cpu": [[n, 0, 0, -1, 0xFFFFFFFF]]}
          for (t, k, u, m), n in futexes.items()]
    bl = [{"tgid": t, "kind": k, "hash_mask": m, "node": node, "bucket": b, "per_cpu": [[n, 0, 0, 0]]}
          for (t, k, m, node, b), n in buckets.items()]
    return fl, bl


def as_arrays(futexes: dict, buckets: dict):
    fk = list(futexes)
    fa = {f: np.array([k[i] for k in fk], dtype=np.uint64) for i, f in enumerate(("tgid", "kind", "uaddr", "hash_mask"))}
    fa["lookups"] = np.array([futexes[k] for k in fk], dtype=np.uint64)
    bk = sorted(buckets)
    ba = {f: np.array([k[i] for k in bk], dtype=np.int64)
          for i, f in enumerate(("tgid", "kind", "hash_mask", "node", "bucket"))}
    ba["lookups"] = np.array([buckets[k] for k in bk], dtype=np.uint64)
    return fa, ba


def test_arrays_and_dicts_give_the_same_rows():
    for seed in range(8):
        rnd = random.Random(seed)
        by_dicts, by_arrays = live.IntervalReporter(), live.IntervalReporter()
        futexes, buckets = {}, {}
        counters = {"PRIVATE": [0], "GLOBAL": [0], "UNATTRIBUTED": [0], "LOST_EVENTS": [0]}
        for t in range(1, 6):
            added = reading(rnd, futexes, buckets)
            fl, bl = as_dicts(futexes, buckets)
            fa, ba = as_arrays(futexes, buckets)
            a = by_dicts.row(float(t), fl, counters, 0, str, {}, buckets=bl)
            b = by_arrays.row(float(t), fa, counters, 0, str, {}, buckets=ba)
            assert a == b
            assert sum(r["lookups"] for r in a["processes"]) == added


def test_a_futex_looked_up_again_counts_once_and_an_idle_one_not_at_all():
    rep = live.IntervalReporter()
    counters = {"PRIVATE": [0], "GLOBAL": [0], "UNATTRIBUTED": [0], "LOST_EVENTS": [0]}
    f1 = {(101, PRIVATE, 0x10, 15): 5, (101, PRIVATE, 0x20, 15): 7}
    b1 = {(101, PRIVATE, 15, -1, 3): 12}
    rep.row(1.0, *as_arrays(f1, b1)[:1], counters, 0, str, {}, buckets=as_arrays(f1, b1)[1])
    f2 = {**f1, (101, PRIVATE, 0x10, 15): 9}      # 0x10 looked up 4 more times, 0x20 idle
    b2 = {(101, PRIVATE, 15, -1, 3): 16}
    fa, ba = as_arrays(f2, b2)
    row = rep.row(2.0, fa, counters, 0, str, {}, buckets=ba)
    assert [(r["pid"], r["lookups"], r["futexes"], r["buckets_touched"]) for r in row["processes"]] == [(101, 4, 1, 1)]
