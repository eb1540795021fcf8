"""The exact count's one definition (loading/exact.py) and the exporter's
numpy mirror of it (loading/maparrays.py) on the same raw tiers.

Random tiers of several processes: `buckets` map entries, `futexes` map
entries with counts on some CPUs, lookup-cache slots of listed and unlisted
futexes and per-bucket cache slots. The expected per-bucket sums are added
up here, tier by tier, from the raw data; the arrays' layout is
bpf/futextrace.h's, written out for the test."""
import random
from collections import Counter

import numpy as np

from futextrace.loading.maparrays import (AddressIndex, futex_arrays_of, futex_share_rows, map_positions,
                                          merged_list)
from futextrace.loading import exact

NCPU = 3
UNKNOWN = 0xFFFFFFFF
KEY = np.dtype({"names": ["tgid", "kind", "uaddr", "hash_mask", "pad"],
                "formats": ["<u4", "<u4", "<u8", "<u4", "<u4"], "offsets": [0, 4, 8, 16, 20], "itemsize": 24})
STAT = np.dtype({"names": ["lookups", "atomic_lookups", "bucket", "node", "hash_mask", "kernel_bucket"],
                 "formats": ["<u8", "<u8", "<u4", "<i4", "<u4", "<u4"],
                 "offsets": [0, 8, 16, 20, 24, 28], "itemsize": 32})


