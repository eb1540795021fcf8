"""explain and snapshot (procs/hashrows.py, snapshot/hashwatch.py) on recorded and hand-made timelines (no BPF, no root)."""
import functools
import json
from pathlib import Path

import pytest

from futextrace.analysis import explain as E
from futextrace.output.text import explain_text as T
from futextrace.procs import hashrows
from futextrace.snapshot import hashwatch
from futextrace.analysis.timeline import build_timeline

from tests.helpers.events import event

_ev = functools.partial(event, nr_threads=1)

DATA = Path(__file__).resolve().parent.parent / "data"
THREAD = 0x3D0F00          # glibc pthread_create's clone flags
VFORK = 0x4100             # CLONE_VM | CLONE_VFORK
CLONE_VM = 0x100
FORK = 0x1200000


def load(name):
    return json.loads((DATA / name).read_text())


def kernel(cpus=2, gsize=512, rule="vm-not-vfork"):
    return {"online_cpus": list(range(cpus)), "global_hash": {"buckets_per_node": gsize},
            "clone_rule": rule}


def rec(resizes=(), threads=(), states=(), processes=(), **k):
    return {"kernel": kernel(**k), "resizes": list(resizes), "threads": list(threads),
            "hash_states": list(states), "processes": list(processes), "refcount": {}}


def new(t, tid, flags, nr, pid=100):
    return {"t": t, "pid": pid, "tid": tid, "event": "new", "clone_flags": flags, "nr_threads": nr}


def clone_resize(t, flags, threads, old, new_, cpus=2, pending=0.0, pid=100):
    return {"t": t, "pid": pid, "comm": "w", "trigger": "clone", "clone_flags": flags, "threads": threads,
            "online_cpus": cpus, "requested": None, "custom": False, "result": 0, "old_buckets": old,
            "new_buckets": new_, "pivot_t": None if pending is None else t + pending, "pending_s": pending}


def prctl(t, n, result, old, new_, pid=100):
    return {"t": t, "pid": pid, "comm": "w", "trigger": "prctl", "clone_flags": None, "threads": 1,
            "online_cpus": 2, "requested": n, "custom": True, "result": result, "old_buckets": old,
            "new_buckets": new_, "pivot_t": t if result == 0 else None, "pending_s": 0.0 if result == 0 else None}


def steps(r, pid=100):
    return next(p for p in T.explained(r)["processes"] if p["pid"] == pid)


def test_formula_text_matches_the_issue_example():
    f = E.auto_buckets(33, 8, 4096)
    assert T.formula_text(f) == ("min(33 threads, 8 online CPUs) = 8 → 4 × 8 = 32 → roundup_pow_of_two = 32"
                                 " → clamp(16, global size 4096) = 32 buckets")


def test_recorded_auto_resize():
    p = T.explained(load("recording-tp-auto.json"))["processes"][0]
    first, second = p["steps"]
    assert first["kind"] == "resize" and first["buckets_before"] == 0 and first["buckets_after"] == 16
    assert "with 1 thread → min(1 threads, 2 online CPUs) = 1" in first["text"]
    assert "clamp(16, global size 512) = 16 buckets" in first["text"]
    assert "installed at once" in first["text"]
    assert second["reason"] == "big_enough" and "never shrinks" in second["text"]
    assert p["final"]["buckets"] == 16 and not p["final"]["custom"]


def test_recorded_custom_size_stops_auto_resizes():
    p = T.explained(load("recording-tp-64.json"))["processes"][0]
    assert p["steps"][0]["reason"] == "custom_set" and p["steps"][0]["buckets_after"] == 64
    pending = next(r["pending_s"] for r in load("recording-tp-64.json")["resizes"] if r["trigger"] == "prctl")
    assert f"prctl waited {pending * 1000:.2f} ms before the pivot" in p["steps"][0]["text"]
    assert [s["reason"] for s in p["steps"][1:]] == ["custom", "custom"]
    assert p["final"] == {"buckets": 64, "custom": True, "global_chosen": False, "private": True,
                          "pending_buckets": None, "text": "64 buckets (custom)"}


