"""Exact per-bucket counts for more distinct futexes than any map holds.

tests/data/manyfutexes.c uses 100,000 distinct private futexes, futex i
1 + i % 3 times, and one hot futex after each of them, under a custom 64-slot
hash; the per-futex map is cut to its smallest, 1024 entries, and the per-CPU
lookup cache holds 2,048 slots (256 to 2,048, by CPU count). Expected per-bucket counts come
from the tests' own jhash2 (fidelity_ref.py) of the known addresses, and the
slot count from the process's own PR_FUTEX_HASH_GET_SLOTS.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import fidelity_ref
from tests.helpers.host import needs_bpf, needs_private_hash
from tests.helpers.host import FT

pytestmark = [pytest.mark.root, needs_bpf, needs_private_hash]
DATA = Path(__file__).parent.parent / "data"
NFUTEXES = 100_000
LIST_CAPACITY = 1024


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler: run scripts/bootstrap.sh"
    tmp = tmp_path_factory.mktemp("futexset")
    exe, rec_path, wl_path = tmp / "many", tmp / "rec.json", tmp / "wl.json"
    subprocess.run([cc, "-O2", "-o", str(exe), str(DATA / "manyfutexes.c")], check=True)
    p = subprocess.run([*FT, "record", "-q", "--method", "tracepoint", "--max-futexes", str(LIST_CAPACITY),
                        "--json", str(rec_path), "--", str(exe), str(wl_path), str(NFUTEXES)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    wl = json.loads(wl_path.read_text())
    rec = json.loads(rec_path.read_text())
    return rec, wl


def expected_buckets(wl: dict) -> Counter:
    mask = wl["slots"] - 1
    want = Counter()
    for i in range(wl["futexes"]):
        want[fidelity_ref.private_bucket(wl["base"] + 4 * i, mask)] += 1 + i % 3
    want[fidelity_ref.private_bucket(wl["hot"], mask)] += wl["futexes"]
    return want


def test_bucket_counts_exact_beyond_every_map(recorded):
    rec, wl = recorded
    assert wl["slots"] == 64
    proc = next(p for p in rec["processes"] if p["pid"] == wl["pid"])
    private = [h for h in proc["hashes"] if h["kind"] == "private"]
    assert len(private) == 1 and private[0]["buckets"] == wl["slots"]
    got = {int(b): n for b, n in private[0]["bucket_counts"].items()}
    assert got == dict(expected_buckets(wl))
    assert proc["lookups"] == sum(1 + i % 3 for i in range(NFUTEXES)) + NFUTEXES
    assert rec["totals"]["unattributed"] == 0


def test_futex_list_says_what_it_misses(recorded):
    """The list holds its 1024; the first-seen filter counts the rest per
    bucket, and the distinct count is an estimate whose error holds the truth
    (the 100,000 futexes and the hot one)."""
    rec, wl = recorded
    proc = next(p for p in rec["processes"] if p["pid"] == wl["pid"])
    h = next(h for h in proc["hashes"] if h["kind"] == "private")
    detail = h["futex_detail"]
    assert not detail["complete"]
    assert detail["futexes_listed"] >= LIST_CAPACITY   # the kernel may overshoot a no-prealloc map a little
    assert detail["futexes_listed"] + detail["futexes_unlisted"] == h["distinct_futexes"]
    est = h["estimates"]["distinct_futexes"]
    half = est["value"] * est["error_pct"] / 100 + 1      # + 1: the value is rounded
    assert abs(est["value"] - (NFUTEXES + 1)) <= half and est["error_pct"] <= 3, est
    fl = rec["totals"]["futex_list"]
    assert fl["capacity"] == LIST_CAPACITY and fl["full"] and not fl["complete"]


def test_hot_futex_listed_amid_the_stream(recorded):
    """The hot futex (one call in every three) is named in the per-futex list
    with nearly all of its lookups, though a hundred thousand cold futexes
    stream through its cache set; the cold ones are only counted per bucket."""
    rec, wl = recorded
    proc = next(p for p in rec["processes"] if p["pid"] == wl["pid"])
    listed = {int(f["uaddr"], 16): f["lookups"] for f in proc["futex_list"]["listed"]}
    assert wl["hot"] in listed, "the hot futex is not in the per-futex list"
    n = listed[wl["hot"]]
    assert NFUTEXES - 100 <= n <= NFUTEXES
