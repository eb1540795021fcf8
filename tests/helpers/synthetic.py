"""Synthetic recordings for the picture tests: N processes, C CPUs on one or more
NUMA nodes, 0, 1 or several resizes. Buckets of listed futexes come from the
tests' own jhash2 (tests/helpers/fidelity_ref.py), not from the module under test."""
from __future__ import annotations

from tests.helpers import fidelity_ref as ref

HOT_ADDR = 0x7F00_1234_5000          # the busiest process's hot futex
BUSY_BUCKETS = 64


def _hist(values, buckets: int) -> list[dict]:
    """log2 histogram rows as the recording has them (unused buckets as 0..0)."""
    values = list(values)
    rows = {(0, 0): buckets - len(values)}
    for v in values:
        low = 1 << (v.bit_length() - 1)
        rows[(low, 2 * low - 1)] = rows.get((low, 2 * low - 1), 0) + 1
    return [{"low": lo, "high": hi, "count": n} for (lo, hi), n in sorted(rows.items())]


def _private_hash(addrs: list[tuple[int, int]], buckets: int) -> dict:
    counts: dict[str, int] = {}
    members: dict[int, list[int]] = {}
    for a, n in addrs:
        b = ref.private_bucket(a, buckets - 1)
        counts[str(b)] = counts.get(str(b), 0) + n
        members.setdefault(b, []).append(a)
    total = sum(counts.values())
    mean = total / buckets
    hottest = sorted(members, key=lambda b: -counts[str(b)])[:10]
    return {"kind": "private", "buckets": buckets, "lookups": total, "distinct_futexes": len(addrs),
            "collisions": sum(len(m) - 1 for m in members.values()),
            "imbalance": {"buckets": buckets, "used": len(counts), "max": max(counts.values()), "mean": mean,
                          "max_over_mean": max(counts.values()) / mean, "cv": 0.5},
            "bucket_counts": counts, "lookups_per_bucket_hist": _hist(counts.values(), buckets),
            "futexes_per_bucket_hist": _hist([len(m) for m in members.values()], buckets),
            "hottest": [{"bucket": b, "node": None, "lookups": counts[str(b)], "futexes": len(members[b]),
                         "addresses": [hex(a) for a in members[b][:8]]} for b in hottest],
            "futex_detail": {"complete": True, "futexes_listed": len(addrs), "lookups_listed": total,
                             "lookups_missed": 0}}


def _global_hash(lookups: int) -> dict:
    counts = {f"0:{(7 * i) % 512}": 1 for i in range(lookups)}
    return {"kind": "global", "buckets": 512, "lookups": lookups, "distinct_futexes": lookups, "collisions": 0,
            "imbalance": {"buckets": 512, "used": lookups, "max": 1, "mean": lookups / 512,
                          "max_over_mean": 512 / max(1, lookups), "cv": 15.97},
            "bucket_counts": counts, "hottest": [], "lookups_per_bucket_hist": _hist(counts.values(), 512),
            "futexes_per_bucket_hist": _hist([], 512),
            "futex_detail": {"complete": False, "futexes_listed": 0, "lookups_listed": 0, "lookups_missed": lookups},
            "estimates": {"distinct_futexes": {"low": 0, "high": lookups}, "collisions": {"low": 0, "high": lookups},
                          "note": "lower bounds"}}


