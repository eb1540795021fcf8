"""`futextrace diff` (analysis/compare.py, output/text/diff_text.py, commands/diff.py)
on the recorded fixtures and on recordings built here. Expected values come from
the JSON fields directly, never from the module under test."""
from __future__ import annotations

import copy
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from futextrace.analysis.compare import compare
from futextrace.output.text.diff_text import render

DATA = Path(__file__).parent.parent / "data"
PNG = b"\x89PNG\r\n\x1a\n"


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def cli(*args):
    return subprocess.run([sys.executable, "-m", "futextrace.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def write(tmp_path: Path, name: str, doc: dict) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_fixtures_same_comm_other_pid_matched_by_name():
    a, b = load("recording-tp-auto.json"), load("recording-tp-64.json")
    pa, pb = a["processes"][0], b["processes"][0]
    assert pa["pid"] != pb["pid"] and pa["comm"] == pb["comm"]
    cmp = compare(a, b)
    [pair] = cmp["processes"]
    assert pair["match"] == "comm"
    assert (pair["a"]["pid"], pair["b"]["pid"]) == (pa["pid"], pb["pid"])
    rate = pair["figures"]["lookups_per_s"]
    ra, rb = pa["lookups"] / a["duration_s"], pb["lookups"] / b["duration_s"]
    assert rate["a"] == pytest.approx(ra) and rate["b"] == pytest.approx(rb)
    assert rate["diff"] == pytest.approx(rb - ra) and rate["ratio"] == pytest.approx(rb / ra)
    # No -i intervals: the noise is not known, and not made up.
    assert rate["noise_a"] is None and rate["noise_b"] is None
    private = pair["hashes"][0]
    ha, hb = pa["hashes"][0], pb["hashes"][0]
    assert private["kind"] == "private"
    assert (private["a"]["buckets"], private["b"]["buckets"]) == (ha["buckets"], hb["buckets"])
    # The fixtures' hash states say which size was set by prctl.
    assert private["a"]["mode"] == "auto" and private["b"]["mode"] == "custom"
    share = private["figures"]["busiest_share"]
    assert share["a"] == pytest.approx(ha["imbalance"]["max"] / ha["lookups"])
    assert share["b"] == pytest.approx(hb["imbalance"]["max"] / hb["lookups"])
    coll = private["figures"]["collisions"]
    assert (coll["a"], coll["b"], coll["diff"]) == (ha["collisions"], hb["collisions"],
                                                    hb["collisions"] - ha["collisions"])
    text = render(cmp)
    assert f"PID {pa['pid']} {pa['comm']} ↔ PID {pb['pid']} {pb['comm']} (matched by command name" in text
    assert f"A {ha['buckets']} buckets, auto; B {hb['buckets']} buckets, custom" in text


def test_figures_these_recordings_lack_are_unknown():
    """Neither fixture has atomic_lookups nor a contention section: no 0 stands in."""
    cmp = compare(load("recording-tp-auto.json"), load("recording-tp-64.json"))
    figs = cmp["processes"][0]["figures"]
    for name in ("atomic_share", "wait_ms_per_s", "collision_wait_ms_per_s", "throughput_ops_per_s"):
        assert figs[name]["a"] is None and figs[name]["b"] is None and figs[name]["diff"] is None, name
    row = next(ln for ln in render(cmp).splitlines() if "atomic refcount share" in ln)
    assert row.split()[3:] == ["-", "-", "-", "-"]


def test_a_figure_missing_from_one_side_shows_unknown():
    a = load("recording-tp-32-intervals.json")
    b = copy.deepcopy(a)
    del b["processes"][0]["atomic_lookups"]      # as a recording from before that field
    del b["contention"]                          # lock waits not measured
    cmp = compare(a, b)
    [pair] = cmp["processes"]
    assert pair["match"] == "pid"
    atomic = pair["figures"]["atomic_share"]
    private = sum(h["lookups"] for h in a["processes"][0]["hashes"] if h["kind"] == "private")
    assert atomic["a"] == a["processes"][0]["atomic_lookups"] / private
    assert atomic["b"] is None and atomic["diff"] is None and atomic["ratio"] is None
    waits = pair["figures"]["wait_ms_per_s"]
    assert waits["a"] == pytest.approx(a["contention"]["processes"][0]["wait_ns"] / 1e6
                                       / a["contention"]["window_s"])
    assert waits["b"] is None
    lines = render(cmp).splitlines()
    row = next(ln for ln in lines if "atomic refcount share" in ln)
    assert "0.0% ±?" in row and row.split()[-3:] == ["-", "-", "-"]
    row = next(ln for ln in lines if "lock waits ms/s" in ln)
    assert row.split()[-3:] == ["-", "-", "-"]


def test_interval_spread_is_the_noise():
    a = load("recording-tp-32-intervals.json")
    pid = a["processes"][0]["pid"]
    rates = [r["lookups_per_s"] for iv in a["intervals"] for r in iv["processes"] if r["pid"] == pid]
    cmp = compare(a, a)
    noise = cmp["processes"][0]["figures"]["lookups_per_s"]["noise_a"]
    assert noise["source"] == "intervals" and noise["n"] == len(rates) == 4
    assert noise["stdev"] == pytest.approx(statistics.stdev(rates))
    assert noise["stdev_pct"] == pytest.approx(statistics.stdev(rates) / statistics.fmean(rates) * 100)
    # The busiest bucket's share per interval, from the interval rows' bucket counts.
    shares = [max(r["bucket_counts"].values()) / sum(r["bucket_counts"].values())
              for iv in a["intervals"] for r in iv["processes"] if r["pid"] == pid]
    bshare = cmp["processes"][0]["hashes"][0]["figures"]["busiest_share"]["noise_a"]
    assert bshare["stdev"] == pytest.approx(statistics.stdev(shares))
    assert f"±{statistics.stdev(rates) / statistics.fmean(rates) * 100:.1f}%" in render(cmp)


def _proc(pid: int, comm: str, lookups: int, buckets: int = 16) -> dict:
    h = {"kind": "private", "buckets": buckets, "lookups": lookups, "distinct_futexes": 4, "collisions": 1,
         "imbalance": {"buckets": buckets, "used": 3, "max": lookups // 2, "mean": lookups / buckets,
                       "max_over_mean": 1.0, "cv": 1.0}}
    return {"pid": pid, "comm": comm, "lookups": lookups, "atomic_lookups": 0, "hashes": [h]}


def _rec(procs: list[dict], duration: float = 2.0) -> dict:
    base = load("recording-tp-64.json")
    base.update(duration_s=duration, processes=procs, hash_states=[], resizes=[], intervals=[])
    base.pop("contention", None)
    return base


def test_pairs_by_pid_then_name_and_lists_the_rest():
    a = _rec([_proc(10, "svc", 1000), _proc(11, "worker", 500), _proc(12, "gone", 300)])
    b = _rec([_proc(10, "svc", 2000), _proc(99, "worker", 800), _proc(13, "new", 100)], duration=4.0)
    cmp = compare(a, b)
    got = [(p["match"], (p["a"] or {}).get("pid"), (p["b"] or {}).get("pid")) for p in cmp["processes"]]
    assert got == [("pid", 10, 10), ("comm", 11, 99), ("only_a", 12, None), ("only_b", None, 13)]
    worker = cmp["processes"][1]["figures"]["lookups_per_s"]
    assert (worker["a"], worker["b"], worker["ratio"]) == (500 / 2.0, 800 / 4.0, (800 / 4.0) / (500 / 2.0))
    gone = cmp["processes"][2]["figures"]["lookups_per_s"]
    assert gone["a"] == 300 / 2.0 and gone["b"] is None
    text = render(cmp)
    assert "PID 10 svc (matched by pid)" in text
    assert "PID 11 worker ↔ PID 99 worker (matched by command name; the pids differ)" in text
    assert "PID 12 gone: only in A" in text and "PID 13 new: only in B" in text
    # Unknown modes (no hash state) are said, not guessed.
    assert "A 16 buckets, mode unknown" in text


def test_bench_file_brings_its_throughput_and_stddev(tmp_path):
    rec = _rec([_proc(10, "futexbench", 1000)])
    result = {"pid": 10, "avg_ops_per_sec": 123456.0, "stddev_pct": 2.5}
    a = write(tmp_path, "a.json", {"schema": "futextrace-bench", "schema_version": 1,
                                   "result": result, "recording": rec, "notes": []})
    b = write(tmp_path, "b.json", {"explanation": {}, "recording": rec})     # explain --json
    r = cli("diff", a, b, "--json", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "futextrace-diff" and doc["a"]["file"] == str(a)
    ops = doc["processes"][0]["figures"]["throughput_ops_per_s"]
    assert ops["a"] == 123456.0 and ops["noise_a"] == {"source": "benchmark", "stdev_pct": 2.5}
    assert ops["b"] is None and ops["diff"] is None


@pytest.mark.parametrize("content", ["not json", '{"schema": "futextrace-bench", "recording": null}',
                                     '{"schema": "other", "schema_version": 1}'])
def test_not_a_recording_is_one_line_exit_5(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    r = cli("diff", bad, DATA / "recording-tp-64.json")
    assert r.returncode == 5
    assert r.stderr.startswith(f"futextrace: error: {bad} is not a futextrace recording")
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr and r.stdout == ""


def test_plot_writes_one_picture(tmp_path):
    out = tmp_path / "diff.png"
    r = cli("diff", DATA / "recording-tp-32-intervals.json", DATA / "recording-tp-auto.json",
            "-q", "--plot", out)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes().startswith(PNG)
