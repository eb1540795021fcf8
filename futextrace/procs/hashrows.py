"""Rows of `futextrace snapshot` (and of the hash at attach,
record/attachstate.py): one process's futex hash, from a task iterator record
(struct ft_iter_task) or from a hash state the watch saw (HASH_SEEN)."""
from __future__ import annotations

from futextrace.kernel.sizing import buckets_of
from futextrace.procs import targets


def describe(state: dict | None) -> dict:
    """A hash state seen by the watch (HASH_SEEN) as a row's hash fields."""
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


def row_from_record(r: dict) -> dict:
    """A task iterator record (struct ft_iter_task) as a snapshot row."""
    state = {"buckets": buckets_of(r["hash_mask"]) if r["has_hash"] and r["hash_mask"] else 0,
             "custom": bool(r["custom"])} if r["has_hash"] else {"buckets": 0, "custom": False}
    row = {"pid": r["tgid"], "comm": r["comm"], "threads": r["nr_threads"], **describe(state)}
    if not r["has_hash"] and r["nr_threads"] > 1:   # describe() assumes a single thread
        row["text"] = "global hash (no private hash allocated)"
    row["refcount"] = ("atomic" if r["state"] else "per-cpu") if r["has_hash"] else None
    row["pending"] = None
    if r["has_new"]:
        row["pending"] = {"buckets": buckets_of(r["new_hash_mask"]) if r["new_hash_mask"] else 0,
                          "custom": bool(r["new_custom"])}
    return row


def listed(row: dict) -> bool:
    """Without -p: processes with a private hash or that chose the global one."""
    return row["kind"] == "private" or row["mode"] == "custom"


def sort_rows(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (-(r.get("threads") or 0), r["pid"]))


def iterator_rows(records: dict[int, dict], pids: list[int]) -> list[dict]:
    if not pids:
        return sort_rows([row for row in map(row_from_record, records.values()) if listed(row)])
    rows = []
    for pid in pids:
        if pid in records:
            rows.append(row_from_record(records[pid]))
        else:   # validated before reading: it exited since, or the walk skipped it
            text = ("not visited by the kernel's task iterator (seen for PID 1 on 6.18)"
                    if targets.alive(pid) else "exited")
            rows.append({"pid": pid, "comm": targets.comm_label(pid), "threads": None, "seen": False,
                         "buckets": None, "kind": None, "mode": None, "refcount": None,
                         "pending": None, "text": text})
    return sort_rows(rows)
