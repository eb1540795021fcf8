"""export/summary.py against record/aggregate.py on the same raw futexes.

The exporter's lean summary must give, per process, what `record`'s
build_recording gives for the fields the exporter serves. Random futexes of
several processes, private hashes of several sizes, global ones, and keys
present twice (the per-CPU cache and the map) with counts on different CPUs.
The arrays' layout is bpf/futextrace.h's, written out here for the test."""
import random

import numpy as np

from futextrace.export import summary
from futextrace.export.reading import from_recording
from futextrace.kernel.layout import KIND
from futextrace.record.aggregate import build_recording

NCPU = 3
KEY = np.dtype({"names": ["tgid", "kind", "uaddr", "hash_mask", "pad"],
                "formats": ["<u4", "<u4", "<u8", "<u4", "<u4"], "offsets": [0, 4, 8, 16, 20], "itemsize": 24})
STAT = np.dtype({"names": ["lookups", "atomic_lookups", "bucket", "node", "hash_mask", "kernel_bucket"],
                 "formats": ["<u8", "<u8", "<u4", "<i4", "<u4", "<u4"],
                 "offsets": [0, 8, 16, 20, 24, 28], "itemsize": 32})
KERNEL = {"global_hash": {"buckets_per_node": 256}, "nodes": [0], "cpu_node": {}}
METHOD = {"name": "tracepoint", "prctl_results": "inferred"}
SEEN = {"words": 1 << 19, "bits_per_key": 12, "words_per_key": 2, "false_positive_rate": 0.0}   # MapReader.seen_filter()


def raw_futexes(seed: int) -> list[dict]:
    rnd = random.Random(seed)
    out = []
    for tgid in rnd.sample(range(100, 200), 6):
        for mask in rnd.sample([15, 63, 255], rnd.randint(1, 2)):
            for _ in range(rnd.randint(1, 80)):
                uaddr = rnd.randrange(0, 1 << 20, 4)
                bucket = (uaddr * 2654435761 >> 9) & mask   # a function of the address, as in the kernel
                per_cpu = [[0, 0, 0, 0, 0] for _ in range(NCPU)]
                for cpu in rnd.sample(range(NCPU), rnd.randint(1, NCPU)):
                    n = rnd.randint(0, 50)
                    per_cpu[cpu] = [n, rnd.randint(0, n), bucket, -1, 0xFFFFFFFF]
                e = {"tgid": tgid, "kind": KIND["FT_PRIVATE"], "uaddr": uaddr, "hash_mask": mask,
                     "per_cpu": per_cpu}
                out.append(e)
                if rnd.random() < 0.2:   # also in the cache, counted on one CPU
                    cache = [[0, 0, 0, 0, 0] for _ in range(NCPU)]
                    cache[rnd.randrange(NCPU)] = [rnd.randint(1, 9), 0, bucket, -1, 0xFFFFFFFF]
                    out.append({**e, "per_cpu": cache})
        for _ in range(rnd.randint(0, 10)):
            per_cpu = [[0, 0, 0, 0, 0] for _ in range(NCPU)]
            per_cpu[rnd.randrange(NCPU)] = [rnd.randint(1, 30), 0, rnd.randrange(256), 0, 0xFFFFFFFF]
            out.append({"tgid": tgid, "kind": KIND["FT_GLOBAL"], "uaddr": rnd.randrange(0, 1 << 20, 4),
                        "hash_mask": 0, "per_cpu": per_cpu})
    return out


def arrays(futexes: list[dict]):
    keys = np.zeros(len(futexes), dtype=KEY)
    stats = np.zeros((len(futexes), NCPU), dtype=STAT)
    for i, f in enumerate(futexes):
        for name in ("tgid", "kind", "uaddr", "hash_mask"):
            keys[name][i] = f[name]
        for cpu, (n, atomic, bucket, node, kb) in enumerate(f["per_cpu"]):
            stats[i, cpu] = (n, atomic, bucket, node, 0, kb)
    return keys, stats


def bucket_rows(futexes: list[dict], unlisted: list[dict] = ()) -> list[tuple]:
    """What the `buckets` map and the cache would hold for these futexes:
    (tgid, kind, hash_mask, bucket, lookups, atomic, unlisted) per entry and
    CPU; each futex of `unlisted` (beyond the list) counted once, on its first
    CPU with lookups, as the first-seen filter counts it."""
    rows = [(f["tgid"], f["kind"], f["hash_mask"], bucket, n, atomic, 0)
            for f in futexes for n, atomic, bucket, _, _ in f["per_cpu"] if n]
    for f in unlisted:
        n, atomic, bucket, _, _ = next(v for v in f["per_cpu"] if v[0])
        rows.append((f["tgid"], f["kind"], f["hash_mask"], bucket, 0, 0, 1))
    return rows


