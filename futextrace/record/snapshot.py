"""The hash each running process uses now, seen by the tracer.

PR_FUTEX_HASH_GET_SLOTS answers only for the calling process, so instead we
trace for a moment: the BPF side reports a process's hash the first time it
makes a futex call (HASH_SEEN), which timeline.py turns into `hash_states`.
"""
from __future__ import annotations

from futextrace.record import targets
from futextrace.record.recorder import RecordOptions, record_pids


def describe(state: dict | None) -> dict:
    if state is None:
        return {"seen": False, "buckets": None, "kind": None, "mode": None,
                "text": "not seen (no futex call while watching)"}
    b, custom = state["buckets"], state["custom"]
    if b:
        kind, mode = "private", "custom" if custom else "auto"
        text = f"private hash, {b} buckets, {'custom (set by prctl)' if custom else 'automatic'}"
    else:
        # A private hash with no buckets is the prctl(SET_SLOTS, 0) choice; none at all is the default.
        kind, mode = "global", "custom" if custom else "auto"
        text = ("global hash, chosen with prctl (SET_SLOTS 0, for good)" if custom
                else "global hash (no private hash yet: single-threaded so far)")
    return {"seen": True, "buckets": b, "kind": kind, "mode": mode, "text": text}


def latest_states(rec: dict) -> dict[int, dict]:
    """pid -> its last hash state in the recording."""
    out: dict[int, dict] = {}
    for s in sorted(rec.get("hash_states", []), key=lambda s: s["t"]):
        out[s["pid"]] = s
    return out


def snapshot(pids: list[int], duration: float = 1.0, model=None) -> dict:
    rec = record_pids(RecordOptions(pids=list(pids), duration=duration, method="auto"), model)
    states = latest_states(rec)
    comms = {p["pid"]: p["comm"] for p in rec.get("processes", [])}
    wanted = list(pids) or sorted(states)
    rows = []
    for pid in wanted:
        s = states.get(pid)
        row = {"pid": pid, "comm": (s or {}).get("comm") or comms.get(pid, ""), **describe(s)}
        if s is None and not targets.alive(pid):
            row["text"] = "exited while watching, before a futex call was seen"
        rows.append(row)
    # A PID that exits ends the watch early (record_pids); it is a row, not an error.
    return {"duration_s": rec["duration_s"], "processes": rows, "note": rec.get("error")}


def render(snap: dict) -> str:
    out = [f"{'PID':>8}  {'COMM':<16} {'BUCKETS':>7}  HASH"]
    for r in snap["processes"]:
        b = "-" if r["buckets"] is None else str(r["buckets"])
        out.append(f"{r['pid']:>8}  {r['comm']:<16} {b:>7}  {r['text']}")
    if not snap["processes"]:
        out.append("(no process made a futex call while watching)")
    return "\n".join(out)