def test_growth_in_steps_with_pending_pivot():
    # 8 CPUs: 1 -> 16, 4 threads -> 16 (no), 5 threads -> 32, pending 3 ms.
    r = rec(resizes=[clone_resize(1.0, THREAD, 1, 0, 16, 8), clone_resize(3.0, THREAD, 5, 16, 32, 8, 0.003)],
            threads=[new(1.0, 101, THREAD, 2), new(2.0, 102, THREAD, 5), new(3.0, 103, THREAD, 6)], cpus=8)
    p = steps(r)
    assert [s["buckets_after"] for s in p["steps"]] == [16, 16, 32]
    assert [s["tid"] for s in p["steps"]] == [101, 102, 103]
    assert p["steps"][1]["reason"] == "big_enough"
    assert "min(4 threads, 8 online CPUs) = 4 → 4 × 4 = 16" in p["steps"][1]["text"]
    assert "min(5 threads, 8 online CPUs) = 5 → 4 × 5 = 20 → roundup_pow_of_two = 32" in p["steps"][2]["text"]
    assert "pending 3.00 ms before the pivot at +3.003 s" in p["steps"][2]["text"]


def test_resize_still_pending_at_the_end():
    r = rec(resizes=[clone_resize(1.0, THREAD, 1, 0, 16, 8), clone_resize(2.0, THREAD, 5, 16, 32, 8, None)],
            threads=[new(1.0, 101, THREAD, 2), new(2.0, 102, THREAD, 6)], cpus=8)
    assert "still pending when the recording ended" in steps(r)["steps"][1]["text"]


def test_global_then_ebusy_then_threads():
    r = rec(resizes=[prctl(1.0, 0, 0, 0, 0), prctl(2.0, 32, -16, 0, 0)], threads=[new(3.0, 101, THREAD, 2)])
    p = steps(r)
    assert [s["reason"] for s in p["steps"]] == ["global_set", "ebusy", "global_chosen"]
    assert "-EBUSY" in p["steps"][1]["text"]
    assert p["final"]["global_chosen"] and p["final"]["buckets"] == 0
    assert "global (chosen with prctl, for good)" == p["final"]["text"]


@pytest.mark.parametrize("n,result,reason,text", [
    (15, -22, "einval", "power of two"), (1, -22, "einval", "power of two"),
    (1 << 29, -12, "enomem", "-ENOMEM"), (64, -22, "einval", "arg4")])
def test_prctl_failures(n, result, reason, text):
    p = steps(rec(resizes=[prctl(1.0, n, result, 0, 0)]))
    assert p["steps"][0]["reason"] == reason and text in p["steps"][0]["text"]


@pytest.mark.parametrize("rule,flags,reason", [
    ("thread+vm", VFORK, "flags_do_not_trigger"), ("vm-not-vfork", VFORK, "flags_do_not_trigger"),
    ("thread+vm", CLONE_VM, "flags_do_not_trigger"), ("vm-not-vfork", CLONE_VM, "big_enough"),
    ("vm-not-vfork", FORK, "flags_do_not_trigger"), (None, CLONE_VM, "big_enough")])
def test_clone_flags_follow_the_learned_rule(rule, flags, reason):
    r = rec(resizes=[clone_resize(1.0, THREAD, 1, 0, 16)],
            threads=[new(1.0, 101, THREAD, 2), new(2.0, 102, flags, 2)], rule=rule)
    s = steps(r)["steps"][1]
    assert s["reason"] == reason
    if reason == "flags_do_not_trigger":
        assert T.RULES[rule] in s["text"]


def test_resize_the_rule_did_not_predict_is_reported():
    # Seen on a 6.18 kernel: vfork allocated the hash although the rule excludes vfork.
    r = rec(resizes=[clone_resize(1.0, VFORK, 1, 0, 16)], threads=[new(1.0, 101, VFORK, 1)])
    s = steps(r)["steps"][0]
    assert s["kind"] == "resize" and s["buckets_after"] == 16 and "although its learned rule" in s["text"]


