"""Turn raw map dumps and events into a recording (the documented JSON).

Pure Python over plain data, so it is unit-tested on recorded dumps. Input
`raw` (what futextrace.record.recorder collects from the kernel maps):
  counters: {name: [per-CPU values]}
  buckets:  [{tgid, kind, hash_mask, bucket, node, per_cpu: [[lookups, atomic, kernel_checked, unlisted], ...]}]
            the exact counts (the `buckets` map and the cache); absent in old dumps,
            where `futexes` held them; `unlisted` (first sightings the list could
            not take) absent in dumps made before the first-seen filter
  seen_filter: {words, bits_per_key, false_positive_rate}: the first-seen filter
            and how often it now takes a new futex as seen (absent in old dumps)
  futexes:  [{tgid, kind, uaddr, hash_mask, per_cpu: [CpuStat or its 5 values, one per CPU]}]
            the bounded per-futex list (the `futexes` map and the cache)
  futex_capacity: entries of the `futexes` map
  events:   [{type, t, tgid, tid, cpu, hash, hash_new, hash_mask, hash_new_mask, arg0, arg1,
              ret, nr_threads, custom, new_custom, state, comm}]
"""
from __future__ import annotations

import platform
import statistics
from collections import defaultdict
from typing import NamedTuple

from futextrace import __version__
from futextrace.analysis.atomic import resize_cost
from futextrace.analysis.timeline import build_timeline
from futextrace.analysis.whatif import futex_list
from futextrace.kernel.layout import KIND
from futextrace.kernel.sizing import buckets_of
from futextrace.loading.exact import UNKNOWN, futex_share
from futextrace.recording import (BUCKET_NOT_VISIBLE, CpuRow, Estimate, Estimates, FutexDetail, FutexList,
                                  HashSummary, HistSlot, Imbalance, Kernel, Method, NodeRow, Process, Recording,
                                  Refcount, SCHEMA, SCHEMA_VERSION, SeenFilter, Totals)

KIND_NAMES = {v: k.removeprefix("FT_").lower() for k, v in KIND.items()}
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
    """Merge duplicate keys (exact.listed_futexes: the `futexes` map and the
    lookup cache both hold counts of a listed futex)."""
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


def _log2_slots(values: list[int]) -> list[HistSlot]:
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


def imbalance(counts: list[int]) -> Imbalance:
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


