"""The summary on recorded data: small processes folded into one line, figures
that mean nothing for a few lookups left out, histograms from their first
non-zero row, shared-futex bucket figures shown as n/a (issue 27, items 5 and 7)."""
import copy
import json
from pathlib import Path

from futextrace.kernel.layout import KIND
from futextrace.output.text.render import FOLD_TOP, fold_processes, log2_hist, render_text
from futextrace.output.text import live_text
from futextrace.record import live

SAMPLE = Path(__file__).parent.parent / "data" / "recording-tp-auto.json"
NA = "n/a (shared futexes: bucket not visible with this method)"


def sample() -> dict:
    return json.loads(SAMPLE.read_text())


def tiny(pid: int, lookups: int) -> dict:
    """A process with a few lookups on a 16-bucket private hash."""
    hist = [{"low": 0, "high": 0, "count": 16 - lookups}, {"low": 1, "high": 1, "count": lookups}]
    return {"pid": pid, "comm": "tiny", "lookups": lookups, "atomic_lookups": 0, "futex_list": None,
            "hashes": [{"kind": "private", "buckets": 16, "lookups": lookups, "distinct_futexes": lookups,
                        "imbalance": {"buckets": 16, "used": lookups, "max": 1, "mean": lookups / 16,
                                      "max_over_mean": 16 / lookups, "cv": 2.0},
                        "lookups_per_bucket_hist": hist, "futexes_per_bucket_hist": hist, "collisions": 0,
                        "hottest": [], "bucket_counts": {}}]}


def with_tiny(rec: dict, n: int, lookups: int = 3) -> dict:
    rec = copy.deepcopy(rec)
    rec["processes"] += [tiny(90000 + i, lookups) for i in range(n)]
    return rec


def test_histogram_starts_at_its_first_nonzero_power():
    rows = [{"low": 0, "high": 0, "count": 2}] + [
        {"low": 1 << k, "high": (1 << (k + 1)) - 1, "count": 7 if k == 19 else 0} for k in range(20)]
    lines = log2_hist(rows, "lookups/bucket")
    assert [ln.split(":")[0].split() for ln in lines[1:]] == [["0", "->", "0"], ["524288", "->", "1048575"]]
    # Without unused buckets, the 0 row goes too.
    assert len(log2_hist(rows[1:], "x")) == 2


def test_forty_tiny_processes_fold_and_verbose_lists_them():
    rec = with_tiny(sample(), 40)
    text = render_text(rec)
    assert text.count("\nPID ") == 1
    assert "... 40 more processes, 120 lookups (each under 1% of all, or beyond the 10 busiest); " \
        "-v lists them" in text
    assert len(text.splitlines()) < 100
    verbose = render_text(rec, verbose=True)
    assert all(f"  PID {90000 + i} (tiny): 3 lookups (private hash, 16 buckets 3)" in verbose for i in range(40))


def test_targets_are_never_folded_and_the_busiest_are_capped():
    rec = with_tiny(sample(), 2)
    rec["hash_at_attach"] = {"source": "iterator", "targets": [90001], "processes": {}, "note": "n"}
    shown, folded = fold_processes(rec)
    assert [p["pid"] for p in shown] == [15505, 90001] and [p["pid"] for p in folded] == [90000]
    rec = copy.deepcopy(sample())
    rec["processes"] = [{**rec["processes"][0], "pid": i} for i in range(FOLD_TOP + 3)]
    shown, folded = fold_processes(rec)
    assert len(shown) == FOLD_TOP and len(folded) == 3


def test_too_few_lookups_for_max_mean_cv_and_histograms():
    rec = copy.deepcopy(sample())
    rec["processes"] = [tiny(7, 3)]
    text = render_text(rec)
    assert "max/mean 5.33" not in text and "CV 2.00" not in text and "lookups/bucket" not in text
    assert "buckets used 3 of 16; collisions 0 (futexes beyond one per bucket); too few lookups for max/mean, " \
        "CV and histograms" in text


def test_shared_hash_figures_are_na_in_the_text():
    text = render_text(sample())
    # The sample predates the n/a note: its old note is not shown either.
    assert f"    buckets used, max/mean, collisions: {NA}" in text.splitlines()


def test_shared_hash_reason_said_once():
    """Four processes on shared futexes (stress-ng --futex 2): the reason once,
    then "as above"."""
    rec = copy.deepcopy(sample())
    shared = next(h for p in rec["processes"] for h in p["hashes"] if h["kind"] == "global_shared")
    rec["processes"] = [{**rec["processes"][0], "pid": 500 + i, "lookups": 1000 - i, "hashes": [shared]}
                        for i in range(3)]
    lines = render_text(rec).splitlines()
    assert lines.count(f"    buckets used, max/mean, collisions: {NA}") == 1
    assert lines.count("    buckets used, max/mean, collisions: n/a (shared futexes, as above)") == 2


