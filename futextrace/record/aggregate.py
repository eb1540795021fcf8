"""Turn raw map dumps and events into a recording (the documented JSON).

Pure Python over plain data, so it is unit-tested on recorded dumps. Input
`raw` (what futextrace.record.recorder collects from the kernel maps):
  counters: {name: [per-CPU values]}
  futexes:  [{tgid, kind, uaddr, hash_mask, per_cpu: [CpuStat or its 5 values, one per CPU]}]
  events:   [{type, t, tgid, tid, cpu, hash, hash_new, hash_mask, hash_new_mask, arg0, arg1,
              ret, nr_threads, custom, new_custom, state, comm}]
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from typing import NamedTuple

from futextrace import __version__
from futextrace.analysis.atomic import resize_cost
from futextrace.analysis.timeline import build_timeline
from futextrace.analysis.whatif import futex_list
from futextrace.loading.layout import KIND

SCHEMA = "futextrace-recording"
SCHEMA_VERSION = 1
KIND_NAMES = {v: k.removeprefix("FT_").lower() for k, v in KIND.items()}
UNKNOWN = 0xFFFFFFFF  # a bucket the kernel did not report (tracepoint method)
HOTTEST = 10          # hottest buckets listed per hash
ADDRS_PER_BUCKET = 8  # futex addresses listed per hot bucket
REF_COUNTERS = ("REF_GET_PERCPU", "REF_GET_ATOMIC", "REF_PUT_PERCPU", "REF_PUT_ATOMIC")


class CpuStat(NamedTuple):
    """One CPU's counts for one futex (struct futex_stat in bpf/futextrace.h)."""
    lookups: int
    atomic: int          # lookups while the private hash's reference was atomic
    bucket: int
    node: int            # -1: private hash; else the global table's node (FUTEX2_NUMA -1 resolved in BPF)
    kernel_bucket: int   # the bucket the kernel returned (kprobe method), else UNKNOWN


def _add(mine: CpuStat, other: CpuStat) -> CpuStat:
    """Counts added; the bucket fields from whichever of the two saw the futex."""
    where = other[2:] if other.lookups and not mine.lookups else mine[2:]
    return CpuStat(mine.lookups + other.lookups, mine.atomic + other.atomic, *where)


def merge_futexes(entries: list[dict]) -> list[dict]:
    """Merge duplicate keys (the per-CPU cache and the map both hold counts)."""
    merged: dict[tuple, dict] = {}
    for e in entries:
        key = (e["tgid"], e["kind"], e["uaddr"], e["hash_mask"])
        stats = [CpuStat(*v) for v in e["per_cpu"]]
        m = merged.get(key)
        if m is None:
            merged[key] = {**e, "per_cpu": stats}
        else:
            m["per_cpu"] = [_add(mine, other) for mine, other in zip(m["per_cpu"], stats)]
    return list(merged.values())


def total_of(per_cpu: list[CpuStat]) -> CpuStat:
    """Counts summed over CPUs; the bucket fields come from a CPU that saw the
    futex (the others are zero)."""
    seen = next((v for v in per_cpu if v.lookups), per_cpu[0])
    return CpuStat(sum(v.lookups for v in per_cpu), sum(v.atomic for v in per_cpu), *seen[2:])


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


def _futex_rows(entries: list[dict], cpu_node: dict[int, int]) -> tuple[list[dict], dict]:
    """One row per futex with lookups (CPUs summed), and the per-CPU lookup totals."""
    futexes = []
    per_cpu = defaultdict(lambda: {"lookups": 0, "private": 0, "global": 0, "atomic": 0})
    for e in merge_futexes(entries):
        st = total_of(e["per_cpu"])
        if not st.lookups:
            continue
        kind = KIND_NAMES.get(e["kind"], str(e["kind"]))
        node = st.node
        futexes.append({"tgid": e["tgid"], "kind": kind, "uaddr": e["uaddr"],
                        "hash_mask": e["hash_mask"] if kind == "private" else 0,   # global_numa: the node
                        "lookups": st.lookups, "atomic": st.atomic,
                        "bucket": st.bucket, "node": node, "kernel_bucket": st.kernel_bucket})
        for cpu, v in enumerate(e["per_cpu"]):
            if v.lookups:
                pc = per_cpu[cpu]
                pc["lookups"] += v.lookups
                pc["atomic"] += v.atomic
                pc["private" if kind == "private" else "global"] += v.lookups
    return futexes, per_cpu


