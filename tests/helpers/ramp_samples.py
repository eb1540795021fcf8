"""Sample --ramp documents for the ramp picture's tests and scripts/output-digest.sh."""


def _run(requested: int, resizes: list[dict], step: float = 0.05, first_threads: int = 1) -> dict:
    points = [{"t": 0.05 + step * i, "ops_per_s": 1.0e6 + 5e4 * (i % 3), "threads": min(8, first_threads + i),
               "slots": 16 if requested < 0 and i < 10 else (requested if requested > 0 else 64),
               "atomic_share": 0.4 if i == 10 else 0.0} for i in range(20)]
    return {"buckets_requested": requested, "points": points, "t_start": 0.01, "resizes": resizes,
            "result": {"threads": 8, "total_ops": 1, "runtime": 1, "pid": 1},
            "cost": {"atomic": {"source": "inferred", "total_s": 0.01, "longest_s": 0.01, "lookups": 5}},
            "mid_run_resize": None}


def _doc(first_threads: int = 1) -> dict:
    rs = [{"t": 0.02, "pivot_t": 0.02, "result": 0, "old_buckets": 0, "new_buckets": 16, "trigger": "clone"},
          {"t": 0.55, "pivot_t": 0.56, "result": 0, "old_buckets": 16, "new_buckets": 64, "trigger": "prctl"}]
    return {"options": {"step_ms": 50, "interval_ms": 50, "threads": 8, "futexes": 64, "runtime": 1.0,
                        "set_at_start": 64},
            "runs": [_run(-1, rs, first_threads=first_threads), _run(64, [], first_threads=first_threads)]}
