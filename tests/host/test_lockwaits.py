"""Bucket-lock contention against the real kernel, with ground truth from the
test's own jhash2 (fidelity_ref.private_bucket) and its own addresses.

tests/host/lockpair.c maps 64 KiB at a fixed address, sets a 16-slot private
hash (SET_SLOTS 16, checked with GET_SLOTS) and hammers FUTEX_WAIT_PRIVATE
with a non-matching value on two futex words chosen here: the kernel takes
the bucket lock, compares, returns EAGAIN. One `explain` run covers every
scenario (each its own process) to pay for one BPF compile:

- collide: two futexes the test places in one bucket -> collision waits > 0,
  both futexes named, advice names a size where the test's jhash2 separates them;
- apart:   the same first futex and one in another bucket, while two more
  threads storm one epoll instance's lock -> no collision waits, nothing
  counted outside the two buckets;
- one:     both threads on one futex -> same-futex waits, "will not help";
- storm:   the epoll storm alone -> no bucket-lock wait at all, while
  `perf stat -e lock:contention_begin` counts its (non-futex) waits.

Where perf stat sees no contention_begin for the colliding pair (a QEMU/TCG guest: the
hypervisor test-and-set spinlock fires no tracepoint), the counting tests skip, saying so.
"""
from __future__ import annotations

import json
import shlex
import shutil
import subprocess

import pytest

from futextrace.analysis.lockwaits import MEASURABLE_MS_PER_S
from tests.helpers.host import FT, REPO, needs_bpf, needs_private_hash
from tests.helpers.fidelity_ref import private_bucket

pytestmark = [pytest.mark.root, needs_bpf, needs_private_hash]

BASE = 0x7E0000000000          # lockpair.c's LOCKPAIR_BASE
MASK = 15                      # SET_SLOTS 16
SECONDS = 3