def test_first_seen_before_any_resize():
    r = rec(states=[{"t": 0.1, "pid": 100, "comm": "w", "buckets": 0, "custom": False, "private": False,
                     "first_seen": True}],
            resizes=[clone_resize(1.0, THREAD, 1, 0, 16)], threads=[new(1.0, 101, THREAD, 2)])
    p = steps(r)
    assert p["steps"][0]["kind"] == "first_seen" and "no private hash yet" in p["steps"][0]["text"]
    assert p["final"]["buckets"] == 16


def test_recording_without_futex_list_suggests_nothing():
    rcm = T.explained(load("recording-tp-auto.json"))["processes"][0]["recommendation"]
    measured = load("recording-tp-auto.json")["processes"][0]["hashes"][0]["distinct_futexes"]  # 128 + libc's
    assert rcm["distinct_futexes"] == measured and rcm["slots"] is None and rcm["c_line"] is None
    # No bucket-lock measurement in this (older) recording: no size from the lookup spread alone.
    assert "did not measure bucket-lock waits" in rcm["effect"] and rcm["whatif"] is None


def test_no_recommendation_after_global_chosen():
    hashes = [{"kind": "global", "buckets": 512, "distinct_futexes": 3, "collisions": 0}]
    r = rec(resizes=[prctl(1.0, 0, 0, 0, 0)], processes=[{"pid": 100, "comm": "w", "hashes": hashes}])
    rcm = steps(r)["recommendation"]
    assert rcm["c_line"] is None and rcm["slots"] is None and "-EBUSY" in rcm["effect"]
    assert "a private hash is no longer possible" in rcm["effect"]
    assert "none possible" not in T.render(T.explained(r))


def test_expected_collisions():
    assert E.expected_collisions(1, 16) == pytest.approx(0)
    assert E.expected_collisions(2, 1) == pytest.approx(1)   # like aggregate: futexes - used buckets


def test_render_has_every_step():
    text = T.render(T.explained(load("recording-tp-64.json")))
    assert "2 online CPUs, global hash 512" in text and "SET_SLOTS, 64)" in text
    assert "recommendation: measured: 19 distinct futexes in 64 buckets" in text


def test_timeline_keeps_first_sight_after_newtask():
    # A thread created before the first futex call used to hide the first HASH_SEEN.
    evs = [_ev("FTE_NEWTASK", 0.1, hash=0xA000, hash_mask=15, arg0=THREAD, arg1=101, nr_threads=2),
           _ev("FTE_HASH_SEEN", 0.2, hash=0xA000, hash_mask=15)]
    tl = build_timeline(evs, kernel())
    assert [(s["buckets"], s["first_seen"]) for s in tl["hash_states"]] == [(16, True)]
    assert len(tl["resizes"]) == 1


def test_snapshot_describe():
    assert hashrows.describe(None)["seen"] is False
    assert hashrows.describe({"buckets": 16, "custom": False})["text"] == "private hash, 16 buckets, automatic"
    d = hashrows.describe({"buckets": 0, "custom": True})
    assert (d["kind"], d["mode"]) == ("global", "custom") and "for good" in d["text"]
    states = [{"t": 2, "pid": 1, "buckets": 32}, {"t": 1, "pid": 1, "buckets": 16}]
    assert hashwatch.latest_states({"hash_states": states})[1]["buckets"] == 32


def test_kprobe_allocation_is_paired_with_the_clone_that_follows():
    """kprobe method: the resize comes from futex_hash_allocate() (no clone flags),
    just before the child's task_newtask; the vfork child's step is the resize."""
    r = rec(resizes=[clone_resize(1.0, None, 1, 0, 16)],
            threads=[new(1.0002, 201, VFORK, 1), new(2.0, 202, FORK, 1)], rule="vm")
    by_tid = {s["tid"]: s for s in steps(r)["steps"] if s.get("tid")}
    assert by_tid[201]["reason"] == "resized" and by_tid[201]["clone_flags"] == VFORK
    assert "vfork child" in by_tid[201]["text"]
    assert by_tid[202]["reason"] == "flags_do_not_trigger"
