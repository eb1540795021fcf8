"""analysis/atomic.py's resize_cost gives each process only its own rows: the
same costs as process_cost scanning every row of the whole recording for each."""
from futextrace.analysis.atomic import process_cost, resize_cost


def _resize(pid, t, old, new, pivot_t, result=0):
    return {"t": t, "pid": pid, "comm": f"p{pid}", "trigger": "clone", "clone_flags": 0, "threads": 4,
            "online_cpus": 2, "requested": new, "custom": False, "result": result, "result_inferred": False,
            "old_buckets": old, "new_buckets": new, "pivot_t": pivot_t,
            "pending_s": None if pivot_t is None else round(pivot_t - t, 6)}


def test_grouped_costs_are_the_scanned_ones():
    resizes = [_resize(1, 0.1, 0, 16, 0.1), _resize(2, 0.2, 0, 16, 0.2), _resize(1, 0.5, 16, 32, 0.58),
               _resize(2, 0.6, 16, 64, None), _resize(3, 0.7, 16, 16, None, result=-16),
               _resize(1, 0.9, 32, 64, None)]
    states = [{"t": 0.05, "pid": pid, "comm": f"p{pid}", "buckets": 16, "custom": False, "private": True,
               "first_seen": True} for pid in (1, 4)]
    procs = [{"pid": pid, "comm": f"p{pid}", "lookups": 100 * pid, "atomic_lookups": 10 * pid,
              "hashes": [{"kind": "private", "buckets": 16, "lookups": 100 * pid}]} for pid in (1, 2, 4, 5)]
    rec = {"duration_s": 1.5, "method": {"name": "kprobe"}, "resizes": resizes, "hash_states": states,
           "processes": procs, "kernel": {}}
    assert resize_cost(rec) == [process_cost(pid, rec) for pid in (1, 2, 3, 4)]
