"""The exporter's per-process hash: the installed one, a pending one beside it."""
from futextrace.export.reading import from_recording


def _rec(resizes, states):
    return {"processes": [{"pid": 7, "comm": "svc", "lookups": 100, "atomic_lookups": 40,
                           "hashes": [{"kind": "private", "buckets": 16, "lookups": 100}]}],
            "totals": {}, "refcount": {"source": "probed: x", "get_percpu": 60, "get_atomic": 40,
                                       "put_percpu": 60, "put_atomic": 40},
            "method": {"name": "kprobe"}, "kernel": {}, "duration_s": 3.0,
            "resizes": resizes, "hash_states": states}


def _resize(t, old, new, pivot_t):
    return {"t": t, "pid": 7, "comm": "svc", "trigger": "clone", "custom": False, "result": 0,
            "requested": new, "old_buckets": old, "new_buckets": new, "pivot_t": pivot_t,
            "pending_s": None if pivot_t is None else pivot_t - t}


def test_pending_replacement_is_not_the_current_size():
    # kprobe method: futex_hash_allocate() gave 32 at +1.0 s; no pivot by +3.0 s
    states = [{"t": 0.2, "pid": 7, "comm": "svc", "buckets": 16, "custom": False, "private": True}]
    p = from_recording(_rec([_resize(0.1, 0, 16, 0.1), _resize(1.0, 16, 32, None)], states)).processes[7]
    assert (p.buckets, p.kind) == (16, "auto")
    assert p.pending_buckets == 32
    assert p.atomic_seconds == 2.0 and p.atomic_lookups == 40


def test_after_the_pivot_nothing_is_pending():
    p = from_recording(_rec([_resize(0.1, 0, 16, 0.1), _resize(1.0, 16, 32, 1.25)], [])).processes[7]
    assert (p.buckets, p.pending_buckets) == (32, 0)
    assert p.atomic_seconds == 0.25
