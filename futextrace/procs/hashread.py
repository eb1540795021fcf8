"""Reading every process's futex hash at once: the checks before it, the BPF
task iterator (loading/iterator.py) and the header of what was read."""
from __future__ import annotations

from futextrace.errors import FutextraceError
from futextrace.loading import preconditions
from futextrace.loading.iterator import TaskIterator
from futextrace.procs import targets

WATCH = "watch"


def check_ready(model, pids: list[int]) -> None:
    preconditions.require_root()
    preconditions.require_private_hash(model)
    for pid in pids:
        targets.check_pid(pid)


def header(model, method: str, why: str) -> dict:
    topo, g = model.topology, model.global_hash
    return {"method": method, "why": why,
            "online_cpus": len(topo.online_cpus) if topo else None,
            "global_buckets": g.buckets_per_node if g else None}


def open_iterator(model):
    """(TaskIterator, "") or (None, why the kernel refused it)."""
    try:
        return TaskIterator(model), ""
    except FutextraceError as e:
        return None, str(e)
