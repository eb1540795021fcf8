"""The futex hash each running process uses now.

Read from the kernel at once by the BPF task iterator (loading/iterator.py):
buckets, custom or automatic, global by prctl, the refcount mode and a
replacement waiting for its pivot, for every process, idle ones included.
Where the kernel refuses iterators, the fallback watches futex calls for a
moment (HASH_SEEN events, as `record` sees them) and says so: a process that
makes no futex call while watched is then "not seen".

This module: the entry point and the table's text. Rows: hashrows.py;
reading and its checks: hashread.py; the fallback: snapshot_fallback.py;
`--watch`: watcher.py.
"""
from __future__ import annotations

from futextrace.kernel import modelcache
from futextrace.record.hashread import ITERATOR, check_ready, header, open_iterator
from futextrace.record.hashrows import iterator_rows
from futextrace.record.snapshot_fallback import snapshot_by_watching


def snapshot(pids: list[int], duration: float = 1.0, model=None) -> dict:
    model = model or modelcache.load_running()[0]     # this boot's cached model
    check_ready(model, pids)
    it, why = open_iterator(model)
    if it is None:
        return snapshot_by_watching(pids, duration, model, why)
    with it:
        rows = iterator_rows(it.read(), list(pids))
    return {**header(model, ITERATOR, "read from the kernel by a BPF task iterator"),
            "processes": rows, "note": None}


# --- text ---------------------------------------------------------------------
def hash_column(r: dict) -> str:
    if r["kind"] == "private":
        return r["mode"]
    if r["kind"] == "global":
        return "global (prctl)" if r["mode"] == "custom" else "global (none yet)"
    return r["text"]


def pending_column(p: dict | None) -> str:
    if not p:
        return "-"
    return f"-> {p['buckets']} {'custom' if p['custom'] else 'auto'}" if p["buckets"] else "-> global"


def format_row(r: dict) -> str:
    threads = "-" if r.get("threads") is None else str(r["threads"])
    buckets = "-" if not r["buckets"] else str(r["buckets"])
    refcount = r.get("refcount") or "-"
    return (f"{r['pid']:>8}  {r['comm']:<16} {threads:>7} {buckets:>7}  {hash_column(r):<18} "
            f"{refcount:<8} {pending_column(r.get('pending'))}")


def render(snap: dict) -> str:
    out = [f"{'PID':>8}  {'COMM':<16} {'THREADS':>7} {'BUCKETS':>7}  {'HASH':<18} {'REFCOUNT':<8} PENDING"]
    out += [format_row(r) for r in snap["processes"]]
    if not snap["processes"]:
        out.append("(no process has a private hash or chose the global one)" if snap["method"] == ITERATOR
                   else "(no process made a futex call while watching)")
    out.append(f"({snap['why']}; {snap['online_cpus']} online CPUs, "
               f"global hash {snap['global_buckets']} buckets per node)")
    return "\n".join(out)
