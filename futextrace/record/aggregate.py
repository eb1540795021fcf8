"""Turn raw map dumps and events into a recording (the documented JSON).

Pure Python over plain data, so it is unit-tested on recorded dumps. Input
`raw` (what futextrace.record.recorder collects from the kernel maps):
  counters: {name: [per-CPU values]}
  futexes:  [{tgid, kind, uaddr, hash_mask, per_cpu: [[lookups, atomic, bucket, node, kbucket]...]}]
  events:   [{type, t, tgid, tid, cpu, hash, hash_new, hash_mask, hash_new_mask, arg0, arg1,
              ret, nr_threads, custom, new_custom, state, comm}]
"""
from __future__ import annotations

import statistics
from collections import defaultdict

from futextrace import __version__
from futextrace.loading.layout import KIND
from futextrace.analysis.timeline import build_timeline

SCHEMA = "futextrace-recording"
SCHEMA_VERSION = 1
KIND_NAMES = {v: k.removeprefix("FT_").lower() for k, v in KIND.items()}
UNKNOWN = 0xFFFFFFFF  # a bucket the kernel did not report (tracepoint method)
HOTTEST = 10          # hottest buckets listed per hash
ADDRS_PER_BUCKET = 8  # futex addresses listed per hot bucket


def merge_futexes(entries: list[dict]) -> list[dict]:
    """Merge duplicate keys (the per-CPU cache and the map both hold counts)."""
    merged: dict[tuple, dict] = {}
    for e in entries:
        key = (e["tgid"], e["kind"], e["uaddr"], e["hash_mask"])
        m = merged.get(key)
        if m is None:
            merged[key] = {**e, "per_cpu": [list(v) for v in e["per_cpu"]]}
            continue
        for cpu, v in enumerate(e["per_cpu"]):
            mv = m["per_cpu"][cpu]
            if v[0] and not mv[0]:
                mv[2:] = v[2:]
            mv[0] += v[0]
            mv[1] += v[1]
    return list(merged.values())


def _stat_of(per_cpu: list[list[int]]) -> tuple[int, int, int, int, int]:
    """(lookups, atomic, bucket, node, kernel_bucket) summed over CPUs; the
    bucket fields come from a CPU that saw the futex (the others are zero)."""
    lookups = sum(v[0] for v in per_cpu)
    atomic = sum(v[1] for v in per_cpu)
    first = next((v for v in per_cpu if v[0]), per_cpu[0])
    return lookups, atomic, first[2], first[3], first[4]


def _log2_slots(values: list[int]) -> list[dict]:
    """BCC-style log2 histogram: slot k holds values in [2^k, 2^(k+1)); 0 apart."""
    slots: dict[int, int] = defaultdict(int)
    for v in values:
        slots[-1 if v == 0 else v.bit_length() - 1] += 1
    out = []
    if slots.get(-1):
        out.append({"low": 0, "high": 0, "count": slots[-1]})
    top = max((k for k in slots if k >= 0), default=-1)
    for k in range(0, top + 1):
        out.append({"low": 1 << k, "high": (1 << (k + 1)) - 1, "count": slots.get(k, 0)})
    return out


def imbalance(counts: list[int]) -> dict:
    """max/mean, coefficient of variation, buckets used, over *all* buckets."""
    n = len(counts)
    total = sum(counts)
    mean = total / n if n else 0.0
    return {
        "buckets": n,
        "used": sum(1 for c in counts if c),
        "max": max(counts) if counts else 0,
        "mean": mean,
        "max_over_mean": (max(counts) / mean) if mean else 0.0,
        "cv": (statistics.pstdev(counts) / mean) if mean and n > 1 else 0.0,
    }


