"""The exact per-bucket counts with their node (loading/nodebuckets.py), on
random tiers whose per-bucket sums are added up here from the raw data: the
`futexes` map (global futexes used from CPUs of two nodes), lookup-cache
slots, `buckets` map entries and per-bucket cache slots."""
import random

import numpy as np

from futextrace.loading import nodebuckets

NCPU = 4
NODE_OF_CPU = [0, 0, 1, 1]
KEY = np.dtype([("tgid", "<u4"), ("kind", "<u4"), ("uaddr", "<u8"), ("hash_mask", "<u4"), ("pad", "<u4")])
STAT = np.dtype([("lookups", "<u8"), ("atomic_lookups", "<u8"), ("bucket", "<u4"), ("node", "<i4"),
                 ("hash_mask", "<u4"), ("kernel_bucket", "<u4")])
BKEY = np.dtype([("tgid", "<u4"), ("kind", "<u4"), ("hash_mask", "<u4"), ("bucket", "<u4"), ("node", "<i4"),
                 ("pad", "<u4")])


def raw(seed: int):
    rnd = random.Random(seed)
    fkeys, fstats, ckeys, cstats, bkeys, blookups, expected = [], [], [], [], [], [], {}

    def add(tgid, kind, mask, node, bucket, n):
        k = (tgid, kind, mask, node, bucket)
        expected[k] = expected.get(k, 0) + n

    for tgid in rnd.sample(range(100, 200), 3):
        for kind, mask in ((0, 63), (1, 0)):          # a private hash, and the global one (per node)
            for _ in range(rnd.randint(3, 30)):
                uaddr = rnd.randrange(0, 1 << 20, 4)
                bucket = (uaddr * 2654435761 >> 9) & 255
                row = np.zeros(NCPU, dtype=STAT)
                for cpu in rnd.sample(range(NCPU), rnd.randint(1, NCPU)):
                    node = -1 if kind == 0 else NODE_OF_CPU[cpu]
                    n = rnd.randint(0, 20)
                    row[cpu] = (n, 0, bucket, node, mask, 0xFFFFFFFF)
                    if n:
                        add(tgid, kind, mask, node, bucket, n)
                fkeys.append((tgid, kind, uaddr, mask, 0))
                fstats.append(row)
                if rnd.random() < 0.3:                # a lookup-cache slot of it
                    cpu, n = rnd.randrange(NCPU), rnd.randint(1, 9)
                    node = -1 if kind == 0 else NODE_OF_CPU[cpu]
                    ckeys.append((tgid, kind, uaddr, mask, 0))
                    cstats.append((n, 0, bucket, node, mask, 0xFFFFFFFF))
                    add(tgid, kind, mask, node, bucket, n)
            for bucket in rnd.sample(range(256), 3):  # map entries and cache slots of buckets
                node = -1 if kind == 0 else rnd.choice([0, 1])
                n = rnd.randint(1, 50)
                bkeys.append((tgid, kind, mask, bucket, node, 0))
                blookups.append(n)
                add(tgid, kind, mask, node, bucket, n)
    tiers = [nodebuckets.futex_map_tier(np.array(fkeys, dtype=KEY), np.array(fstats, dtype=STAT)),
             nodebuckets.futex_cache_tier(np.array(ckeys, dtype=KEY), np.array(cstats, dtype=STAT)),
             nodebuckets.bucket_tier(np.array(bkeys, dtype=BKEY), np.array(blookups, dtype=np.uint64))]
    return tiers, expected


def test_group_adds_every_tier_per_node_and_bucket():
    for seed in range(6):
        tiers, expected = raw(seed)
        g = nodebuckets.group(tiers)
        got = {tuple(row[:5]): row[5] for row in zip(*(g[f].tolist() for f in nodebuckets.TIER_FIELDS))}
        assert got == expected
        # A global futex used from both nodes' CPUs has a bucket in each node's table.
        assert {n for (_, kind, _, n, _) in got if kind == 1} == {0, 1}


def test_nothing_read_is_no_rows():
    g = nodebuckets.group([])
    assert all(len(g[f]) == 0 for f in nodebuckets.TIER_FIELDS)
