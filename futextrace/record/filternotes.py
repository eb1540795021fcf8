"""What a filter matched, said on stderr: a filter that matches nothing at
attach says so (and that the run waits for a match), and one that matched no
process during the whole run ends it as a target problem, not as a silent,
empty success (the recording is still written)."""
from __future__ import annotations

import os
import sys

from futextrace.procs import targets
from futextrace.record import commwatch
from futextrace.recording import Recording


def _cgroup_empty(path: str) -> bool:
    full = path if path.startswith("/sys/fs/cgroup") else os.path.join("/sys/fs/cgroup", path.lstrip("/"))
    try:
        with open(os.path.join(full, "cgroup.procs")) as f:
            return not f.read().split()
    except OSError:
        return False


def waiting_notes(opts, watch: commwatch.CommWatch | None) -> list[str]:
    """Lines for a filter with no match now, saying what the run waits for."""
    notes = []
    names = ", ".join(opts.comms)
    if opts.comms and opts.pids:
        pid_names = {targets.comm_of(p) for p in opts.pids}
        if not pid_names & {c[:commwatch.COMM_LEN] for c in opts.comms}:
            notes.append(f"none of the -p processes is named {names} (they are named "
                         f"{', '.join(sorted(n for n in pid_names if n))}): nothing is traced unless one "
                         "of them renames itself or execs; waiting")
    elif opts.comms:
        running = watch.tgids if watch is not None else commwatch.scan({c[:commwatch.COMM_LEN]
                                                                        for c in opts.comms})
        if not running:
            notes.append(f"no process named {names} is running: waiting for one to start "
                         "(Ctrl-C or -d ends the wait)")
    for c in opts.cgroups:
        if _cgroup_empty(c):
            notes.append(f"cgroup {c} has no processes: waiting for tasks to join it")
    return notes


def say_waiting(opts, watch) -> None:
    for line in waiting_notes(opts, watch):
        print(f"futextrace: {line}", file=sys.stderr, flush=True)


def unmatched(opts, rec: Recording, seen: set[int]) -> str | None:
    """The error for a --comm/--cgroup filter that no process passed during the
    run: no lookups, no hash event, nothing listed at attach."""
    if opts.pids or not (opts.comms or opts.cgroups):
        return None
    matched = (set(seen) | {p["pid"] for p in rec.get("processes", [])}
               | {int(p) for p in (rec.get("hash_at_attach") or {}).get("processes", {})}
               | {r["pid"] for r in rec.get("resizes", []) + rec.get("threads", [])})
    if matched:
        return None
    what = " and ".join(([f"--comm {', '.join(opts.comms)}"] if opts.comms else [])
                        + ([f"--cgroup {', '.join(opts.cgroups)}"] if opts.cgroups else []))
    return f"{what} matched no process during the recording: nothing was traced"
