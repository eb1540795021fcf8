"""Two recordings side by side (`futextrace diff A B`), as data: processes
paired, each figure's two values, their difference and ratio, and each side's
noise (analysis/compare_side.py). output/text/diff_text.py words it.

Processes are paired by pid where both recordings have it, then by command
name (a restarted service gets a new pid); each pair says which. A process in
one recording only is listed with the other side empty. Within a pair, hashes
are paired by kind: private with private, busiest first (an automatic 16 that
grew to 32 compares its 32 with the other side's busiest private hash).
"""
from __future__ import annotations

from futextrace.analysis import compare_side as side
from futextrace.analysis.lockwaits import measured
from futextrace.recording import Process, Recording

SCHEMA = "futextrace-diff"
SCHEMA_VERSION = 1


def figure(a: tuple, b: tuple) -> dict:
    """{a, b, diff, ratio, noise_a, noise_b}: diff and ratio only where both are known."""
    va, vb = a[0], b[0]
    both = va is not None and vb is not None
    return {"a": va, "b": vb, "diff": vb - va if both else None,
            "ratio": vb / va if both and va else None, "noise_a": a[1], "noise_b": b[1]}


def _figures(fa: dict | None, fb: dict | None) -> dict:
    names = list((fa or fb).keys())
    return {n: figure((fa or {}).get(n, (None, None)), (fb or {}).get(n, (None, None))) for n in names}


def match_processes(pa: list[Process], pb: list[Process]) -> list[tuple]:
    """[(how, process in A or None, process in B or None)]: by pid, then by
    command name in order of lookups, then those in one recording only."""
    by_pid = {p["pid"]: p for p in pb}
    pairs, left_a, used_b = [], [], set()
    for p in pa:
        if p["pid"] in by_pid:
            pairs.append(("pid", p, by_pid[p["pid"]]))
            used_b.add(p["pid"])
        else:
            left_a.append(p)
    left_b = [p for p in pb if p["pid"] not in used_b]
    for p in list(left_a):
        q = next((q for q in left_b if q.get("comm") and q.get("comm") == p.get("comm")), None)
        if q is not None:
            pairs.append(("comm", p, q))
            left_a.remove(p)
            left_b.remove(q)
    return pairs + [("only_a", p, None) for p in left_a] + [("only_b", None, q) for q in left_b]


def _hash_keys(proc: Process | None) -> dict[tuple, dict]:
    """(kind, rank within the kind) -> hash; the recording lists them busiest first."""
    out, seen = {}, {}
    for h in (proc or {}).get("hashes") or []:
        rank = seen[h["kind"]] = seen.get(h["kind"], -1) + 1
        out[(h["kind"], rank)] = h
    return out


def _hash_side(rec: Recording, proc: Process | None, h: dict | None) -> dict | None:
    if h is None:
        return None
    return {"kind": h["kind"], "buckets": h.get("buckets"), "mode": side.hash_mode(rec, proc["pid"], h)}


def _hashes(ra: Recording, pa: Process | None, rb: Recording, pb: Process | None) -> list[dict]:
    ka, kb = _hash_keys(pa), _hash_keys(pb)
    keys = list(ka) + [k for k in kb if k not in ka]
    out = []
    for key in keys:
        ha, hb = ka.get(key), kb.get(key)
        fa = side.hash_figures(ra, pa["pid"], ha) if ha else None
        fb = side.hash_figures(rb, pb["pid"], hb) if hb else None
        out.append({"kind": key[0], "rank": key[1], "a": _hash_side(ra, pa, ha), "b": _hash_side(rb, pb, hb),
                    "figures": _figures(fa, fb)})
    return out


def _who(p: Process | None) -> dict | None:
    return {"pid": p["pid"], "comm": p.get("comm")} if p else None


def compare(ra: Recording, rb: Recording, bench_a: dict | None = None, bench_b: dict | None = None,
            files: tuple = (None, None)) -> dict:
    """The comparison (docs/json-schema.md, `futextrace diff --json`); bench_a/b
    are the benchmark results a `bench --json` file carries beside its recording,
    `files` the names the recordings were read from."""
    procs = []
    for how, pa, pb in match_processes(ra.get("processes") or [], rb.get("processes") or []):
        fa = side.process_figures(ra, pa, bench_a) if pa else None
        fb = side.process_figures(rb, pb, bench_b) if pb else None
        procs.append({"match": how, "a": _who(pa), "b": _who(pb), "figures": _figures(fa, fb),
                      "hashes": _hashes(ra, pa, rb, pb)})
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
            "a": _run(ra, bench_a, files[0]), "b": _run(rb, bench_b, files[1]), "processes": procs}


def _run(rec: Recording, bench: dict | None, file: str | None) -> dict:
    """What the text's header says of each recording."""
    return {"file": file, "started_at": rec.get("started_at"), "duration_s": rec.get("duration_s"),
            "host": rec.get("host"), "method": (rec.get("method") or {}).get("name"),
            "intervals": len(rec.get("intervals") or []),
            "lock_waits_measured": measured(rec),
            "benchmark": None if not bench else {"pid": side.bench_pid(rec, bench),
                                                 "ops_per_s": bench.get("avg_ops_per_sec")}}