def _lookups(futexes: list[dict]) -> int:
    return sum(f["lookups"] for f in futexes)


def _process_hashes(fs: list[dict], global_buckets: int) -> list[dict]:
    """One summary per hash a process used, busiest first."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for f in fs:
        groups[(f["kind"], f["hash_mask"])].append(f)
    hashes = []
    for (kind, mask), group in sorted(groups.items(), key=lambda kv: -_lookups(kv[1])):
        if kind == "private":
            hashes.append(_hash_summary("private", mask + 1, group))
        elif kind == "global_shared":
            hashes.append({"kind": "global_shared", "buckets": global_buckets,
                           "lookups": _lookups(group), "distinct_futexes": len(group),
                           "note": "shared futexes: bucket not computable from a tracepoint"})
        else:
            hashes.append(_hash_summary(kind, global_buckets, group))
    return hashes


def _processes(futexes: list[dict], comms: dict[int, str], global_buckets: int) -> list[dict]:
    by_tgid: dict[int, list[dict]] = defaultdict(list)
    for f in futexes:
        by_tgid[f["tgid"]].append(f)
    return [{"pid": tgid, "comm": comms.get(tgid, ""), "lookups": _lookups(fs),
             "atomic_lookups": sum(f["atomic"] for f in fs if f["kind"] == "private"),
             "hashes": _process_hashes(fs, global_buckets), "futex_list": futex_list(fs)}
            for tgid, fs in sorted(by_tgid.items(), key=lambda kv: -_lookups(kv[1]))]


def _per_cpu_rows(per_cpu: dict, cpu_node: dict[int, int], counters: dict[str, list[int]]) -> list[dict]:
    rows = []
    for cpu in sorted(set(per_cpu) | set(cpu_node)):
        row = {"cpu": cpu, "node": cpu_node.get(cpu, 0), **per_cpu[cpu]}
        for name in REF_COUNTERS:
            vals = counters.get(name, [])
            row[name.lower()] = vals[cpu] if cpu < len(vals) else 0
        rows.append(row)
    return rows


def _per_node_rows(per_cpu_rows: list[dict]) -> list[dict]:
    out = []
    for node in sorted({r["node"] for r in per_cpu_rows}):
        rows = [r for r in per_cpu_rows if r["node"] == node]
        out.append({"node": node, "cpus": [r["cpu"] for r in rows],
                    **{k: sum(r[k] for r in rows) for k in ("lookups", "private", "global", "atomic")}})
    return out


def _totals(counters: dict[str, int], raw: dict, duration_s: float) -> dict:
    unreadable = counters.get("UNATTR_UNREADABLE", 0)   # lookups of unknown hash: in the total only
    total = counters.get("PRIVATE", 0) + counters.get("GLOBAL", 0) + unreadable
    return {
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
    }


def build_recording(raw: dict, kernel: dict, method: dict, duration_s: float,
                    started_at: str, comms: dict[int, str] | None = None) -> dict:
    """The recording (docs/json-schema.md) from a raw dump and the kernel model."""
    cpu_node = {int(k): v for k, v in kernel.get("cpu_node", {}).items()}
    global_buckets = kernel.get("global_hash", {}).get("buckets_per_node", 0) * len(kernel.get("nodes") or [0])
    counters = {k: sum(v) for k, v in raw["counters"].items()}
    futexes, per_cpu = _futex_rows(raw["futexes"], cpu_node)
    per_cpu_rows = _per_cpu_rows(per_cpu, cpu_node, raw["counters"])
    at_attach = raw.get("hash_at_attach") or {"source": "unavailable", "complete": False, "processes": {},
                                              "note": "not read (a recording made without it)"}
    timeline = build_timeline(raw.get("events", []), kernel,
                              infer_prctl=method.get("prctl_results") == "inferred", at_attach=at_attach)
    rec = {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "tool_version": __version__,
        "started_at": started_at, "duration_s": duration_s, "method": method, "kernel": kernel,
        "totals": _totals(counters, raw, duration_s),
        "processes": _processes(futexes, comms or {}, global_buckets),
        "per_cpu": per_cpu_rows, "per_node": _per_node_rows(per_cpu_rows),
        "refcount": _refcount(counters, method, futexes), "resizes": timeline["resizes"],
        "threads": timeline["threads"], "hash_states": timeline["hash_states"],
        "intervals": raw.get("intervals", []), "hash_at_attach": at_attach,
    }
    rec["resize_cost"] = resize_cost(rec)
    return rec


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