def raw_buckets(futexes: list[dict], unlisted: list[dict]) -> list[dict]:
    """The same as raw bucket entries (record's dump: per CPU [lookups, atomic,
    kernel_checked, unlisted])."""
    out = []
    for t, k, m, b, n, a, u in bucket_rows(futexes, unlisted):
        per_cpu = [[0, 0, 0, 0] for _ in range(NCPU)]
        per_cpu[0] = [n, a, 0, u]
        out.append({"tgid": t, "kind": k, "hash_mask": m, "bucket": b, "node": -1, "per_cpu": per_cpu})
    return out


def served(proc: dict) -> tuple:
    """The hash fields reading.py takes from a process."""
    hashes = []
    for h in proc["hashes"]:
        row = (h["kind"], h["buckets"], h["lookups"])
        if h["kind"] == "private":
            row += (round(h["imbalance"]["max_over_mean"], 9), h["imbalance"]["used"],
                    h["collisions"], h["distinct_futexes"])
        hashes.append(row)
    return proc["pid"], proc["lookups"], sorted(hashes)


def test_lean_processes_equal_build_recordings():
    for seed in range(5):
        futexes = raw_futexes(seed)
        counters = {"PRIVATE": [0] * NCPU, "GLOBAL": [0] * NCPU}
        rec = build_recording({"counters": counters, "futexes": futexes}, KERNEL, METHOD, 1.0, "")
        f = summary.merge(*arrays(futexes))
        b = summary.bucket_counts(bucket_rows(futexes))
        lean = summary.processes(b, f, lambda tgid: "", 256, SEEN)
        assert len(lean) == len(rec["processes"]) == 6
        assert sorted(map(served, lean)) == sorted(map(served, rec["processes"]))
        # Busiest hash first, as reading.py expects.
        for p in lean:
            assert [h["lookups"] for h in p["hashes"]] == sorted((h["lookups"] for h in p["hashes"]), reverse=True)
        private, atomic, global_ = summary.lookups_by_kind(b)
        assert private == sum(pc[0] for e in futexes if e["kind"] == KIND["FT_PRIVATE"] for pc in e["per_cpu"])
        assert private == rec["refcount"]["get_percpu"] + rec["refcount"]["get_atomic"]
        assert atomic == rec["refcount"]["get_atomic"]
        # (totals.global comes from the counters map, where maps.py adds the futexes' counts)
        assert global_ == sum(pc[0] for e in futexes if e["kind"] != KIND["FT_PRIVATE"] for pc in e["per_cpu"]) > 0


def test_empty_map():
    f = summary.merge(*arrays([]))
    b = summary.bucket_counts([])
    assert summary.processes(b, f, str, 256, SEEN) == [] and summary.lookups_by_kind(b) == (0, 0, 0)


