"""Parser for `perf bench futex hash` output (recorded strings, no perf needed)."""
import pytest

from futextrace.bench import perfbench
from futextrace.errors import EnvironmentProblem, KernelRefused

# Debian linux-perf 6.1 on the build machine (no -b, no "Futex hashing" line).
PERF_61 = """\
# Running 'futex/hash' benchmark:
Run summary [PID 5841]: 2 threads, each operating on 1024 [private] futexes for 1 secs.

[thread  0] futexes: 0x5636b60453f0 ... 0x5636b60463ec [ 3618672 ops/sec ]
[thread  1] futexes: 0x5636b60473f0 ... 0x5636b60483ec [ 3512320 ops/sec ]

Averaged 3565496 operations/sec (+- 1.49%), total secs = 1
"""

PERF_61_SILENT_SHARED = """\
# Running 'futex/hash' benchmark:
Run summary [PID 6819]: 2 threads, each operating on 1 [shared] futexes for 1 secs.

Averaged 2752457 operations/sec (+- 0.17%), total secs = 1
"""

# 6.17+ format strings (tools/perf/bench/futex-hash.c, futex.c), nfutexes == 1.
PERF_617_SINGLE = """\
# Running 'futex/hash' benchmark:
Run summary [PID 901]: 1 threads, each operating on 1 [private] futexes for 10 secs.

[thread  0] futex: 0x55d0c5e2a2a0 [ 4012345 ops/sec ]

Averaged 4012345 operations/sec (+- 0.00%), total secs = 10
Futex hashing: 64 hash buckets
"""


def test_parse_61_full():
    p = perfbench.parse_output(PERF_61)
    assert (p["pid"], p["threads"], p["futexes"], p["shared"], p["runtime"]) == \
        (5841, 2, 1024, False, 1)
    assert [t["ops_per_sec"] for t in p["per_thread"]] == [3618672, 3512320]
    assert p["per_thread"][0]["first_addr"] == "0x5636b60453f0"
    assert p["per_thread"][0]["last_addr"] == "0x5636b60463ec"
    assert (p["avg_ops_per_sec"], p["stddev_pct"], p["total_secs"]) == (3565496, 1.49, 1)
    assert p["hashing"] is None and p["slots"] is None and p["error"] is None


def test_parse_silent_shared():
    p = perfbench.parse_output(PERF_61_SILENT_SHARED)
    assert p["shared"] is True and p["futexes"] == 1
    assert p["per_thread"] == []
    assert p["avg_ops_per_sec"] == 2752457 and p["stddev_pct"] == 0.17


def test_parse_single_futex_and_buckets():
    p = perfbench.parse_output(PERF_617_SINGLE)
    assert p["per_thread"] == [{"thread": 0, "first_addr": "0x55d0c5e2a2a0",
                                "last_addr": "0x55d0c5e2a2a0", "ops_per_sec": 4012345}]
    assert (p["hashing"], p["slots"]) == ("custom", 64)


@pytest.mark.parametrize("line, hashing, slots, immutable", [
    ("Futex hashing: global hash", "global", 0, False),
    ("Futex hashing: 64 hash buckets", "custom", 64, False),
    ("Futex hashing: 128 hash buckets (immutable)", "custom", 128, True),   # 6.16
    ("Futex hashing: 128 hash buckets ", "custom", 128, False),             # 6.16, mutable
    ("Futex hashing: auto resized to 16 buckets", "auto", 16, False),
])
def test_hashing_line(line, hashing, slots, immutable):
    p = perfbench.parse_output(PERF_61 + line + "\n")
    assert (p["hashing"], p["slots"], p["immutable"]) == (hashing, slots, immutable)


def test_set_slots_failure_is_kernel_refused():
    text = ("# Running 'futex/hash' benchmark:\n"
            "Requesting 15 hash buckets failed: -1/Invalid argument\n")
    p = perfbench.parse_output(text)
    assert p["error"] == {"buckets": 15, "result": -1, "message": "Invalid argument"}
    with pytest.raises(KernelRefused, match="15 hash buckets failed"):
        perfbench.check_result(p, 255, text)


def test_missing_average_is_an_error():
    text = "# Running 'futex/hash' benchmark:\nperf: some failure\n"
    with pytest.raises(EnvironmentProblem, match="some failure"):
        perfbench.check_result(perfbench.parse_output(text), 1, text)


def test_perf_argv_without_b_support(monkeypatch):
    from futextrace.errors import UsageError
    monkeypatch.setattr(perfbench, "supported_options", lambda perf: frozenset("tfrsSm"))
    argv = perfbench.perf_argv(2, 16, 1, perf="/usr/bin/perf", shared=True)
    assert argv == ["/usr/bin/perf", "bench", "futex", "hash", "-t", "2", "-f", "16", "-r", "1",
                    "-S"]
    with pytest.raises(UsageError, match="no -b"):
        perfbench.perf_argv(2, 16, 1, buckets=64, perf="/usr/bin/perf")
    with pytest.raises(UsageError, match="whole seconds"):
        perfbench.perf_argv(2, 16, 0.5, perf="/usr/bin/perf")


def test_perf_argv_with_b_support(monkeypatch):
    monkeypatch.setattr(perfbench, "supported_options", lambda perf: frozenset("btfrsSm"))
    argv = perfbench.perf_argv(1, 1, 1, buckets=0, perf="perf")
    assert argv[-2:] == ["-b", "0"]
