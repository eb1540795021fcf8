"""`futextrace snapshot`'s table: one line per process's futex hash
(snapshot/hashes.py reads them)."""
from __future__ import annotations

from futextrace.loading.iterator import ITERATOR


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