def test_futexes_beyond_the_list_are_estimates_in_both():
    """The per-futex list took only every other futex (the map filled): the
    others are counted per bucket by the first-seen filter. Lookups and spread
    stay the exact bucket counts; distinct futexes and collisions are the same
    estimates in record's recording and in the exporter's summary, and hold
    the truth (the futexes written here) within their stated error."""
    futexes = [f for f in raw_futexes(7) if any(v[0] for v in f["per_cpu"])]
    seen_keys, firsts = set(), []
    for f in futexes:   # a futex listed twice (cache and map) is one futex
        key = (f["tgid"], f["kind"], f["uaddr"], f["hash_mask"])
        if key not in seen_keys:
            seen_keys.add(key)
            firsts.append(f)
    dropped = {id(f) for f in firsts[1::2]}
    listed = [f for f in futexes if id(next(g for g in firsts if (g["tgid"], g["uaddr"], g["hash_mask"])
                                            == (f["tgid"], f["uaddr"], f["hash_mask"]))) not in dropped]
    unlisted = [f for f in firsts if id(f) in dropped]
    seen = {**SEEN, "false_positive_rate": 1e-3}
    counters = {"PRIVATE": [0] * NCPU, "GLOBAL": [0] * NCPU}
    rec = build_recording({"counters": counters, "buckets": raw_buckets(futexes, unlisted), "futexes": listed,
                           "seen_filter": seen}, KERNEL, METHOD, 1.0, "")
    lean = summary.processes(summary.bucket_counts(bucket_rows(futexes, unlisted)), summary.merge(*arrays(listed)),
                             lambda tgid: "", 256, seen)
    assert sorted(map(served, lean)) == sorted(map(served, rec["processes"]))
    beyond = 0
    for p in rec["processes"]:
        for h in p["hashes"]:
            if h["kind"] != "private":
                continue
            truth = len({f["uaddr"] for f in firsts if (f["tgid"], f["hash_mask"]) == (p["pid"], h["buckets"] - 1)})
            assert h["distinct_futexes"] == truth
            if not h["futex_detail"]["futexes_unlisted"]:
                assert "estimates" not in h   # all listed, the filter's error below one futex
                continue
            beyond += 1
            est = h["estimates"]["distinct_futexes"]
            assert est["value"] * (1 - est["error_pct"] / 100) <= truth <= est["value"] * (1 + est["error_pct"] / 100)
    assert beyond >= 3

    def estimates(procs):
        return sorted((p["pid"], h["buckets"], h["estimates"]["distinct_futexes"]["value"],
                       h["estimates"]["collisions"]["value"])
                      for p in procs for h in p["hashes"] if h["kind"] == "private" and "estimates" in h)
    assert estimates(lean) == estimates(rec["processes"])

    def beyond_list(procs):
        return sorted((p["pid"], h["buckets"], h["futex_detail"]["futexes_unlisted"])
                      for p in procs for h in p["hashes"] if h["kind"] == "private")
    assert beyond_list(lean) == beyond_list(rec["processes"])
    # The exporter's gauge: every futex the test turned away, all processes and hashes.
    assert from_recording(rec).futexes_unlisted == len(unlisted)


def test_a_sort_hint_only_changes_how_fast_rows_are_sorted():
    import numpy as np
    from futextrace.export.summary import SortHint
    rng, hint = np.random.default_rng(3), SortHint()
    rows = rng.integers(0, 1 << 40, 500).astype(np.uint64)
    for step in range(12):   # rows come and go, change and move, as a map's do between reads
        n = len(rows)
        rows = np.concatenate([rows[rng.random(n) > 0.05], rng.integers(0, 1 << 40, rng.integers(0, 60))
                               .astype(np.uint64)])
        rows[rng.integers(0, len(rows), 20)] = rng.integers(0, 1 << 40, 20).astype(np.uint64)
        order, _ = hint.runs(rows)   # sorted from the last order where the rows changed
        assert sorted(order.tolist()) == list(range(len(rows)))          # a permutation of the rows
        assert (np.diff(rows[order].astype(np.float64)) >= 0).all()      # that sorts them


def test_runs_kept_by_a_hint_are_those_of_a_fresh_sort():
    """Rows the same as at the last read get the last runs back; changed rows
    (one value, or a row more) are sorted again."""
    import numpy as np
    from futextrace.export.summary import SortHint, _runs
    rng, hint = np.random.default_rng(5), SortHint()
    cols = [rng.integers(0, 4, 300).astype(np.uint64), rng.integers(0, 64, 300).astype(np.uint64)]
    for change in (None, None, "value", None, "row", None):
        if change == "value":
            cols[1][7] = (cols[1][7] + 1) % 64
        elif change == "row":
            cols = [np.append(c, np.uint64(1)) for c in cols]
        order, starts = _runs([c.copy() for c in cols], hint)
        fresh_order, fresh_starts = _runs(cols)
        assert starts.tolist() == fresh_starts.tolist()
        for c in cols:
            assert c[order].tolist() == c[fresh_order].tolist()


def test_runs_of_signed_and_narrow_columns_are_a_lexsorts():
    """_runs packs non-negative columns of any integer type into one uint64
    key: the same groups as sorting by the columns themselves."""
    import numpy as np
    from futextrace.export.summary import _runs
    rng = np.random.default_rng(9)
    cols = [rng.integers(0, 3, 400).astype(np.int64), rng.integers(0, 50, 400).astype(np.uint32),
            rng.integers(0, 1000, 400).astype(np.int32)]
    order, starts = _runs(cols)
    lex = np.lexsort(cols[::-1])
    for c in cols:
        assert c[order].tolist() == c[lex].tolist()
    groups = {tuple(int(c[i]) for c in cols) for i in range(400)}
    assert len(starts) == len(groups)
