"""Inferred PR_FUTEX_HASH_SET_SLOTS results (tracepoint method without
--exact-prctl), on hand-made event streams. No BPF, no root."""
import errno

import pytest

from futextrace.analysis.timeline import build_timeline

from tests.helpers.events import event as ev

SET_SLOTS, GET_SLOTS = 1, 2
KERNEL = {"online_cpus": [0, 1], "global_hash": {"buckets_per_node": 512}}
AUTO16 = {"hash": 0xA000, "hash_mask": 15, "custom": 0}


def prctl(t, slots, arg4=0, tid=100, **state):
    return ev("FTE_PRCTL_ENTER", t, tid=tid, arg0=slots, arg1=SET_SLOTS, ret=arg4, **{**AUTO16, **state})


def only_resize(events, infer=True):
    rs = [r for r in build_timeline(events, KERNEL, infer_prctl=infer)["resizes"] if r["trigger"] == "prctl"]
    assert len(rs) == 1, rs
    return rs[0]


@pytest.mark.parametrize("slots, arg4", [(3, 0), (1, 0), (48, 0), (64, 1), ((1 << 32) + 3, 0)])
def test_einval_from_the_arguments(slots, arg4):
    r = only_resize([prctl(1.0, slots, arg4)])
    assert (r["result"], r["result_inferred"], r["new_buckets"]) == (-errno.EINVAL, True, 16)


def test_ebusy_once_the_global_hash_was_chosen():
    r = only_resize([prctl(1.0, 64, hash=0xB000, hash_mask=0, custom=1)])
    assert r["result"] == -errno.EBUSY and r["new_buckets"] == 0


def test_success_when_any_thread_runs_on_the_hash_asked_for():
    evs = [prctl(1.0, 64),
           ev("FTE_HASH_SEEN", 1.5, tid=101, hash=0xC000, hash_mask=63, custom=1)]
    r = only_resize(evs)
    assert (r["result"], r["old_buckets"], r["new_buckets"]) == (0, 16, 64)
    assert r["pivot_t"] == 1.5 and r["pending_s"] == 0.5


def test_global_request_succeeds_on_a_custom_global_hash():
    evs = [prctl(1.0, 0), ev("FTE_HASH_SEEN", 1.2, hash=0xC000, hash_mask=0, custom=1)]
    r = only_resize(evs)
    assert r["result"] == 0 and r["new_buckets"] == 0


def test_enomem_when_the_caller_is_seen_again_without_it():
    # Another thread's unrelated sighting settles nothing; the caller's exit does.
    evs = [prctl(1.0, 1 << 31),
           ev("FTE_HASH_SEEN", 1.1, tid=101, hash=0xA000, hash_mask=31),
           ev("FTE_EXIT", 2.0, **AUTO16)]
    r = only_resize(evs)
    assert r["result"] == -errno.ENOMEM and r["new_buckets"] == 16 and r["pivot_t"] is None


def test_a_clone_by_the_caller_settles_it_too():
    evs = [prctl(1.0, 256), ev("FTE_NEWTASK", 1.3, arg0=0x3D0F00, arg1=102, hash=0xD000, hash_mask=255, custom=1)]
    assert only_resize(evs)["result"] == 0


def test_unresolved_until_seen():
    r = only_resize([prctl(1.0, 128)])
    assert r["result"] is None and r["result_inferred"]


def test_get_slots_is_not_a_resize():
    evs = [ev("FTE_PRCTL_ENTER", 1.0, arg1=GET_SLOTS, **AUTO16)]
    assert build_timeline(evs, KERNEL, infer_prctl=True)["resizes"] == []


def test_exact_mode_waits_for_the_exit_event():
    evs = [prctl(1.0, 64),
           ev("FTE_HASH_SEEN", 1.1, tid=101, hash=0xC000, hash_mask=63, custom=1),
           ev("FTE_PRCTL_EXIT", 1.2, ret=0, hash=0xC000, hash_mask=63, custom=1)]
    r = only_resize(evs, infer=False)
    assert (r["result"], r["result_inferred"], r["pivot_t"]) == (0, False, 1.2)
