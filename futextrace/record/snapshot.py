"""The futex hash each running process uses now.

Read from the kernel at once by the BPF task iterator (loading/iterator.py):
buckets, custom or automatic, global by prctl, the refcount mode and a
replacement waiting for its pivot, for every process, idle ones included.
Where the kernel refuses iterators, the fallback watches futex calls for a
moment (HASH_SEEN events, as `record` sees them) and says so: a process that
makes no futex call while watched is then "not seen".
"""
from __future__ import annotations

import os
import time

from futextrace.errors import EnvironmentProblem, FutextraceError
from futextrace.record import targets

ITERATOR = "iterator"
WATCH = "watch"


# --- rows ---------------------------------------------------------------------
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
    state = {"buckets": r["hash_mask"] + 1 if r["has_hash"] and r["hash_mask"] else 0,
             "custom": bool(r["custom"])} if r["has_hash"] else {"buckets": 0, "custom": False}
    row = {"pid": r["tgid"], "comm": r["comm"], "threads": r["nr_threads"], **describe(state)}
    if not r["has_hash"] and r["nr_threads"] > 1:   # describe() assumes a single thread
        row["text"] = "global hash (no private hash allocated)"
    row["refcount"] = ("atomic" if r["state"] else "per-cpu") if r["has_hash"] else None
    row["pending"] = None
    if r["has_new"]:
        row["pending"] = {"buckets": r["new_hash_mask"] + 1 if r["new_hash_mask"] else 0,
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
            rows.append({"pid": pid, "comm": targets.comm_of(pid), "threads": None, "seen": False,
                         "buckets": None, "kind": None, "mode": None, "refcount": None,
                         "pending": None, "text": text})
    return sort_rows(rows)


# --- reading ------------------------------------------------------------------
def check_ready(model, pids: list[int]) -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem("futextrace needs root (CAP_BPF and CAP_PERFMON): run it with sudo")
    if not model.private_hash:
        raise EnvironmentProblem("this kernel has no futex private hash (CONFIG_FUTEX_PRIVATE_HASH, "
                                 "Linux 6.17+): nothing for futextrace to show")
    for pid in pids:
        targets.check_pid(pid)


def header(model, method: str, why: str) -> dict:
    topo, g = model.topology, model.global_hash
    return {"method": method, "why": why,
            "online_cpus": len(topo.online_cpus) if topo else None,
            "global_buckets": g.buckets_per_node if g else None}


def open_iterator(model):
    """(TaskIterator, "") or (None, why the kernel refused it)."""
    from futextrace.loading.iterator import TaskIterator
    try:
        return TaskIterator(model), ""
    except FutextraceError as e:
        return None, str(e)


def snapshot(pids: list[int], duration: float = 1.0, model=None) -> dict:
    from futextrace.kernel import modelcache
    model = model or modelcache.load_running()[0]     # this boot's cached model
    check_ready(model, pids)
    it, why = open_iterator(model)
    if it is None:
        return snapshot_by_watching(pids, duration, model, why)
    with it:
        rows = iterator_rows(it.read(), list(pids))
    return {**header(model, ITERATOR, "read from the kernel by a BPF task iterator"),
            "processes": rows, "note": None}


# --- fallback: watching futex calls --------------------------------------------
def latest_states(rec: dict) -> dict[int, dict]:
    """pid -> its last hash state in the recording."""
    out: dict[int, dict] = {}
    for s in sorted(rec.get("hash_states", []), key=lambda s: s["t"]):
        out[s["pid"]] = s
    return out


def snapshot_by_watching(pids: list[int], duration: float, model, refused: str) -> dict:
    """Trace futex calls for `duration` s: a process's hash shows when it makes one."""
    from futextrace.record.recorder import RecordOptions, record_pids
    rec = record_pids(RecordOptions(pids=list(pids), duration=duration, method="auto"), model)
    states = latest_states(rec)
    comms = {p["pid"]: p["comm"] for p in rec.get("processes", [])}
    rows = []
    for pid in list(pids) or sorted(states):
        s = states.get(pid)
        row = {"pid": pid, "comm": (s or {}).get("comm") or comms.get(pid, ""), "threads": None,
               **describe(s), "refcount": None, "pending": None}
        if s is None and not targets.alive(pid):
            row["text"] = "exited while watching, before a futex call was seen"
        rows.append(row)
    why = f"watched futex calls for {rec['duration_s']:.1f} s: the task iterator is unavailable ({refused})"
    # A PID that exits ends the watch early (record_pids); it is a row, not an error.
    return {**header(model, WATCH, why), "duration_s": rec["duration_s"], "processes": rows,
            "note": (rec.get("target_exited") or {}).get("note")}


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


# --- --watch: follow processes as they come and go ------------------------------
COMPARED = ("threads", "buckets", "kind", "mode", "refcount", "pending")
MIN_GAP_S = 0.2          # re-reads triggered by process events are at most this frequent
EXIT_WAIT_S = 3.0        # how long a vanished process's exit event (its status) is awaited
STOP_CHECK_S = 0.5       # longest single wait, so stop() and vanished processes are seen


def changes(before: dict[int, dict], after: dict[int, dict]) -> list[tuple[str, dict]]:
    """("new"|"changed"|"gone", row) between two reads, by PID."""
    out = [("gone", before[pid]) for pid in before if pid not in after]
    for pid, row in after.items():
        if pid not in before:
            out.append(("new", row))
        elif any(before[pid].get(k) != row.get(k) for k in COMPARED):
            out.append(("changed", row))
    return out


class Watcher:
    """Re-reads the task iterator when the proc connector reports a fork, exec
    or exit (at most every MIN_GAP_S), and every `interval` s regardless: a
    deferred resize or a prctl changes a hash without any process event.
    A process leaves the iterator at exit_mm(), before the kernel sends its
    exit event: its "gone" waits for that event (the exit status), at most
    EXIT_WAIT_S. Without the connector it re-reads every `interval` s, and says so."""

    def __init__(self, model, pids: list[int], interval: float):
        from futextrace.record import procevents
        check_ready(model, pids)
        self.it, why = open_iterator(model)
        if self.it is None:
            raise EnvironmentProblem(f"--watch needs the task iterator, which is unavailable: {why}")
        self.model, self.pids, self.interval = model, list(pids), interval
        self.events, no_events = procevents.open_events()
        self.how = ("re-read on process events from the proc connector (pyroute2) and every "
                    f"{interval:g} s" if self.events else
                    f"polling: re-read every {interval:g} s (proc connector unavailable: {no_events})")
        self.statuses: dict[int, int] = {}       # tgid -> wait status from its leader's exit event
        self.vanished: dict[int, tuple[dict, float]] = {}   # pid -> (last row, when it vanished)
        self.stopped = False

    def read(self) -> dict[int, dict]:
        rows = iterator_rows(self.it.read(), self.pids)
        return {r["pid"]: r for r in rows if r["text"] != "exited"}

    def _wait(self, timeout: float) -> bool:
        """Wait up to `timeout` s; True when a process event came."""
        if self.events is None:
            time.sleep(max(0.0, timeout))
            return False
        evs = self.events.poll(timeout)
        for ev in evs:
            if ev["event"] == "exit" and ev["tid"] == ev["tgid"] and ev["status"] is not None:
                self.statuses[ev["tgid"]] = ev["status"]
        return bool(evs)

    def _settle(self, emit, now: float, start: float):
        """Emit "gone" for vanished processes whose exit event came, or waited too long."""
        for pid, (row, since) in list(self.vanished.items()):
            if pid in self.statuses or self.events is None or now - since >= EXIT_WAIT_S:
                del self.vanished[pid]
                emit(now - start, "gone", row, self.statuses.pop(pid, None))

    def _reread(self, emit, rows: dict[int, dict], now: float, start: float) -> dict[int, dict]:
        new = self.read()
        for change, row in changes(rows, new):
            if change == "gone":
                self.vanished[row["pid"]] = (row, now)
            else:
                self.vanished.pop(row["pid"], None)
                emit(now - start, change, row, None)
        # Keep statuses only for processes that may still need one.
        self.statuses = {p: s for p, s in self.statuses.items() if p in self.vanished or p in new}
        return new

    def run(self, emit, duration: float | None, rows: dict[int, dict] | None = None) -> dict[int, dict]:
        """emit(t, change, row, exit_status) for every change since `rows` (a
        read) until `duration` or stop(); returns the last read."""
        start = last = time.monotonic()
        end = start + duration if duration is not None else None
        rows, due = self.read() if rows is None else rows, None
        while not self.stopped and (end is None or time.monotonic() < end):
            now = time.monotonic()
            # Wake at least every STOP_CHECK_S: a signal's stop() is seen after the wait.
            wake = min(x for x in (last + self.interval, due, end, now + STOP_CHECK_S) if x)
            if self._wait(wake - now) and due is None:
                due = max(time.monotonic(), last + MIN_GAP_S)
            now = time.monotonic()
            if now >= last + self.interval or (due is not None and now >= due):
                rows, last, due = self._reread(emit, rows, now, start), now, None
            self._settle(emit, now, start)
        for pid, (row, _since) in self.vanished.items():   # the watch ends: no more waiting
            emit(time.monotonic() - start, "gone", row, self.statuses.get(pid))
        self.vanished.clear()
        return rows

    def stop(self, *_):
        self.stopped = True

    def close(self):
        if self.events is not None:
            self.events.close()
        self.it.close()