def _process(i: int, pid: int) -> dict:
    """Process 0: one hot futex (50,000 lookups) among 200 ordinary ones, in 64
    buckets, and 2 lookups in the global hash. The others: fewer and fewer lookups,
    so that some are under the folding threshold."""
    if i == 0:
        addrs = [(HOT_ADDR, 50_000)] + [(0x5600_0000_0000 + 0x40 * k, 100 + k) for k in range(200)]
        hashes = [_private_hash(addrs, BUSY_BUCKETS), _global_hash(2)]
    else:
        n = max(3, 30_000 // (i * i))
        addrs = [(0x5500_0000_0000 + 0x1000 * i + 0x10 * k, n // 8 + 1) for k in range(8)]
        hashes = [_private_hash(addrs, 16)]
    listed = [{"uaddr": hex(a), "lookups": n} for a, n in sorted(addrs, key=lambda an: -an[1])]
    return {"pid": pid, "comm": f"worker-{i}", "lookups": sum(h["lookups"] for h in hashes), "atomic_lookups": 0,
            "hashes": hashes, "futex_list": {"listed": listed, "not_listed": 0, "not_listed_lookups": 0}}


def _resizes(pid: int, n: int, duration: float) -> list[dict]:
    out, old = [], 0
    for k in range(n):
        new = 16 << k
        t = duration * (k + 1) / (n + 2)
        out.append({"t": t, "pid": pid, "comm": "futex-hash" if k else "worker-0",
                    "trigger": "clone" if k % 2 == 0 else "prctl", "clone_flags": None, "threads": 2 + k,
                    "online_cpus": 2, "requested": new, "custom": bool(k % 2), "result": 0,
                    "result_inferred": False, "old_buckets": old, "new_buckets": new,
                    "pivot_t": t if k == 0 else t + 0.05, "pending_s": 0.0 if k == 0 else 0.05})
        old = new
    if n > 1:   # and a refused request
        out.append({**out[-1], "t": duration * 0.9, "trigger": "prctl", "requested": 3, "result": -22,
                    "new_buckets": old, "old_buckets": old, "pivot_t": None, "pending_s": None})
    return out


def recording(processes: int = 1, cpus: int = 2, resizes: int = 0, nodes: int = 1) -> dict:
    duration = 5.0
    procs = [_process(i, 1000 + i) for i in range(processes)]
    per_node = max(1, cpus // nodes)
    cpu_rows = []
    total_private = sum(h["lookups"] for p in procs for h in p["hashes"] if h["kind"] == "private")
    for c in range(cpus):
        share = total_private * (1 + (c % 3)) // (2 * cpus)
        cpu_rows.append({"cpu": c, "node": c // per_node, "lookups": share + c % 5, "private": share,
                         "global": c % 5, "atomic": share // 10 if c % 4 == 0 else 0,
                         "ref_get_percpu": 0, "ref_get_atomic": 0, "ref_put_percpu": 0, "ref_put_atomic": 0})
    lookups = sum(p["lookups"] for p in procs)
    attach = {str(p["pid"]): {"pid": p["pid"], "comm": p["comm"], "threads": 4, "buckets": 16 if i else 0,
                              "kind": "private" if i else "none", "mode": "auto" if i else None,
                              "refcount": "per-cpu" if i else None, "pending": None}
              for i, p in enumerate(procs)}
    if resizes == 0:
        attach[str(procs[0]["pid"])].update(buckets=BUSY_BUCKETS, kind="private", mode="auto", refcount="per-cpu")
    return {
        "schema": "futextrace-recording", "schema_version": 1, "tool_version": "test",
        "started_at": "2026-12-03T20:00:00Z", "duration_s": duration,
        "method": {"name": "tracepoint", "why": "test", "blind_spots": ["shared futex buckets"],
                   "probes": ["tp_btf:sys_enter"], "prctl_results": "inferred"},
        "kernel": {"release": "6.18.0-test", "online_cpus": list(range(cpus)),
                   "cpu_node": {str(c): c // per_node for c in range(cpus)}, "nodes": list(range(nodes)),
                   "global_hash": {"buckets_per_node": 512, "shift": 9, "nodes": 1, "source": "test"},
                   "futex_hash_bucket_size": 64},
        "totals": {"lookups": lookups, "lookups_per_s": lookups / duration, "private": total_private,
                   "global": lookups - total_private, "unattributed": 0, "lost_events": 0,
                   "unattributed_causes": {"map_full": 0, "user_memory_unreadable": 0}},
        "processes": procs, "per_cpu": cpu_rows,
        "per_node": [{"node": n, "cpus": [c for c in range(cpus) if c // per_node == n], "lookups": 0,
                      "private": 0, "global": 0, "atomic": 0} for n in range(nodes)],
        "refcount": {"source": "inferred: test", "get_percpu": 0, "get_atomic": 0, "put_percpu": 0,
                     "put_atomic": 0},
        "resizes": _resizes(procs[0]["pid"], resizes, duration), "threads": [], "hash_states": [],
        "intervals": _intervals(procs, duration),
        "hash_at_attach": {"source": "iterator", "note": "test", "complete": True, "targets": [],
                           "processes": attach},
        "command": {"argv": ["./service", "--threads", "8"], "pid": procs[0]["pid"], "exit_status": 0},
    }


def _intervals(procs: list[dict], duration: float, step: float = 0.5) -> list[dict]:
    out, t = [], step
    while t <= duration + 1e-9:
        out.append({"t": round(t, 3), "interval_s": step, "lookups": 0, "private": 0, "global": 0,
                    "unattributed": 0, "lost_events": 0, "missed_runs": 0, "resizes": 0,
                    "processes": [{"pid": p["pid"], "comm": p["comm"], "lookups": int(p["lookups"] * step / duration),
                                   "lookups_per_s": p["lookups"] / duration,
                                   "hash": f"private {p['hashes'][0]['buckets']}",
                                   **({"bucket_counts": {k: max(1, int(n * step / duration))
                                                         for k, n in p["hashes"][0]["bucket_counts"].items()}}
                                      if i < 3 else {})}
                                  for i, p in enumerate(procs)]})
        t += step
    return out