def _hash_summary(kind: str, nbuckets: int, futexes: list[dict]) -> dict:
    by_bucket: dict[tuple, dict] = {}
    for f in futexes:
        b = by_bucket.setdefault((f["node"], f["bucket"]), {"lookups": 0, "futexes": []})
        b["lookups"] += f["lookups"]
        b["futexes"].append((f["lookups"], f["uaddr"]))
    counts = [b["lookups"] for b in by_bucket.values()]
    all_counts = counts + [0] * max(0, nbuckets - len(counts))
    hottest = sorted(by_bucket.items(), key=lambda kv: -kv[1]["lookups"])[:HOTTEST]
    return {
        "kind": kind,
        "buckets": nbuckets,
        "lookups": sum(counts),
        "distinct_futexes": len(futexes),
        "imbalance": imbalance(all_counts),
        "lookups_per_bucket_hist": _log2_slots(all_counts),
        "futexes_per_bucket_hist": _log2_slots(
            [len(b["futexes"]) for b in by_bucket.values()] + [0] * max(0, nbuckets - len(counts))),
        "collisions": sum(len(b["futexes"]) - 1 for b in by_bucket.values() if len(b["futexes"]) > 1),
        # kprobe method: lookups whose bucket was also taken from the kernel's
        # returned pointer (any disagreement is in totals.kernel_mismatch).
        "kernel_checked": sum(f["lookups"] for f in futexes if f.get("kernel_bucket", UNKNOWN) != UNKNOWN),
        "hottest": [{
            "bucket": bucket, "node": None if node < 0 else node, "lookups": b["lookups"],
            "futexes": len(b["futexes"]),
            "addresses": [hex(a) for _, a in sorted(b["futexes"], reverse=True)[:ADDRS_PER_BUCKET]],
        } for (node, bucket), b in hottest],
        "bucket_counts": {f"{n}:{b}" if n >= 0 else str(b): v["lookups"]
                          for (n, b), v in sorted(by_bucket.items())},
    }


