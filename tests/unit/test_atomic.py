"""futextrace/analysis/atomic.py on hand-written recordings: expected values
are worked out here from the timestamps written below."""
from futextrace.analysis.atomic import installed_at, process_cost
from futextrace.output.text.atomic_text import atomic_text, installed_text
from futextrace.output.text.explain_text import explained, render
from futextrace.bench.ramp import atomic_share, series

PID = 42


def _resize(t, old, new, pivot_t, result=0, trigger="clone", custom=False):
    return {"t": t, "pid": PID, "comm": "svc", "trigger": trigger, "clone_flags": 0x3d0f00,
            "threads": 4, "online_cpus": 8, "requested": new, "custom": custom, "result": result,
            "result_inferred": False, "old_buckets": old, "new_buckets": new, "pivot_t": pivot_t,
            "pending_s": None if pivot_t is None else round(pivot_t - t, 6)}


def _rec(resizes, method="kprobe", duration=2.0, states=None):
    return {"duration_s": duration, "method": {"name": method}, "resizes": resizes,
            "hash_states": states or [{"t": 0.1, "pid": PID, "comm": "svc", "buckets": 16,
                                       "custom": False, "private": True, "first_seen": True}],
            "threads": [], "kernel": {"online_cpus": list(range(8))},
            "processes": [{"pid": PID, "comm": "svc", "lookups": 1000, "atomic_lookups": 250,
                           "hashes": [{"kind": "private", "buckets": 16, "lookups": 1000,
                                       "distinct_futexes": 40, "collisions": 10}]}],
            "refcount": {"source": "probed: x", "get_percpu": 750, "get_atomic": 250}}


def test_pending_replacement_is_not_installed():
    # The case: 16 -> 32 allocated at +0.552 s, no pivot by the end.
    rec = _rec([_resize(0.1, 0, 16, 0.1), _resize(0.552, 16, 32, None)], duration=1.1)
    c = process_cost(PID, rec)
    assert c["installed"]["buckets"] == 16
    assert c["pending"]["buckets"] == 32 and c["pending"]["since_t"] == 0.552
    assert abs(c["pending"]["for_s"] - (1.1 - 0.552)) < 1e-9
    assert c["pending"]["atomic_share"] == 0.25
    assert installed_text(c).startswith("16 buckets (installed); 32 pending since +0.552 s (25.0%")
    # explain says the pending one, which its "now" line does not.
    assert "hash at the end: 16 buckets (installed); 32 pending since +0.552 s" in render(explained(rec))


def test_no_private_hash_is_not_installed():
    """A process on the global hash has no private hash installed (stress-ng read
    "global hash (installed)")."""
    c = {"installed": {"buckets": 0, "custom": False}, "pending": None}
    assert installed_text(c) == "no private hash (global hash)"


def test_windows_total_longest_and_overlap():
    # 16->32 waits 85 ms; 32->64 waits 10 ms; a prctl at 1.005 overlaps the second.
    rec = _rec([_resize(0.1, 0, 16, 0.1), _resize(0.5, 16, 32, 0.585),
                _resize(1.0, 32, 64, 1.010), _resize(1.005, 64, 128, 1.020, trigger="prctl", custom=True)])
    a = process_cost(PID, rec)["atomic"]
    assert a["source"] == "measured"
    assert [round(w["s"], 6) for w in a["windows"]] == [0.085, 0.01, 0.015]
    assert abs(a["total_s"] - (0.085 + 0.020)) < 1e-9      # 1.000..1.020 counted once
    assert abs(a["longest_s"] - 0.085) < 1e-9
    assert a["lookups"] == 250
    assert process_cost(PID, rec)["installed"] == {"buckets": 128, "custom": True, "since_t": 1.020}


def test_first_hash_and_refused_requests_are_not_windows():
    rec = _rec([_resize(0.1, 0, 16, 0.1001), _resize(0.3, 16, 16, None, result=-16, trigger="prctl")])
    c = process_cost(PID, rec)
    assert c["atomic"]["windows"] == [] and c["pending"] is None
    assert atomic_text(c) is None


def test_tracepoint_windows_are_labelled_inferred():
    rec = _rec([_resize(0.1, 0, 16, 0.1), _resize(0.5, 16, 32, 0.6)], method="tracepoint")
    c = process_cost(PID, rec)
    assert c["atomic"]["source"] == "inferred"
    assert "atomic refcounts (inferred): 100.00 ms" in atomic_text(c)


def test_installed_at_a_moment():
    rec = _rec([_resize(0.1, 0, 16, 0.1), _resize(0.5, 16, 32, 0.6)])
    assert installed_at(PID, rec, 0.05) is None
    assert installed_at(PID, rec, 0.55)["buckets"] == 16     # allocated, not pivoted yet
    assert installed_at(PID, rec, 0.61)["buckets"] == 32


def test_explain_quotes_the_avoided_atomic_time():
    rec = _rec([_resize(0.1, 0, 16, 0.1), _resize(0.5, 16, 32, 0.585)])
    text = render(explained(rec))
    assert "would have avoided 85.00 ms of atomic refcounting (250 lookups)" in text
    assert "now 32 buckets" in text
    assert "hash at the end" not in text        # the same 32 as "now": said once


def test_ramp_series_and_atomic_share():
    raw = {"t_start_ns": 1_000_000_000, "samples": [
        {"mono_ns": 1_050_000_000, "ops": 5000, "threads": 1, "slots": 16},
        {"mono_ns": 1_100_000_000, "ops": 15000, "threads": 2, "slots": 16}]}
    pts = series(raw, start_ns=900_000_000)          # recording began 100 ms before the workload
    assert [round(p["t"], 6) for p in pts] == [0.15, 0.2]
    assert [round(p["ops_per_s"]) for p in pts] == [100000, 200000]
    # a window 0.16..0.17 covers a fifth of the second interval (0.15..0.20)
    assert [round(s, 6) for s in atomic_share(pts, [{"t": 0.16, "end_t": 0.17}], t0=0.1)] == [0.0, 0.2]


def test_inferred_prctl_still_waiting_is_pending_with_its_requested_size():
    waiting = {**_resize(0.7, 16, 16, None, result=None, trigger="prctl", custom=True),
               "requested": 64, "result_inferred": True}
    c = process_cost(PID, _rec([_resize(0.1, 0, 16, 0.1), waiting], method="tracepoint", duration=0.9))
    assert c["pending"]["buckets"] == 64 and c["pending"]["since_t"] == 0.7
    assert c["installed"]["buckets"] == 16


def test_replacements_that_never_pivot_end_at_the_next_pivot():
    # Seen in an 8-CPU guest (kprobe method): each clone allocated 32 while one
    # waited; the kernel kept one, and a prctl 64 took over with it at +1.379 s.
    rec = _rec([_resize(0.1776, 0, 16, 0.1786), _resize(0.3004, 16, 32, None), _resize(0.4247, 16, 32, None),
                _resize(0.5978, 16, 32, 1.3792), _resize(0.6036, 16, 64, 1.3793, trigger="prctl", custom=True)],
               duration=1.8)
    c = process_cost(PID, rec)
    assert c["pending"] is None
    assert c["installed"]["buckets"] == 64
    assert abs(c["atomic"]["total_s"] - (1.3793 - 0.3004)) < 1e-9
    assert [w["end_t"] for w in c["atomic"]["windows"]] == [1.3792] * 3 + [1.3793]
