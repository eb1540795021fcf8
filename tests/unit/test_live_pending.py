"""The live view's installed and pending hash, from hand-made event streams
(tracepoint method, inferred SET_SLOTS results). No BPF, no root."""
import functools

from futextrace.analysis.timeline import build_timeline
from futextrace.output.text import live_text
from futextrace.record import live

from tests.helpers.events import event

ev = functools.partial(event, nr_threads=3)

AUTO16 = {"hash": 0xA000, "hash_mask": 15, "custom": 0}
CUSTOM64 = {"hash": 0xC000, "hash_mask": 63, "custom": 1}


def rows(events, t):
    r = [{"pid": 100, "hash": "private 16"}]
    live.with_hash_state(r, {**build_timeline(events, {}, infer_prctl=True), "duration_s": t})
    return r[0]


SEEN16 = ev("FTE_HASH_SEEN", 0.1, tid=101, **AUTO16)
PRCTL64 = ev("FTE_PRCTL_ENTER", 0.5, arg0=64, arg1=1, **AUTO16)


def test_a_waiting_set_slots_is_pending_beside_the_installed_hash():
    r = rows([SEEN16, PRCTL64, ev("FTE_HASH_SEEN", 0.52, tid=101, **AUTO16)], 0.6)
    assert r["installed"] == "private 16"
    assert r["pending"] == {"buckets": 64, "since_t": 0.5}
    text = "\n".join(live_text.render({"t": 0.6, "interval_s": 0.1, "lookups": 1, "private": 1, "global": 0,
                                  "unattributed": 0, "lost_events": 0, "resizes": 2},
                                 [{**r, "comm": "w", "lookups_per_s": 10.0, "futexes": 1,
                                   "buckets_touched": 1, "max_over_mean": 1.0}], False))
    assert "PENDING" in text and "64 +0.5s" in text


def test_after_the_pivot_the_new_hash_is_installed():
    r = rows([SEEN16, PRCTL64, ev("FTE_HASH_SEEN", 0.58, tid=101, **CUSTOM64)], 0.6)
    assert (r["installed"], r["pending"]) == ("private 64", None)


def test_a_same_size_set_slots_waits_for_a_new_hash():
    # SET_SLOTS 64 on a custom 64 hash still replaces it: the old pointer seen again is not the pivot
    prctl = ev("FTE_PRCTL_ENTER", 0.5, arg0=64, arg1=1, **CUSTOM64)
    events = [ev("FTE_HASH_SEEN", 0.1, tid=101, **CUSTOM64), prctl, ev("FTE_HASH_SEEN", 0.51, tid=101, **CUSTOM64)]
    assert rows(events, 0.6)["pending"] == {"buckets": 64, "since_t": 0.5}
    new = {**CUSTOM64, "hash": 0xD000}
    r = [x for x in build_timeline(events + [ev("FTE_HASH_SEEN", 0.7, tid=101, **new)], {}, infer_prctl=True)["resizes"]]
    assert r[-1]["pivot_t"] == 0.7
