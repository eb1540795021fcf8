"""Each traced process's futex hash at attach (the recording's `hash_at_attach`).

One task-iterator read (loading/iterator.py) right after the programs attach,
so a recording starts from what the kernel holds rather than from the first
event that happens to show a hash. A launched command is known without
reading: exec gives it a fresh mm, so it has no hash yet. Where the kernel
refuses the iterator the section says so and the timeline falls back to first
sightings (docs/json-schema.md).
"""
from __future__ import annotations

from futextrace.errors import FutextraceError
from futextrace.record.snapshot import listed, open_iterator, row_from_record

FIELDS = ("pid", "comm", "threads", "buckets", "kind", "mode", "refcount", "pending")


def _row(record: dict) -> dict:
    row = row_from_record(record)
    if not record["has_hash"]:
        row["kind"] = "none"          # no private hash allocated, global not chosen
    return {k: row[k] for k in FIELDS}


def _unavailable(why, pids: list[int]) -> dict:
    return {"source": "unavailable", "complete": False, "processes": {}, "targets": list(pids),
            "note": f"not read: {why}; each process starts from its first sighting"}


class AttachState:
    """Loaded before the programs attach (compiling and loading take up to a
    second), read right after they do: the read itself takes milliseconds, so
    few events can fall between the attach and the state they start from."""

    def __init__(self, model):
        self.it, self.why = open_iterator(model)

    def read(self, pids: list[int]) -> dict:
        """The state of `pids` (every process with a hash when empty), now."""
        if self.it is None:
            return _unavailable(self.why, pids)
        try:
            with self.it:
                records = self.it.read()
        except FutextraceError as e:
            return _unavailable(e, pids)
        if pids:
            chosen = [records[p] for p in pids if p in records]
        else:   # system-wide: a process not listed had no hash and had not chosen the global one
            chosen = [r for r in records.values() if listed(row_from_record(r))]
        # Complete: a process not listed had no hash. Not so if a -p target was not visited.
        complete = all(p in records for p in pids)
        return {"source": "iterator", "complete": complete, "note": "read by a BPF task iterator at attach",
                "targets": list(pids), "processes": {str(r["tgid"]): _row(r) for r in chosen}}

    def close(self) -> None:
        if self.it is not None:
            self.it.close()


def mark_launched(state: dict, pid: int, comm: str) -> None:
    """A launched command's state right after exec: a fresh mm, no hash yet."""
    if pid not in state.setdefault("targets", []):
        state["targets"].append(pid)
    state.setdefault("processes", {})[str(pid)] = {
        "pid": pid, "comm": comm, "threads": 1, "buckets": 0, "kind": "none", "mode": None,
        "refcount": None, "pending": None, "launched": True}