def tiers(seed: int):
    """(bucket_map, futex_map, cache_rows, cached futex entries)."""
    rnd = random.Random(seed)
    bmap, fmap, cache, cached = [], [], [], []
    for tgid in rnd.sample(range(100, 200), 4):
        mask = rnd.choice([15, 63])
        for _ in range(rnd.randint(5, 40)):
            uaddr = rnd.randrange(0, 1 << 20, 4)
            bucket = (uaddr * 2654435761 >> 9) & mask
            per_cpu = [[0, 0, 0, 0, 0] for _ in range(NCPU)]
            for cpu in rnd.sample(range(NCPU), rnd.randint(1, NCPU)):
                n = rnd.randint(0, 30)
                per_cpu[cpu] = [n, rnd.randint(0, n), bucket, -1, rnd.choice([UNKNOWN, bucket])]
            e = {"tgid": tgid, "kind": 0, "uaddr": uaddr, "hash_mask": mask, "per_cpu": per_cpu}
            listed = rnd.random() < 0.7
            if listed:
                fmap.append(e)
            if rnd.random() < 0.4:   # a lookup-cache slot of this futex, listed or not
                cpu, n = rnd.randrange(NCPU), rnd.randint(1, 20)
                slot = [[0, 0, 0, 0, 0] for _ in range(NCPU)]
                slot[cpu] = [n, 0, bucket, -1, UNKNOWN]
                cached.append({**e, "per_cpu": slot})
                cache.append((cpu, tgid, 0, mask, bucket, -1, [n, 0, 0, 0]))
        for bucket in rnd.sample(range(mask + 1), 4):
            bmap.append({"tgid": tgid, "kind": 0, "hash_mask": mask, "bucket": bucket, "node": -1,
                         "per_cpu": [[n, n // 2, 0, rnd.randint(0, 2)] for n in
                                     (rnd.randint(0, 9) for _ in range(NCPU))]})
            cpu, n = rnd.randrange(NCPU), rnd.randint(1, 9)   # a per-bucket cache slot
            cache.append((cpu, tgid, 0, mask, bucket, -1, [n, 1, 0, 1]))
    return bmap, fmap, cache, cached


def expected_sums(bmap, fmap, cache) -> Counter:
    """(tgid, mask, bucket) -> [lookups, atomic, unlisted], tier by tier."""
    out: dict = {}

    def add(key, lookups, atomic, unlisted):
        s = out.setdefault(key, [0, 0, 0])
        s[0], s[1], s[2] = s[0] + lookups, s[1] + atomic, s[2] + unlisted

    for b in bmap:
        for v in b["per_cpu"]:
            add((b["tgid"], b["hash_mask"], b["bucket"]), v[0], v[1], v[3])
    for f in fmap:
        for v in f["per_cpu"]:
            if v[0]:
                add((f["tgid"], f["hash_mask"], v[2]), v[0], v[1], 0)
    for _cpu, tgid, _kind, mask, bucket, _node, v in cache:
        add((tgid, mask, bucket), v[0], v[1], v[3])
    return out


def grouped(rows) -> dict:
    out: dict = {}
    for tgid, _kind, mask, bucket, lookups, atomic, unlisted in rows:
        s = out.setdefault((tgid, mask, bucket), [0, 0, 0])
        s[0], s[1], s[2] = s[0] + lookups, s[1] + atomic, s[2] + unlisted
    return out


def test_plain_sum_is_every_tier_once():
    for seed in range(5):
        bmap, fmap, cache, _ = tiers(seed)
        rows = exact.bucket_rows(exact.bucket_entries(bmap, fmap, cache, NCPU))
        assert grouped(rows) == expected_sums(bmap, fmap, cache)


def test_numpy_path_agrees_with_plain_path():
    for seed in range(5):
        bmap, fmap, cache, _ = tiers(seed)
        plain = exact.bucket_rows(exact.bucket_entries(bmap, fmap, cache, NCPU))
        keys, stats = futex_arrays_of(fmap, KEY, STAT, NCPU)
        fast = exact.bucket_rows(bmap) + futex_share_rows(keys, stats) + exact.cache_bucket_rows(cache)
        assert grouped(fast) == grouped(plain)   # per bucket; the numpy path sums a futex's CPUs first


def test_cached_futex_counts_only_when_listed():
    index = AddressIndex()    # kept from one draw to the next, as between reads
    for seed in range(5):
        _, fmap, _, cached = tiers(seed)
        in_list = {(f["tgid"], f["uaddr"]) for f in fmap}
        want = fmap + [c for c in cached if (c["tgid"], c["uaddr"]) in in_list]
        assert exact.listed_futexes(fmap, cached) == want
        assert len(want) < len(fmap) + len(cached)   # the draw has unlisted cached futexes
        mk, _ = futex_arrays_of(fmap, KEY, STAT, NCPU)
        ck, _ = futex_arrays_of(cached, KEY, STAT, NCPU)
        assert (map_positions(ck, mk) >= 0).tolist() == [(c["tgid"], c["uaddr"]) in in_list for c in cached]
        for _ in range(2):    # a new map, then the same one again
            assert map_positions(ck, mk, index).tolist() == map_positions(ck, mk).tolist()


def shared_addresses(seed: int):
    """Tiers whose futexes share addresses across processes and hash masks
    (the same address in many processes is common: one binary, one layout)."""
    _, fmap, _, cached = tiers(seed)
    rnd = random.Random(seed)
    twins = []
    for e in fmap[:10]:
        for tgid in (7, 8):
            twin = {**e, "tgid": tgid, "hash_mask": rnd.choice([e["hash_mask"], 255])}
            if rnd.random() < 0.6:
                twins.append(twin)
            cpu = rnd.randrange(NCPU)
            slot = [[0, 0, 0, 0, 0] for _ in range(NCPU)]
            slot[cpu] = [rnd.randint(1, 9), 1, 3, -1, UNKNOWN]
            cached.append({**twin, "per_cpu": slot})
    return fmap + twins, cached


def test_merged_list_adds_each_listed_cache_slot_to_its_futex():
    index = AddressIndex()
    for seed in range(6):
        fmap, cached = shared_addresses(seed)
        want = {}
        def key(e):
            return (e["tgid"], e["kind"], e["uaddr"], e["hash_mask"])
        listed = {key(f) for f in fmap}
        for e in fmap + [c for c in cached if key(c) in listed]:
            w = want.setdefault(key(e), [0, 0, 0])
            for n, atomic, bucket, *_ in e["per_cpu"]:
                w[0] += n
                w[1] += atomic
                w[2] = max(w[2], bucket if n else 0)
        want = {k: tuple(v) for k, v in want.items() if v[0]}
        mk, ms = futex_arrays_of(fmap, KEY, STAT, NCPU)
        ck, cs = futex_arrays_of(cached, KEY, STAT, NCPU)
        for kept in (None, index, index):
            got = merged_list(mk, ms, None, ck, cs, kept)
            cols = [got[f].tolist() for f in ("tgid", "kind", "uaddr", "hash_mask", "lookups", "atomic", "bucket")]
            assert {tuple(r[:4]): tuple(r[4:]) for r in zip(*cols)} == want
            assert len(cols[0]) == len(want)


def test_numpy_share_of_futexes_hashed_to_different_buckets_by_cpu():
    """A global futex's bucket can differ by CPU (each node's table): each
    CPU's count stays under the bucket that CPU computed."""
    rnd = random.Random(11)
    fmap = []
    for i in range(60):
        per_cpu = [[0, 0, 0, 0, 0] for _ in range(NCPU)]
        for cpu in rnd.sample(range(NCPU), rnd.randint(1, NCPU)):
            n = rnd.randint(1, 9)
            per_cpu[cpu] = [n, rnd.randint(0, n), rnd.choice([3, 5]) if i % 2 else 7, -1, UNKNOWN]
        fmap.append({"tgid": 300 + i % 3, "kind": 1, "uaddr": 4 * i, "hash_mask": 15, "per_cpu": per_cpu})
    keys, stats = futex_arrays_of(fmap, KEY, STAT, NCPU)
    plain = exact.bucket_rows(exact.futex_share(fmap))
    assert grouped(futex_share_rows(keys, stats)) == grouped(plain)


def test_numpy_share_of_a_full_list_of_one_bucket_futexes():
    """Every entry counted, each on one bucket (migrating threads: several
    CPUs): the numpy share takes its shortcut and still agrees with exact.py,
    row for row in the list's order."""
    rnd = random.Random(5)
    fmap = []
    for i in range(200):
        bucket = rnd.randrange(64)
        per_cpu = [[0, 0, 0, 0, 0] for _ in range(NCPU)]
        for cpu in rnd.sample(range(NCPU), rnd.randint(1, NCPU)):
            n = rnd.randint(1, 9)
            per_cpu[cpu] = [n, rnd.randint(0, n), bucket, -1, UNKNOWN]
        fmap.append({"tgid": 400 + i % 4, "kind": 0, "uaddr": 8 * i, "hash_mask": 63, "per_cpu": per_cpu})
    keys, stats = futex_arrays_of(fmap, KEY, STAT, NCPU)
    rows = futex_share_rows(keys, stats)
    assert len(rows) == len(fmap) and [r[0] for r in rows] == [f["tgid"] for f in fmap]
    assert grouped(rows) == grouped(exact.bucket_rows(exact.futex_share(fmap)))