def shared_futex(tgid, uaddr, lookups, cpus=2):
    per_cpu = [[0, 0, 0, 0, 0] for _ in range(cpus)]
    per_cpu[0] = [lookups, 0, 0xFFFFFFFF, -1, 0xFFFFFFFF]
    return {"tgid": tgid, "kind": KIND["FT_GLOBAL_SHARED"], "uaddr": uaddr, "hash_mask": 0, "per_cpu": per_cpu}


def test_live_view_shared_buckets_are_null_with_a_reason():
    after = live.futex_counts([shared_futex(10, 0x1000, 50), shared_futex(10, 0x2000, 30)])
    (row,) = live.processes({}, after, 1.0, {10: "app"})
    assert (row["buckets_touched"], row["max_over_mean"], row["buckets_unknown"]) == (None, None, NA)
    lines = live_text.render({"t": 1.0, "interval_s": 1.0, "lookups": 80, "private": 0, "global": 80,
                         "unattributed": 0, "lost_events": 0, "resizes": 0}, [row], False)
    assert lines[2].split()[5:7] == ["n/a", "n/a"] and lines[3] == f"  BUCKETS, MAX/MEAN {NA}"
    buckets = [{"tgid": 10, "kind": KIND["FT_GLOBAL_SHARED"], "hash_mask": 0, "bucket": 0xFFFFFFFF,
                "node": -1, "per_cpu": [[80, 0, 0], [0, 0, 0]]}]
    (row,) = live.processes({}, live.bucket_counts(buckets), 1.0, {})
    assert row["buckets_touched"] is None


def test_no_private_lookup_means_refcount_and_lock_waits_unknown():
    """Only private-hash bucket locks and refcounts are traced: a recording
    whose lookups are all global prints n/a for both, not zeros (issue 27, read
    on PostgreSQL and stress-ng)."""
    rec = sample()
    rec["totals"]["global"] += rec["totals"]["private"]
    rec["totals"]["private"] = 0
    rec["contention"] = {"status": "attached (tp_btf)", "window_s": 1.0, "waits": 0, "wait_ns": 0,
                         "wait_ms_per_s": 0.0, "waits_lost": 0, "processes": [], "blind_spots": [],
                         "private_lookups": 0,
                         "by_cause": {c: {"waits": 0, "wait_ns": 0} for c in ("collision", "same_futex", "unknown")}}
    text = render_text(rec)
    refcount = text.split("Refcount, ")[1].splitlines()
    assert refcount[1] == "  n/a: no private-hash lookup was traced", refcount[:2]
    waits = text.split("Bucket-lock waits: ")[1].splitlines()
    assert waits[1].startswith("  n/a: no private-hash lookup was traced") and "0 waits" not in waits[1]
    rec["totals"]["private"], rec["contention"]["private_lookups"] = 5, 5
    text = render_text(rec)
    assert "  get: " in text.split("Refcount, ")[1] and "0 waits" in text.split("Bucket-lock waits: ")[1]


def test_thread_births_and_exits_are_in_the_text():
    """The churn behind automatic resizes is in the text, not only in the JSON:
    counts taken here from the recording's own `threads` list."""
    rec = sample()
    pid = rec["processes"][0]["pid"]
    ev = [e for e in rec["threads"] if e["pid"] == pid]
    born = sum(e["event"] == "new" for e in ev)
    died = sum(e["event"] == "exit" and e["tid"] != pid for e in ev)
    assert born and died
    assert f"threads in the window: {born} created, {died} exited" in render_text(rec)
    quiet = copy.deepcopy(rec)
    quiet["threads"] = []
    assert "threads in the window" not in render_text(quiet)


def test_skipped_probe_runs_agree_in_number():
    """The summary names one skipped run in the singular (read in the demo's
    output on a busy machine: "1 probe runs skipped")."""
    rec = sample()
    for n, says in ((1, "  1 probe run skipped by the kernel "), (1234, "  1,234 probe runs skipped by the kernel ")):
        rec["totals"]["missed_runs"] = n
        (line,) = [ln for ln in render_text(rec).splitlines() if "skipped by the kernel" in ln]
        assert line.startswith(says), line
        assert line.endswith("any lookups of that run are not counted" if n == 1 else
                             "any lookups of those runs are not counted"), line
