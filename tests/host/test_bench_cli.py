"""`futextrace bench` and `sweep` end to end (untraced: no root, no BPF), and their errors."""
import json
import os
import re

import pytest

from futextrace.bench import sweep
from futextrace.errors import UsageError
from tests.helpers.host import cli as run_cli
from tests.helpers.host import needs_private_hash, one_line_error


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return {**os.environ, "FUTEXTRACE_CACHE": str(tmp_path_factory.mktemp("cache"))}


def cli(env, *args):
    return run_cli(*args, env=env, timeout=120)


@needs_private_hash
def test_bench_builtin(env):
    res = cli(env, "bench", "--no-trace", "-t", 2, "-f", 64, "-r", 0.3, "-b", 64)
    assert res.returncode == 0, res.stderr
    assert "Averaged" in res.stdout and "in use: 64 buckets" in res.stdout
    assert res.stdout.count("[thread") == 2


def test_bench_json(env, tmp_path):
    out = tmp_path / "b.json"
    res = cli(env, "bench", "--no-trace", "-t", 1, "-f", 8, "-r", 0.2, "--json", out)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "futextrace-bench" and doc["recording"] is None
    assert doc["result"]["runner"] == "builtin" and doc["result"]["avg_ops_per_sec"] > 0


@pytest.mark.parametrize("args, code, words", [
    (["-t", 0], 2, "threads must be at least 1"),
    (["-r", -1], 2, "runtime must be a positive"),
    (["-f", 0], 2, "futexes"),
    (["-b", 15], 2, "power of two"),
    (["-b", 1], 2, "power of two"),
    (["-b", "lots"], 2, "buckets"),
    (["-b", 1 << 32], 2, "at most"),
    (["--runner", "perf", "-r", 0.5], 2, "whole seconds"),
])
def test_bench_bad_options(env, args, code, words):
    assert words in one_line_error(cli(env, "bench", "--no-trace", *args), code)


@needs_private_hash
def test_bench_enomem_from_kernel(env):
    line = one_line_error(cli(env, "bench", "--no-trace", "-t", 1, "-r", 0.1, "-b", 1 << 29), 6)
    assert "ENOMEM" in line and "536870912" in line


@pytest.mark.parametrize("args, words", [
    (["--buckets", "3-3"], "no power of two"),
    (["--buckets", "2,6"], "power of two"),
    (["--buckets", "8-2"], "empty range"),
    (["--buckets", "2", "--plot", "x.pdf"], ".png or .svg"),
    (["--buckets", "2", "-t", 0], "threads"),
    (["--buckets", "2", "--repeat", 0], "repeat"),
])
def test_sweep_bad_options(env, args, words):
    assert words in one_line_error(cli(env, "sweep", *args), 2)


@needs_private_hash
def test_sweep_table_json_plot(env, tmp_path):
    j, png = tmp_path / "s.json", tmp_path / "s.png"
    res = cli(env, "sweep", "--buckets", "2,8", "-t", 1, "-f", 16, "-r", 0.1, "--repeat", 2,
              "--json", j, "--plot", png)
    assert res.returncode == 0, res.stderr
    doc = json.loads(j.read_text())
    assert [p["buckets"] for p in doc["points"]] == ["auto", "global", "2", "8"]
    assert [p["slots"] for p in doc["points"]][1:] == [0, 2, 8]
    assert all(len(p["runs_ops_per_sec"]) == 2 for p in doc["points"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for word in ("auto", "global", "ops/s per thread"):
        assert word in res.stdout


def test_parse_bucket_list():
    assert sweep.parse_bucket_list("2-16") == [2, 4, 8, 16]
    assert sweep.parse_bucket_list("3-9,64,2") == [2, 4, 8, 64]
    full = sweep.parse_bucket_list(sweep.DEFAULT_BUCKETS)
    assert full[0] == 2 and full[-1] == 131072 and len(full) == 17
    for bad in ("", "auto", "2-x", "12"):
        with pytest.raises(UsageError):
            sweep.parse_bucket_list(bad)


def test_trace_figures_from_recording():
    rec = {"command": {"pid": 42}, "processes": [
        {"pid": 7, "lookups": 999, "hashes": []},
        {"pid": 42, "lookups": 100, "hashes": [
            {"kind": "private", "buckets": 64, "collisions": 3,
             "imbalance": {"buckets": 64, "used": 40, "max_over_mean": 2.5, "cv": 0.7}}]}]}
    assert sweep.trace_figures(rec) == {"max/mean": 2.5, "cv": 0.7, "buckets used": "40/64",
                                        "collisions": 3}
    assert sweep.trace_figures(None) == {}
    assert sweep.trace_figures({"processes": []}) == {}


@pytest.mark.root
@needs_private_hash
def test_bench_traced_counts_agree():
    """With the recorder present, the tracer sees every operation the workload made.
    Default cache: the recorder also keeps its kernel headers there."""
    pytest.importorskip("futextrace.record.recorder")
    if os.geteuid() != 0:
        pytest.skip("tracing needs root")
    res = cli(dict(os.environ), "bench", "-t", 1, "-f", 8, "-r", 0.2, "-b", 16)
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("Traced:"))
    seen, ops = (int(x.replace(",", "")) for x in
                 re.findall(r"([\d,]+) (?:futex lookups|ops)", line))
    assert ops > 0 and abs(seen - ops) <= 16   # a few futex calls of libc's own at exit
