"""The what-if table (analysis/whatif.py) against the tests' own jhash2
(tests/helpers/fidelity_ref.py, written for the tests from include/linux/jhash.h)."""
from collections import Counter

from futextrace.analysis import whatif
from futextrace.output.text.whatif_text import worded_table
from tests.helpers import fidelity_ref as ref

# Addresses like a program's: a few pages, 4- and 8-byte aligned, some in the same page.
ADDRS = [0x7F00_1234_5000 + 0x40 * i for i in range(40)] + [0x5600_0000_0000 + 0x1000 * i + 8 for i in range(40)]
LOOKUPS = [1000 if i < 5 else 3 for i in range(len(ADDRS))]


def listing():
    return {"listed": [{"uaddr": hex(a), "lookups": n} for a, n in zip(ADDRS, LOOKUPS)],
            "not_listed": 0, "not_listed_lookups": 0}


def expected_row(size):
    buckets = [ref.private_bucket(a, size - 1) for a in ADDRS]
    per_bucket = Counter()
    for b, n in zip(buckets, LOOKUPS):
        per_bucket[b] += n
    members = Counter(buckets)
    hot = [i for i, n in enumerate(LOOKUPS) if n >= 0.01 * sum(LOOKUPS)]
    return {"buckets_used": len(members), "futexes_sharing": len(ADDRS) - len(members),
            "busiest_share": round(max(per_bucket.values()) / sum(LOOKUPS), 4),
            "hot_sharing": sum(1 for i in hot if members[buckets[i]] > 1)}


def test_table_matches_an_independent_jhash2():
    t = whatif.table(listing(), bucket_bytes=64)
    assert [r["buckets"] for r in t["rows"]] == [16 << i for i in range(14)]
    for r in t["rows"]:
        assert {k: r[k] for k in ("buckets_used", "futexes_sharing", "busiest_share", "hot_sharing")} \
            == expected_row(r["buckets"]), r["buckets"]
        assert r["memory_bytes"] == 64 * r["buckets"]
    smallest = next(r["buckets"] for r in t["rows"] if expected_row(r["buckets"])["hot_sharing"] == 0)
    assert t["hot"] == 5 and t["smallest_without_hot_sharing"] == smallest and not t["partial"]


def test_partial_list_is_said():
    lst = {**listing(), "not_listed": 7, "not_listed_lookups": 99}
    t = worded_table(whatif.table(lst, None, {"lookups_missed": 5, "futexes_unlisted": 0}))
    assert t["partial"] and "top 80 futexes by lookups; 7 futexes with 99 lookups not in the list" in t["notes"]
    assert t["notes"][1] == ("5 lookups of this process are beyond the per-futex list (it was full): "
                             "their futexes are not in the table")
    assert whatif.table({"listed": []}, None) is None
