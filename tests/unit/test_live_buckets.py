"""The live view with the exact per-bucket counts: per-process lookups stay
exact when the bounded per-futex list holds only part of them."""
from futextrace.kernel.layout import KIND
from futextrace.record.live import IntervalReporter


def bucket(tgid, b, lookups, mask=63):
    return {"tgid": tgid, "kind": KIND["FT_PRIVATE"], "hash_mask": mask, "bucket": b, "node": -1,
            "per_cpu": [[lookups, 0, 0], [0, 0, 0]]}


def futex(tgid, uaddr, lookups, b, mask=63):
    return {"tgid": tgid, "kind": KIND["FT_PRIVATE"], "uaddr": uaddr, "hash_mask": mask,
            "per_cpu": [[lookups, 0, b, -1, 0xFFFFFFFF], [0, 0, 0, 0, 0]]}


def test_interval_lookups_from_buckets_futexes_from_the_list():
    rep = IntervalReporter()
    counters = {"PRIVATE": [0], "GLOBAL": [0], "UNATTRIBUTED": [0], "LOST_EVENTS": [0]}
    rep.row(1.0, [futex(10, 0x1000, 5, 3)], counters, 0, lambda p: "app", {},
            [bucket(10, 3, 100), bucket(10, 7, 40)])
    # The list is full: it holds 5 more lookups of one futex; the buckets 300 more.
    row = rep.row(2.0, [futex(10, 0x1000, 10, 3)], counters, 0, lambda p: "app", {},
                  [bucket(10, 3, 300), bucket(10, 7, 140)])
    p = row["processes"][0]
    assert (p["pid"], p["lookups"], p["buckets_touched"], p["futexes"]) == (10, 300, 2, 1)
    assert p["max_over_mean"] == 200 / 150 and p["hash"] == "private 64"
