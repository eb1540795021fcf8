"""Each traced process's futex hash at attach (the recording's `hash_at_attach`).

One task-iterator read (loading/iterator.py) right after the programs attach,
so a recording starts from what the kernel holds rather than from the first
event that happens to show a hash. A launched command is known without
reading: exec gives it a fresh mm, so it has no hash yet. Where the kernel
refuses the iterator the section says so and the timeline falls back to first
sightings (docs/json-schema.md).
"""
from __future__ import annotations

import os

from futextrace.errors import FutextraceError
from futextrace.record.commwatch import COMM_LEN
from futextrace.procs.hashread import open_iterator
from futextrace.procs.hashrows import listed, row_from_record

FIELDS = ("pid", "comm", "threads", "buckets", "kind", "mode", "refcount", "pending")


def _row(record: dict) -> dict:
    row = row_from_record(record)
    if not record["has_hash"]:
        row["kind"] = "none"          # no private hash allocated, global not chosen
    return {k: row[k] for k in FIELDS}


def _unavailable(why, pids: list[int]) -> dict:
    return {"source": "unavailable", "complete": False, "processes": {}, "targets": list(pids),
            "note": f"not read: {why}; each process starts from its first sighting"}


class Scope:
    """The filters other than -p, as the attach section applies them to processes:
    a name (the leader's, as BPF compares at exec), a cgroup's processes, a thread's process."""

    def __init__(self, comms: list[str], cgroups: list[str], tids: list[int]):
        self.comms = {c[:COMM_LEN] for c in comms}
        self.cgroups = list(cgroups)
        self.tids = list(tids)
        self.cgroup_pids = set().union(*(_cgroup_procs(c) for c in cgroups)) if cgroups else set()
        self.tid_pids = {_tgid_of(t) for t in tids}

    def __bool__(self) -> bool:
        return bool(self.comms or self.cgroups or self.tids)

    def admits(self, tgid: int, comm: str) -> bool:
        return ((not self.comms or comm[:COMM_LEN] in self.comms)
                and (not self.cgroups or tgid in self.cgroup_pids)
                and (not self.tids or tgid in self.tid_pids))

    def describe(self) -> str:
        parts = ([f"processes named {', '.join(sorted(self.comms))}"] if self.comms else []) + \
            ([f"processes in {', '.join(self.cgroups)}"] if self.cgroups else []) + \
            ([f"the processes of TID {', '.join(map(str, self.tids))}"] if self.tids else [])
        return " and ".join(parts)


def _cgroup_procs(path: str) -> set[int]:
    full = path if path.startswith("/sys/fs/cgroup") else os.path.join("/sys/fs/cgroup", path.lstrip("/"))
    try:
        with open(os.path.join(full, "cgroup.procs")) as f:
            return {int(x) for x in f.read().split()}
    except (OSError, ValueError):
        return set()


def _tgid_of(tid: int) -> int | None:
    try:
        with open(f"/proc/{tid}/status") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith("Tgid:"))
    except (OSError, StopIteration, ValueError):
        return None


class AttachState:
    """Loaded before the programs attach (compiling and loading take up to a
    second), read right after they do: the read itself takes milliseconds, so
    few events can fall between the attach and the state they start from."""

    def __init__(self, model):
        self.it, self.why = open_iterator(model)

    def read(self, pids: list[int], scope: "Scope | None" = None) -> dict:
        """The state of `pids` (every process with a hash when empty), now; with
        a scope (--comm, --cgroup, --tid), only the processes it lets through,
        each listed even without a hash: the section follows the filters."""
        if self.it is None:
            return _unavailable(self.why, pids)
        try:
            with self.it:
                records = self.it.read()
        except FutextraceError as e:
            return _unavailable(e, pids)
        if pids:
            chosen = [records[p] for p in pids if p in records]
        elif scope:
            chosen = list(records.values())
        else:   # system-wide: a process not listed had no hash and had not chosen the global one
            chosen = [r for r in records.values() if listed(row_from_record(r))]
        if scope:
            chosen = [r for r in chosen if scope.admits(r["tgid"], r["comm"])]
        # Complete: a process not listed had no hash. Not so if a -p target was not visited.
        complete = all(p in records for p in pids)
        out = {"source": "iterator", "complete": complete, "note": "read by a BPF task iterator at attach",
               "targets": list(pids), "processes": {str(r["tgid"]): _row(r) for r in chosen}}
        if scope:
            out["filter"] = scope.describe()
        return out

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