def _by_bucket(rows: list[dict]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        out[(r["node"], r["bucket"])].append(r)
    return out


def futex_detail(lookups: int, futexes: list[dict], unlisted: int | None = None) -> FutexDetail:
    """What the per-futex list (bounded: the `futexes` map and the cache) holds
    of a hash's futexes. `unlisted`: futexes the first-seen filter counted that
    the list could not take (None: a dump from before the filter, where the
    list's completeness is judged by the lookups it missed)."""
    listed = _lookups(futexes)
    missed = max(0, lookups - listed)
    if unlisted is None:
        return {"complete": missed == 0, "futexes_listed": len(futexes),
                "lookups_listed": listed, "lookups_missed": missed}
    return {"complete": unlisted == 0, "futexes_listed": len(futexes), "futexes_unlisted": unlisted,
            "lookups_listed": listed}


def filter_method(seen: SeenFilter) -> str:
    return (f"first-seen filter (Bloom: {seen['bits_per_key']} bits per futex in "
            f"{seen.get('words_per_key', 1)} words of {seen['words'] * 64:,} bits)")


def _estimate(counted: int, extra_max: float, method: str) -> Estimate:
    """A count the filter may have undercounted by up to extra_max: the middle
    of [counted, counted + extra_max], and the half-width as a percentage."""
    value = counted + extra_max / 2
    return {"value": round(value), "error_pct": round(100 * extra_max / 2 / value, 4) if value else 0.0,
            "method": method}


def filter_estimates(distinct: int, collisions: int, unlisted: int, seen: SeenFilter | None) -> Estimates | None:
    """Estimates when some futexes are counted only by the filter (beyond the
    list), or when the filter may have missed one: a new futex is taken as seen
    with probability at most false_positive_rate (its fill only grows), so up to
    distinct * rate futexes, each adding at most one collision, were missed."""
    if not seen:
        return None
    missed_max = distinct * seen["false_positive_rate"]
    if not unlisted and missed_max < 0.5:
        return None
    method = filter_method(seen)
    return {"distinct_futexes": _estimate(distinct, missed_max, method),
            "collisions": _estimate(collisions, missed_max, method),
            "note": f"{unlisted:,} of these futexes are beyond the per-futex list: counted per bucket by "
                    "the first-seen filter, without addresses" if unlisted else
                    "the first-seen filter may have taken a new futex as seen"}


def _futex_estimates(detail: FutexDetail, collisions: int) -> Estimates:
    """Each lookup the list misses may be one more distinct futex (or collision)."""
    missed = detail["lookups_missed"]
    return {"distinct_futexes": {"low": detail["futexes_listed"], "high": detail["futexes_listed"] + missed},
            "collisions": {"low": collisions, "high": collisions + missed},
            "note": "from the per-futex list, which missed lookups_missed lookups: lower bounds; "
                    "each missed lookup may add at most one futex or collision"}


def _unlisted(brows: list[dict], seen: SeenFilter | None) -> int | None:
    return sum(r.get("unlisted", 0) for r in brows) if seen else None


def _hash_summary(kind: str, nbuckets: int, brows: list[dict], futexes: list[dict],
                  seen: SeenFilter | None = None) -> HashSummary:
    """Bucket figures from the exact per-bucket counts; futex figures from the
    per-futex list and, beyond it, the first-seen filter's counts per bucket
    (estimates), or bounds in recordings made before the filter."""
    by_bucket = _by_bucket(brows)
    lookups_of = {key: sum(r["lookups"] for r in rs) for key, rs in by_bucket.items()}
    unlisted_of = {key: sum(r.get("unlisted", 0) for r in rs) for key, rs in by_bucket.items()}
    futexes_of = _by_bucket(futexes)
    counts = list(lookups_of.values())
    all_counts = counts + [0] * max(0, nbuckets - len(counts))
    nfutexes_of = {k: len(futexes_of.get(k, [])) + unlisted_of[k] for k in lookups_of}
    per_bucket = list(nfutexes_of.values())
    collisions = sum(n - 1 for n in per_bucket if n > 1)
    detail = futex_detail(sum(counts), futexes, sum(unlisted_of.values()) if seen else None)
    distinct = len(futexes) + detail.get("futexes_unlisted", 0)
    hottest = sorted(lookups_of.items(), key=lambda kv: -kv[1])[:HOTTEST]
    summary = {
        "kind": kind,
        "buckets": nbuckets,
        "lookups": sum(counts),
        "distinct_futexes": distinct,
        "imbalance": imbalance(all_counts),
        "lookups_per_bucket_hist": _log2_slots(all_counts),
        "futexes_per_bucket_hist": _log2_slots(per_bucket + [0] * max(0, nbuckets - len(counts))),
        "collisions": collisions,
        # kprobe method: lookups whose bucket was also taken from the kernel's
        # returned pointer (any disagreement is in totals.kernel_mismatch).
        "kernel_checked": sum(r.get("kernel_checked", 0) for r in brows),
        "futex_detail": detail,
        "hottest": [{
            "bucket": bucket, "node": None if node < 0 else node, "lookups": n,
            "futexes": nfutexes_of[(node, bucket)],
            "addresses": [hex(f["uaddr"]) for f in sorted(futexes_of.get((node, bucket), []),
                                                        key=lambda f: -f["lookups"])[:ADDRS_PER_BUCKET]],
        } for (node, bucket), n in hottest],
        "bucket_counts": {f"{n}:{b}" if n >= 0 else str(b): v for (n, b), v in sorted(lookups_of.items())},
    }
    if seen:
        est = filter_estimates(distinct, collisions, detail["futexes_unlisted"], seen)
        if est:
            summary["estimates"] = est
    elif not detail["complete"]:
        summary["estimates"] = _futex_estimates(detail, collisions)
    return summary


def _futex_rows(entries: list[dict]) -> list[dict]:
    """One row per futex of the per-futex list with lookups (CPUs summed)."""
    futexes = []
    for e in merge_futexes(entries):
        st = total_of(e["per_cpu"])
        if not st.lookups:
            continue
        kind = KIND_NAMES.get(e["kind"], str(e["kind"]))
        futexes.append({"tgid": e["tgid"], "kind": kind, "uaddr": e["uaddr"],
                        "hash_mask": e["hash_mask"] if kind == "private" else 0,   # global_numa: the node
                        "lookups": st.lookups, "atomic": st.atomic,
                        "bucket": st.bucket, "node": st.node, "kernel_bucket": st.kernel_bucket})
    return futexes


def _bucket_rows(entries: list[dict]) -> tuple[list[dict], dict]:
    """One row per bucket, the entries of exact.bucket_entries (every tier's
    share) added, and the per-CPU lookup totals: the exact counts."""
    merged: dict[tuple, dict] = {}
    per_cpu = defaultdict(lambda: {"lookups": 0, "private": 0, "global": 0, "atomic": 0})
    for e in entries:
        kind = KIND_NAMES.get(e["kind"], str(e["kind"]))
        key = (e["tgid"], kind, e["hash_mask"] if kind == "private" else 0, e["bucket"], e["node"])
        row = merged.setdefault(key, {"tgid": key[0], "kind": kind, "hash_mask": key[2], "bucket": key[3],
                                      "node": key[4], "lookups": 0, "atomic": 0, "kernel_checked": 0,
                                      "unlisted": 0})
        for cpu, (lookups, atomic, checked, *unlisted) in enumerate(e["per_cpu"]):
            if not lookups and not any(unlisted):
                continue
            row["lookups"] += lookups
            row["atomic"] += atomic
            row["kernel_checked"] += checked
            row["unlisted"] += unlisted[0] if unlisted else 0
            pc = per_cpu[cpu]
            pc["lookups"] += lookups
            pc["atomic"] += atomic
            pc["private" if kind == "private" else "global"] += lookups
    return [r for r in merged.values() if r["lookups"]], per_cpu


def _lookups(rows: list[dict]) -> int:
    return sum(r["lookups"] for r in rows)


def _group(rows: list[dict], key) -> dict:
    out: dict = defaultdict(list)
    for r in rows:
        out[key(r)].append(r)
    return out


def _process_hashes(brows: list[dict], futexes: list[dict], global_buckets: int,
                    seen: SeenFilter | None) -> list[HashSummary]:
    """One summary per hash a process used, busiest first."""
    def hash_of(r):
        return (r["kind"], r["hash_mask"])
    groups, listed = _group(brows, hash_of), _group(futexes, hash_of)
    hashes = []
    for (kind, mask), group in sorted(groups.items(), key=lambda kv: -_lookups(kv[1])):
        fs = listed.get((kind, mask), [])
        if kind == "private":
            hashes.append(_hash_summary("private", buckets_of(mask), group, fs, seen))
        elif kind == "global_shared" and any(r["bucket"] == UNKNOWN for r in group):
            # A shared key's bucket is recorded only where the kernel's is read: else n/a.
            detail = futex_detail(_lookups(group), fs, _unlisted(group, seen))
            hashes.append({"kind": "global_shared", "buckets": global_buckets,
                           "lookups": _lookups(group),
                           "distinct_futexes": len(fs) + detail.get("futexes_unlisted", 0),
                           "futex_detail": detail, "note": BUCKET_NOT_VISIBLE})
        else:
            hashes.append(_hash_summary(kind, global_buckets, group, fs, seen))
    return hashes


def _processes(brows: list[dict], futexes: list[dict], comms: dict[int, str],
               global_buckets: int, seen: SeenFilter | None = None) -> list[Process]:
    by_tgid, listed = _group(brows, lambda r: r["tgid"]), _group(futexes, lambda r: r["tgid"])
    return [{"pid": tgid, "comm": comms.get(tgid, ""), "lookups": _lookups(rs),
             "atomic_lookups": sum(r["atomic"] for r in rs if r["kind"] == "private"),
             "hashes": _process_hashes(rs, listed.get(tgid, []), global_buckets, seen),
             "futex_list": futex_list(listed.get(tgid, []))}
            for tgid, rs in sorted(by_tgid.items(), key=lambda kv: -_lookups(kv[1]))]


def _per_cpu_rows(per_cpu: dict, cpu_node: dict[int, int], counters: dict[str, list[int]]) -> list[CpuRow]:
    rows = []
    for cpu in sorted(set(per_cpu) | set(cpu_node)):
        row = {"cpu": cpu, "node": cpu_node.get(cpu, 0), **per_cpu[cpu]}
        for name in REF_COUNTERS:
            vals = counters.get(name, [])
            row[name.lower()] = vals[cpu] if cpu < len(vals) else 0
        rows.append(row)
    return rows


def _per_node_rows(per_cpu_rows: list[CpuRow]) -> list[NodeRow]:
    out = []
    for node in sorted({r["node"] for r in per_cpu_rows}):
        rows = [r for r in per_cpu_rows if r["node"] == node]
        out.append({"node": node, "cpus": [r["cpu"] for r in rows],
                    **{k: sum(r[k] for r in rows) for k in ("lookups", "private", "global", "atomic")}})
    return out


def totals_of(counters: dict[str, int], raw: dict, duration_s: float) -> Totals:
    """The recording's `totals` (without its futex_list) from the summed counters."""
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


def build_recording(raw: dict, kernel: Kernel, method: Method, duration_s: float,
                    started_at: str, comms: dict[int, str] | None = None) -> Recording:
    """The recording (docs/json-schema.md) from a raw dump and the kernel model."""
    cpu_node = {int(k): v for k, v in kernel.get("cpu_node", {}).items()}
    global_buckets = kernel.get("global_hash", {}).get("buckets_per_node", 0) * len(kernel.get("nodes") or [0])
    counters = {k: sum(v) for k, v in raw["counters"].items()}
    futexes = _futex_rows(raw["futexes"])
    # Recordings made before the `buckets` map held the exact counts in the futex list.
    buckets = raw["buckets"] if "buckets" in raw else futex_share(raw["futexes"])
    brows, per_cpu = _bucket_rows(buckets)
    per_cpu_rows = _per_cpu_rows(per_cpu, cpu_node, raw["counters"])
    at_attach = raw.get("hash_at_attach") or {"source": "unavailable", "complete": False, "processes": {},
                                              "note": "not read (a recording made without it)"}
    timeline = build_timeline(raw.get("events", []), kernel,
                              infer_prctl=method.get("prctl_results") == "inferred", at_attach=at_attach)
    rec: Recording = {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "tool_version": __version__,
        "started_at": started_at, "duration_s": duration_s, "method": method, "kernel": kernel,
        "host": platform.node(),
        "totals": {**totals_of(counters, raw, duration_s),
                   "futex_list": _futex_list(raw, counters, brows, futexes)},
        "processes": _processes(brows, futexes, comms or {}, global_buckets, raw.get("seen_filter")),
        "per_cpu": per_cpu_rows, "per_node": _per_node_rows(per_cpu_rows),
        "refcount": refcount_of(counters, method, brows), "resizes": timeline["resizes"],
        "threads": timeline["threads"], "hash_states": timeline["hash_states"],
        "intervals": raw.get("intervals", []), "hash_at_attach": at_attach,
    }
    rec["resize_cost"] = resize_cost(rec)
    return rec


def _futex_list(raw: dict, counters: dict, brows: list[dict], futexes: list[dict]) -> FutexList:
    """The per-futex list as a whole: how much of the exact count it holds."""
    seen = raw.get("seen_filter")
    out = {"capacity": raw.get("futex_capacity"), "full": bool(counters.get("FUTEXES_FULL", 0)),
           **futex_detail(_lookups(brows), futexes, _unlisted(brows, seen))}
    if seen:
        out["seen_filter"] = {**seen, "method": filter_method(seen)}
    return out


def refcount_of(counters: dict, method: Method, brows: list[dict]) -> Refcount:
    """The recording's `refcount`: probed counters, or (tracepoint method)
    inferred from the private-hash rows of `brows` (kind, lookups, atomic)."""
    if method.get("name") == "tracepoint":
        # Every private-hash lookup takes one reference and drops it again.
        private = sum(r["lookups"] for r in brows if r["kind"] == "private")
        atomic = sum(r["atomic"] for r in brows if r["kind"] == "private")
        return {"source": "inferred: one get and one put per private-hash lookup (tracepoint method)",
                "get_percpu": private - atomic, "get_atomic": atomic,
                "put_percpu": private - atomic, "put_atomic": atomic}
    return {"source": "probed: " + ", ".join(method.get("refcount_probes", []))
            + "; per-CPU vs atomic is fph->state read at the probe",
            "get_percpu": counters.get("REF_GET_PERCPU", 0), "get_atomic": counters.get("REF_GET_ATOMIC", 0),
            "put_percpu": counters.get("REF_PUT_PERCPU", 0), "put_atomic": counters.get("REF_PUT_ATOMIC", 0)}
