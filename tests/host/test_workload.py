"""The native futexbench workload: exact counts, addresses, SET_SLOTS outcomes, bad options.

Needs a C compiler; no root and no BPF. SET_SLOTS tests need a kernel with the
futex private hash (6.17+); they are skipped elsewhere.
"""
import errno
import json
import os
import subprocess
import time

import pytest

from futextrace.workload import build
from tests.helpers.host import needs_private_hash


@pytest.fixture(scope="session")
def futexbench(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("FUTEXTRACE_CACHE")
    os.environ["FUTEXTRACE_CACHE"] = str(cache)
    try:
        path = str(build.workload_path())
    finally:
        # Restore at once: later tests (the VM guests) need the real cache.
        if old is None:
            del os.environ["FUTEXTRACE_CACHE"]
        else:
            os.environ["FUTEXTRACE_CACHE"] = old
    yield path


def run(binary, *args, check=True):
    res = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=30)
    if check:
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)
    return res


def test_build_is_cached_by_source_hash(futexbench, tmp_path, monkeypatch):
    """A second call reuses the binary without a compiler; a changed source
    builds a new one beside it."""
    monkeypatch.setenv("FUTEXTRACE_CACHE", str(tmp_path))
    first = build.workload_path()
    built_at = first.stat().st_mtime_ns
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))   # compiling now would fail
    assert build.workload_path() == first and first.stat().st_mtime_ns == built_at
    monkeypatch.delenv("CC")
    source = build._source("futexbench")
    monkeypatch.setattr(build, "_source", lambda name: source + b"\n/* changed */\n")
    second = build.workload_path()
    assert second != first and second.is_file() and first.is_file()
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == sorted([first.name, second.name])
    assert os.path.basename(futexbench).startswith("futexbench-")
    # Built into the fixture's own cache (FUTEXTRACE_CACHE at build time), under bin/.
    assert os.path.basename(os.path.dirname(futexbench)) == "bin"
    assert os.path.dirname(futexbench) != str(build.cache_dir())


def test_exact_iteration_counts(futexbench):
    r = run(futexbench, "-t", 3, "-f", 5, "-n", 7)
    assert r["threads"] == 3 and r["futexes"] == 5 and r["iterations"] == 7
    assert [t["ops"] for t in r["per_thread"]] == [35, 35, 35]
    assert r["total_ops"] == 105
    assert r["pid"] > 0 and r["runtime"] > 0


def test_addresses(futexbench):
    r = run(futexbench, "-t", 2, "-f", 20, "-n", 1, "--addrs")
    blocks = [[int(a, 16) for a in t["addrs"]] for t in r["per_thread"]]
    for addrs in blocks:
        assert len(addrs) == 20
        assert addrs[0] % 64 == 0                      # own cache-line-aligned block
        assert all(b - a == 4 for a, b in zip(addrs, addrs[1:]))
    assert not set(blocks[0]) & set(blocks[1])
    assert "addrs" not in run(futexbench, "-t", 1, "-f", 2, "-n", 1)["per_thread"][0]


def test_runtime_mode(futexbench):
    r = run(futexbench, "-t", 1, "-f", 16, "-r", 0.2)
    assert r["runtime_requested"] == pytest.approx(0.2)
    assert 0.2 <= r["runtime"] < 2
    assert r["total_ops"] > 0 and r["total_ops"] % 16 == 0     # whole passes only
    assert r["avg_ops_per_sec"] > 0 and r["stddev_pct"] == 0


def test_shared(futexbench):
    r = run(futexbench, "-t", 2, "-f", 4, "-n", 3, "-S")
    assert r["shared"] is True and r["total_ops"] == 24


@needs_private_hash
def test_set_slots_64(futexbench):
    r = run(futexbench, "-t", 2, "-f", 4, "-n", 2, "-b", 64)
    assert (r["prctl_result"], r["slots_before_threads"], r["slots_after"]) == (0, 64, 64)


@needs_private_hash
def test_set_slots_0_is_global(futexbench):
    r = run(futexbench, "-t", 2, "-f", 4, "-n", 2, "-b", 0)
    assert (r["prctl_result"], r["slots_after"]) == (0, 0)


@needs_private_hash
def test_auto_resize_at_first_thread(futexbench):
    r = run(futexbench, "-t", 2, "-f", 4, "-n", 2)
    assert r["prctl_result"] is None and r["buckets_requested"] == -1
    assert r["slots_before_threads"] == 0          # single-threaded: no private hash yet
    s = r["slots_after"]
    assert s >= 16 and s & (s - 1) == 0


@needs_private_hash
@pytest.mark.parametrize("buckets, name", [(15, "EINVAL"), (1, "EINVAL"), (1 << 29, "ENOMEM")])
def test_set_slots_refused(futexbench, buckets, name):
    res = run(futexbench, "-t", 1, "-n", 1, "-b", buckets, check=False)
    assert res.returncode == 3
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    assert f"errno={getattr(errno, name)} {name}" in lines[0]


@pytest.mark.parametrize("args, words", [
    (["-t", 0], "threads"), (["-t", "abc"], "not a number"), (["-f", 0], "futexes"),
    (["-r", -1], "runtime"), (["-r", "x"], "runtime"), (["-n", 0], "iterations"),
    (["-b", -2], "buckets"), (["-x"], "unknown option"), (["-t"], "needs a value"),
    (["extra"], "unexpected argument"),
])
def test_bad_options(futexbench, args, words):
    res = run(futexbench, *args, check=False)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("futexbench: error: ") and words in lines[0]


def test_wait_fd_holds_the_start(futexbench):
    r, w = os.pipe()
    p = subprocess.Popen([futexbench, "-t", "1", "-f", "1", "-n", "1", "--wait-fd", str(r)],
                         pass_fds=[r], stdout=subprocess.PIPE, text=True)
    os.close(r)
    time.sleep(0.2)
    assert p.poll() is None            # still waiting for the go byte
    os.write(w, b"g")
    os.close(w)
    out, _ = p.communicate(timeout=10)
    assert json.loads(out)["total_ops"] == 1