def _addresses() -> tuple[int, int, int]:
    """A, a futex in A's bucket, a futex in another bucket: 4-byte aligned words in the map."""
    words = [BASE + 64 * i for i in range(1, 1000)]
    a = words[0]
    same = next(w for w in words[1:] if private_bucket(w, MASK) == private_bucket(a, MASK))
    other = next(w for w in words[1:] if private_bucket(w, MASK) != private_bucket(a, MASK))
    return a, same, other


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("contention")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.fail("no C compiler: run scripts/bootstrap.sh")
    exe = tmp / "lockpair"
    subprocess.run([cc, "-O2", "-pthread", "-o", str(exe), str(REPO / "tests/host/lockpair.c")], check=True)
    a, same, other = _addresses()
    scenarios = {"collide": [hex(a), hex(same)], "apart": [hex(a), hex(other), "storm"],
                 "one": [hex(a), hex(a)], "storm": ["0", "0", "storm"]}
    lines = []
    for name, args in scenarios.items():
        cmd = [str(exe), str(SECONDS), *args]
        if name in ("storm", "collide") and shutil.which("perf"):
            cmd = ["perf", "stat", "-x,", "-e", "lock:contention_begin", "-o", str(tmp / f"{name}.perf"), "--", *cmd]
        lines.append(f"{shlex.join(cmd)} > {tmp / name}.out")
    script = tmp / "all.sh"
    script.write_text("set -e\nexport LOCKPAIR_RT=1\n" + "\n".join(lines) + "\n")
    out = tmp / "explain.json"
    res = subprocess.run([*FT, "explain", "--json", str(out), "-q", "--", "sh", str(script)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    pids = {}
    for name in scenarios:
        first = (tmp / f"{name}.out").read_text().split("\n")[0].split()
        assert first[0] == "ready" and first[3] == "16", first     # GET_SLOTS after SET_SLOTS 16
        pids[name] = int(first[1])
    doc = json.loads(out.read_text())
    perf = {n: _perf_count(tmp / f"{n}.perf") for n in ("storm", "collide")}
    return {"doc": doc, "pids": pids, "addr": (a, same, other), "perf": perf}


def _perf_count(path) -> int | None:
    if not path.exists():
        return None
    return next(int(ln.split(",")[0]) for ln in path.read_text().splitlines() if "contention_begin" in ln)


def _needs_spin_tracepoint(run) -> None:
    """Under a hypervisor without paravirt spinlocks (QEMU/TCG guests) the kernel
    takes the test-and-set fallback (virt_spin_lock), which fires no
    lock:contention tracepoint: perf sees none for the hammered bucket lock
    either, and there is nothing to count. Said, not failed."""
    n = run["perf"]["collide"]
    if n is not None and n < 100:
        pytest.skip(f"lock:contention_begin fired {n} times for the colliding pair (perf stat): "
                    "spinlock slow path without the tracepoint here (hypervisor test-and-set fallback)")


def _proc(run, name) -> dict | None:
    c = run["doc"]["recording"]["contention"]
    return next((p for p in c["processes"] if p["pid"] == run["pids"][name]), None)


def _advice(run, name) -> dict:
    p = next(p for p in run["doc"]["explanation"]["processes"] if p["pid"] == run["pids"][name])
    return p["recommendation"]


def test_attached(run):
    c = run["doc"]["recording"]["contention"]
    assert c["status"].startswith("attached"), c["status"]
    assert c["waits_lost"] == 0


def test_colliding_pair(run):
    _needs_spin_tracepoint(run)
    a, same, _ = run["addr"]
    p = _proc(run, "collide")
    assert p and p["by_cause"]["collision"]["waits"] > 0
    b = p["buckets"][0]
    assert (b["bucket"], b["buckets"]) == (private_bucket(a, MASK), 16)
    assert {int(f["uaddr"], 16) for f in b["futexes"] if f["uaddr"]} == {a, same}
    assert b["max_ns"] > 0 and b["wait_ns"] >= b["max_ns"]
    rcm = _advice(run, "collide")
    size = rcm["slots"]
    assert size and "collisions cost" in rcm["effect"]
    # The test's own jhash2: at that size they part, at every smaller one above 16 they do not.
    assert private_bucket(a, size - 1) != private_bucket(same, size - 1)
    s = 32
    while s < size:
        assert private_bucket(a, s - 1) == private_bucket(same, s - 1)
        s *= 2


def test_pair_in_different_buckets_with_epoll_storm(run):
    a, _, other = run["addr"]
    p = _proc(run, "apart")
    if p is None:
        return      # no wait at all: nothing counted, which is the claim
    assert p["by_cause"]["collision"]["waits"] == 0
    for b in p["buckets"]:
        assert b["bucket"] in (private_bucket(a, MASK), private_bucket(other, MASK))
        assert {f["uaddr"] for f in b["futexes"]} <= {hex(a), hex(other), None}


def test_one_futex(run):
    _needs_spin_tracepoint(run)
    a, _, _ = run["addr"]
    p = _proc(run, "one")
    assert p and p["by_cause"]["same_futex"]["waits"] > 0 and p["by_cause"]["collision"]["waits"] == 0
    assert [f["uaddr"] for f in p["buckets"][0]["futexes"]] == [hex(a)]
    rcm = _advice(run, "one")
    assert rcm["slots"] is None, rcm
    # With a CPU busy elsewhere the two threads seldom overlap: below the
    # measurable rate the advice says so instead (still no size).
    same = p["by_cause"]["same_futex"]["wait_ns"] / 1e6 / run["doc"]["recording"]["contention"]["window_s"]
    if same >= MEASURABLE_MS_PER_S:
        assert "more buckets will not help" in rcm["effect"], (same, rcm)
    else:
        assert "will not help" not in rcm["effect"] and "prctl" not in rcm["effect"], (same, rcm)


def test_non_futex_lock_never_counted(run):
    assert _proc(run, "storm") is None
    if run["perf"]["storm"] is None:
        pytest.skip("no perf: the storm's own contention is not confirmed")
    # The storm did contend a kernel lock, counted by perf. On a host busy with
    # other work (VM guests beside this suite) the storm's threads run less
    # often: 164 contentions once against 1,000+ when idle, which still shows it.
    assert run["perf"]["storm"] > 100, run["perf"]


def test_no_wait_costs_nothing(run):
    """The storm process has a 16-slot hash and no futex traffic: nothing measurable."""
    rcm = _advice(run, "storm")
    if rcm is None:
        pytest.skip("no lookups from the storm process: no recommendation to check")
    assert rcm["slots"] is None and "costs nothing measurable" in rcm["effect"]


def test_serve_series(tmp_path, run):
    """serve: the colliding pair's waits appear as collision series under its own pid."""
    _needs_spin_tracepoint(run)
    import os
    import re

    from tests.helpers.host import wait_until
    from tests.helpers.serve import Exporter, http_get
    cc = shutil.which("cc") or shutil.which("gcc")
    exe = tmp_path / "lockpair"
    subprocess.run([cc, "-O2", "-pthread", "-o", str(exe), str(REPO / "tests/host/lockpair.c")], check=True)
    a, same, _ = _addresses()
    e = Exporter(tmp_path, "--max-processes", "10", "--min-interval", "0.2")
    try:
        w = subprocess.Popen([str(exe), "3", hex(a), hex(same)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "LOCKPAIR_RT": "1"})
        pid = int(w.stdout.readline().split()[1])
        pat = re.compile(r'futextrace_bucket_lock_waits_total\{cause="collision",comm="lockpair",pid="%d"\} '
                         r"([0-9.e+]+)" % pid)

        def seen():
            m = pat.search(http_get(e.url) or "")
            return m and float(m.group(1)) > 0
        assert wait_until(seen, timeout=15)
        w.wait()
        page = http_get(e.url)
        assert f'futextrace_bucket_lock_wait_seconds_total{{cause="collision",comm="lockpair",pid="{pid}"}}' in page
        assert 'futextrace_bucket_lock_waits_total{cause="same_futex",comm="other",pid=""}' in page
    finally:
        e.stop()


def test_raw_tracepoint_fallback(tmp_path, run):
    """Where tp_btf is not used, the raw tracepoints count the colliding pair alike."""
    _needs_spin_tracepoint(run)
    import os
    cc = shutil.which("cc") or shutil.which("gcc")
    exe = tmp_path / "lockpair"
    subprocess.run([cc, "-O2", "-pthread", "-o", str(exe), str(REPO / "tests/host/lockpair.c")], check=True)
    a, same, _ = _addresses()
    out = tmp_path / "rec.json"
    res = subprocess.run([*FT, "record", "-q", "--json", str(out), "--", str(exe), "2", hex(a), hex(same)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "FUTEXTRACE_NO_TP_BTF": "1", "LOCKPAIR_RT": "1"})
    assert res.returncode == 0, res.stderr
    rec = json.loads(out.read_text())
    c = rec["contention"]
    assert c["status"].startswith("attached (raw_tracepoint"), c["status"]
    assert "raw_tracepoint:contention_begin" in rec["method"]["probes"]
    pid = rec["command"]["pid"]
    p = next(p for p in c["processes"] if p["pid"] == pid)
    assert p["by_cause"]["collision"]["waits"] > 0
    assert {int(f["uaddr"], 16) for f in p["buckets"][0]["futexes"] if f["uaddr"]} == {a, same}
