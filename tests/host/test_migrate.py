"""Exact buckets when threads migrate between CPUs (issue 27, item 1).

tests/data/migrate.c pins its one thread to each online CPU in turn and
reuses 4096 private futexes under a custom 16-slot hash, so the same futex is
flushed to the per-futex list from every CPU. An insert into a per-CPU hash
fills only the inserting CPU's copy; a later flush on another CPU must still
land in the futex's real bucket, never in a bucket the hash does not have.
Expected buckets come from the tests' own jhash2 (fidelity_ref.py) of the
addresses the workload reports, the slot count from its own GET_SLOTS.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import fidelity_ref
from tests.helpers.host import needs_bpf, needs_private_hash
from tests.helpers.host import FT

pytestmark = [pytest.mark.root, needs_bpf, needs_private_hash,
              pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to migrate between")]
DATA = Path(__file__).parent.parent / "data"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler: run scripts/bootstrap.sh"
    tmp = tmp_path_factory.mktemp("migrate")
    exe, rec_path, wl_path = tmp / "migrate", tmp / "rec.json", tmp / "wl.json"
    subprocess.run([cc, "-O2", "-o", str(exe), str(DATA / "migrate.c")], check=True)
    p = subprocess.run([*FT, "record", "-q", "--json", str(rec_path), "--", str(exe), str(wl_path)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    wl = json.loads(wl_path.read_text())
    rec = json.loads(rec_path.read_text())
    proc = next(p for p in rec["processes"] if p["pid"] == wl["pid"])
    return next(h for h in proc["hashes"] if h["kind"] == "private"), wl


def reference_bucket(wl: dict, i: int) -> int:
    return fidelity_ref.private_bucket(wl["base"] + 4 * i, wl["slots"] - 1)


def test_bucket_counts_exact_across_cpus(recorded):
    h, wl = recorded
    assert wl["slots"] == 16 and wl["cpus"] >= 2
    want = Counter()
    for i in range(wl["futexes"]):
        want[str(reference_bucket(wl, i))] += wl["rounds"] * wl["calls"]
    assert h["buckets"] == 16
    assert h["bucket_counts"] == dict(want)
    assert h["imbalance"]["used"] == len(want) <= h["imbalance"]["buckets"] == 16


def test_listed_futexes_in_their_own_buckets(recorded):
    """Every address the hottest buckets name hashes to that bucket."""
    h, wl = recorded
    index = {wl["base"] + 4 * i: i for i in range(wl["futexes"])}
    named = 0
    for row in h["hottest"]:
        assert row["node"] is None
        for addr in row["addresses"]:
            assert reference_bucket(wl, index[int(addr, 16)]) == row["bucket"], addr
            named += 1
    assert named > 0
