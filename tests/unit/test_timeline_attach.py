"""The timeline and explain starting from the hash read at attach (hash_at_attach),
on hand-made event streams. No BPF, no root. Expected values are written out by
hand from the kernel's rules, not computed with futextrace's formulas."""

from futextrace.output.text import explain_text as T
from futextrace.analysis.timeline import build_timeline

from tests.helpers.events import event as ev

SET_SLOTS, THREAD = 1, 0x3D0F00          # THREAD: glibc pthread_create's clone flags
KERNEL = {"online_cpus": [0, 1], "global_hash": {"buckets_per_node": 512}, "clone_rule": "vm"}


def newtask(t, nr, **state):
    return ev("FTE_NEWTASK", t, arg0=THREAD, arg1=1000 + nr, nr_threads=nr, **state)


def attach(kind, buckets=0, mode=None, threads=1, **extra):
    row = {"pid": 100, "comm": "w", "threads": threads, "buckets": buckets, "kind": kind, "mode": mode,
           "refcount": "per-cpu" if kind != "none" else None, "pending": None, **extra}
    return {"source": "iterator", "complete": True, "targets": [100], "processes": {"100": row}}


def recording(events, at_attach, infer=True):
    tl = build_timeline(events, KERNEL, infer_prctl=infer, at_attach=at_attach)
    return {"kernel": KERNEL, "hash_at_attach": at_attach, **tl}


CUSTOM64 = {"hash": 0xC000, "hash_mask": 63, "custom": 1}


def test_custom_hash_from_before_is_not_a_new_allocation():
    rec = recording([newtask(1.0, 4, **CUSTOM64), newtask(1.1, 5, **CUSTOM64)],
                    attach("private", 64, "custom", threads=3))
    assert rec["resizes"] == []
    p = T.explained(rec)["processes"][0]
    assert p["final"]["text"] == "64 buckets (custom)"
    assert p["steps"][0]["text"].startswith("at attach: 64 buckets, custom: set with prctl(SET_SLOTS, 64) "
                                            "before the recording began")
    assert [s["reason"] for s in p["steps"][1:]] == ["custom", "custom"]
    assert "custom hash: no automatic resize" in p["steps"][1]["text"]


def test_automatic_hash_from_before_is_not_invented_at_the_first_clone():
    auto32 = {"hash": 0xB000, "hash_mask": 31}
    # Without the attach state the first clone seen is taken as the allocation...
    assert [(r["old_buckets"], r["new_buckets"]) for r in recording([newtask(1.0, 7, **auto32)], None)["resizes"]] \
        == [(0, 32)]
    # ...with it, the clone changed nothing.
    rec = recording([newtask(1.0, 7, **auto32)], attach("private", 32, "auto", threads=6))
    assert rec["resizes"] == []
    p = T.explained(rec)["processes"][0]
    assert [s["reason"] for s in p["steps"]] == ["at_attach", "big_enough"]


def test_automatic_hash_grown_during_the_recording_keeps_its_old_size():
    auto16, auto32 = {"hash": 0xA000, "hash_mask": 15}, {"hash": 0xB000, "hash_mask": 31}
    rec = recording([ev("FTE_HASH_SEEN", 0.5, **auto16), newtask(1.0, 5, **auto32)],
                    attach("private", 16, "auto", threads=4))
    assert [(r["trigger"], r["old_buckets"], r["new_buckets"]) for r in rec["resizes"]] == [("clone", 16, 32)]


def test_first_event_after_attach_may_be_the_resize_itself():
    rec = recording([newtask(1.0, 5, hash=0xB000, hash_mask=31)], attach("private", 16, "auto", threads=4))
    assert [(r["old_buckets"], r["new_buckets"]) for r in rec["resizes"]] == [(16, 32)]


def test_launched_set_slots_then_clone_is_one_allocation():
    """Inferred prctl results: SET_SLOTS 128 then the first thread. Told once, by the prctl."""
    events = [ev("FTE_PRCTL_ENTER", 1.0, arg0=128, arg1=SET_SLOTS, nr_threads=1),
              newtask(1.2, 2, hash=0xD000, hash_mask=127, custom=1)]
    for at_attach in (attach("none", launched=True), None):
        rs = recording(events, at_attach)["resizes"]
        assert [(r["trigger"], r["result"], r["old_buckets"], r["new_buckets"]) for r in rs] == \
            [("prctl", 0, 0, 128)], rs


def test_idle_process_has_its_attach_line_and_no_events():
    rec = recording([], attach("private", 32, "auto", threads=6))
    p = T.explained(rec)["processes"][0]
    assert [s["kind"] for s in p["steps"]] == ["at_attach"] and p["final"]["text"] == "32 buckets (automatic)"


def test_pending_replacement_is_beside_not_current():
    rec = recording([], attach("private", 16, "auto", threads=9, pending={"buckets": 32, "custom": False}))
    final = T.explained(rec)["processes"][0]["final"]
    assert final["buckets"] == 16 and final["text"] == "16 buckets (automatic); 32 buckets pending (waiting for the pivot)"


def test_global_by_prctl_recommends_what_is_possible():
    rec = recording([], attach("global", 0, "custom", threads=3))
    rec["processes"] = [{"pid": 100, "comm": "w", "hashes": [{"kind": "global", "buckets": 512,
                                                            "distinct_futexes": 3, "collisions": 0}],
                         "futex_list": {"listed": [{"uaddr": "0x1000", "lookups": 5}],
                                        "not_listed": 0, "not_listed_lookups": 0}}]
    p = T.explained(rec)["processes"][0]
    assert "global for good" in p["steps"][0]["text"]
    text = T.render(T.explained(rec))
    assert "a private hash is no longer possible for it" in text
    assert "SET_SLOTS 16" not in text and "none possible" not in text


def test_pending_replacement_seen_taking_over():
    at = attach("private", 16, "auto", threads=9, pending={"buckets": 32, "custom": False})
    rec = recording([ev("FTE_HASH_SEEN", 0.5, hash=0xB000, hash_mask=31)], at)
    assert rec["resizes"] == []
    p = T.explained(rec)["processes"][0]
    assert [s["kind"] for s in p["steps"]] == ["at_attach", "pivot"]
    assert "16 → 32 buckets" in p["steps"][1]["text"]
    assert p["final"]["text"] == "32 buckets (automatic)" and p["final"]["pending_buckets"] is None