def build_recording(raw: dict, kernel: dict, method: dict, duration_s: float,
                    started_at: str, comms: dict[int, str] | None = None) -> dict:
    comms = comms or {}
    cpu_node = {int(k): v for k, v in kernel.get("cpu_node", {}).items()}
    gsize = kernel.get("global_hash", {}).get("buckets_per_node", 0)
    nodes = kernel.get("nodes") or [0]
    counters = {k: sum(v) for k, v in raw["counters"].items()}
    per_cpu_counters = raw["counters"]

    futexes = []
    per_cpu = defaultdict(lambda: {"lookups": 0, "private": 0, "global": 0, "atomic": 0})
    for e in merge_futexes(raw["futexes"]):
        lookups, atomic, bucket, node, kbucket = _stat_of(e["per_cpu"])
        if not lookups:
            continue
        kind = KIND_NAMES.get(e["kind"], str(e["kind"]))
        if node == -2:   # FT_NODE_LOCAL: the node of the CPU that ran it
            cpu = next(i for i, v in enumerate(e["per_cpu"]) if v[0])
            node = cpu_node.get(cpu, 0)
        futexes.append({"tgid": e["tgid"], "kind": kind, "uaddr": e["uaddr"],
                        "hash_mask": e["hash_mask"] if kind == "private" else 0,   # global_numa: the node
                        "lookups": lookups, "atomic": atomic,
                        "bucket": bucket, "node": node, "kernel_bucket": kbucket})
        for cpu, v in enumerate(e["per_cpu"]):
            if v[0]:
                pc = per_cpu[cpu]
                pc["lookups"] += v[0]
                pc["atomic"] += v[1]
                pc["private" if kind == "private" else "global"] += v[0]

    processes = []
    by_tgid: dict[int, list[dict]] = defaultdict(list)
    for f in futexes:
        by_tgid[f["tgid"]].append(f)
    for tgid, fs in sorted(by_tgid.items(), key=lambda kv: -sum(f["lookups"] for f in kv[1])):
        hashes = []
        groups: dict[tuple, list[dict]] = defaultdict(list)
        for f in fs:
            groups[(f["kind"], f["hash_mask"])].append(f)
        for (kind, mask), group in sorted(groups.items(), key=lambda kv: -sum(f["lookups"] for f in kv[1])):
            if kind == "private":
                hashes.append(_hash_summary("private", mask + 1, group))
            elif kind == "global_shared":
                hashes.append({"kind": "global_shared", "buckets": gsize * len(nodes),
                               "lookups": sum(f["lookups"] for f in group),
                               "distinct_futexes": len(group),
                               "note": "shared futexes: bucket not computable from a tracepoint"})
            else:
                hashes.append(_hash_summary(kind, gsize * len(nodes), group))
        processes.append({"pid": tgid, "comm": comms.get(tgid, ""),
                          "lookups": sum(f["lookups"] for f in fs), "hashes": hashes})

    cpus = sorted(set(per_cpu) | set(cpu_node))
    per_cpu_rows = []
    for cpu in cpus:
        row = {"cpu": cpu, "node": cpu_node.get(cpu, 0), **per_cpu[cpu]}
        for name in ("REF_GET_PERCPU", "REF_GET_ATOMIC", "REF_PUT_PERCPU", "REF_PUT_ATOMIC"):
            vals = per_cpu_counters.get(name, [])
            row[name.lower()] = vals[cpu] if cpu < len(vals) else 0
        per_cpu_rows.append(row)
    per_node = []
    for node in sorted({r["node"] for r in per_cpu_rows}):
        rows = [r for r in per_cpu_rows if r["node"] == node]
        per_node.append({"node": node, "cpus": [r["cpu"] for r in rows],
                         **{k: sum(r[k] for r in rows) for k in ("lookups", "private", "global", "atomic")}})

    unreadable = counters.get("UNATTR_UNREADABLE", 0)   # lookups of unknown hash: in the total only
    total = counters.get("PRIVATE", 0) + counters.get("GLOBAL", 0) + unreadable
    refcount = _refcount(counters, method, futexes)
    timeline = build_timeline(raw.get("events", []), kernel,
                              infer_prctl=method.get("prctl_results") == "inferred")
    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "tool_version": __version__,
        "started_at": started_at, "duration_s": duration_s, "method": method, "kernel": kernel,
        "totals": {
            "lookups": total,
            "lookups_per_s": total / duration_s if duration_s else 0.0,
            "private": counters.get("PRIVATE", 0), "global": counters.get("GLOBAL", 0),
            "unattributed": counters.get("UNATTRIBUTED", 0) + unreadable,
            "unattributed_causes": {"map_full": counters.get("UNATTRIBUTED", 0),
                                    "user_memory_unreadable": unreadable},
            "mpol_assumed_no_policy": counters.get("MPOL_ASSUMED", 0),
            "lost_events": counters.get("LOST_EVENTS", 0),
            "read_faults": counters.get("READ_FAULTS", 0),
            "kernel_mismatch": counters.get("KERNEL_MISMATCH", 0),
            "missed_runs": raw.get("missed_runs", 0),
        },
        "processes": processes, "per_cpu": per_cpu_rows, "per_node": per_node,
        "refcount": refcount, "resizes": timeline["resizes"], "threads": timeline["threads"],
        "hash_states": timeline["hash_states"], "intervals": raw.get("intervals", []),
    }


def _refcount(counters: dict, method: dict, futexes: list[dict]) -> dict:
    if method.get("name") == "tracepoint":
        # Every private-hash lookup takes one reference and drops it again.
        private = sum(f["lookups"] for f in futexes if f["kind"] == "private")
        atomic = sum(f["atomic"] for f in futexes if f["kind"] == "private")
        return {"source": "inferred: one get and one put per private-hash lookup (tracepoint method)",
                "get_percpu": private - atomic, "get_atomic": atomic,
                "put_percpu": private - atomic, "put_atomic": atomic}
    return {"source": "probed: " + ", ".join(method.get("refcount_probes", []))
            + "; per-CPU vs atomic is fph->state read at the probe",
            "get_percpu": counters.get("REF_GET_PERCPU", 0), "get_atomic": counters.get("REF_GET_ATOMIC", 0),
            "put_percpu": counters.get("REF_PUT_PERCPU", 0), "put_atomic": counters.get("REF_PUT_ATOMIC", 0)}
