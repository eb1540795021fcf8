"""`futextrace record`: attach, collect, detach, aggregate.

A Recorder is a tracing session (record/session.py: attach, poll, events,
close), the map reader of its program (loading/maps.py) and the -i rows
(record/live.py); record/assemble.py makes the recording from them.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from futextrace.acting import launch
from futextrace.loading import callsites
from futextrace.loading.loader import release_freed_heap
from futextrace.naming.capture import NameCapture
from futextrace.procs import procevents, targets
from futextrace.record import assemble, attachstate, filternotes, startup
from futextrace.record.live import IntervalReporter
from futextrace.record.lockwaits_live import IntervalWaits
from futextrace.record.session import RecordOptions, TraceSession

# Imported where first used, once attached: the map reader's numpy and the
# naming's elftools cost the start ~0.2 s of CPU (issue 44).
if TYPE_CHECKING:
    from futextrace.loading.maparrays import ArrayReader


@dataclass(frozen=True)
class RecordOutputs:
    """Where `record`'s -i rows go, beside the options (what to trace): handles
    the command opens from output/ (which sits above record/) and closes."""
    live_out: object | None = None    # output/live_text.LiveView for per-interval text (None: not printed)
    jsonl: object | None = None       # output/jsonio.Output for per-interval JSON lines


class Recorder:
    """`record`'s run: a TraceSession, an ArrayReader of its program once
    attached, and the -i rows. Every exit path goes through close()."""

    def __init__(self, opts: RecordOptions, model=None, outputs: RecordOutputs | None = None):
        self.opts = opts
        self.session = TraceSession(opts, model)
        self.reader: ArrayReader | None = None
        outputs = outputs or RecordOutputs()
        self.live = IntervalReporter(outputs.live_out, outputs.jsonl, opts.timestamps)
        self.lock_deltas = IntervalWaits()  # bucket-lock waits per interval (record/lockwaits_live.py)
        self.names = NameCapture()          # the processes' memory maps, read while they live
        self._events_named = 0              # session.events already handed to names.tick

    def start(self):
        self.session.start()
        # Attached, and a stop signal now ends the run with its recording (the
        # session took them in start()): say so before the reader's imports.
        self.session.announce()
        # The exporter's reader (numpy, the futexes map in batches): a -i row reads
        # arrays, never a dict per futex; the final recording reads as MapReader does.
        from futextrace.loading.maparrays import ArrayReader
        self.reader = ArrayReader(self.session.program)

    def run(self, until=None) -> float:
        """The session's poll loop, a -i row at each tick (TraceSession.run);
        each turn of it reads the memory maps due (naming/capture.py): those of
        the targets and of every process the session has seen an event of, at
        once for a process with a new event (a thread born: a new stack)."""
        def turn() -> bool:
            events = self.session.events
            changed = {e["tgid"] for e in events[self._events_named:]}
            self._events_named = len(events)
            self.names.tick(lambda: [*self.opts.pids, *self.session.comms], changed, self.opts.pids)
            return bool(until and until())
        return self.session.run(until=turn, tick=self._interval_report)

    def close(self):
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        self.session.close()

    def _interval_report(self):
        """One `-i` row. Its boundary is the middle of the map read (the counts
        move while it runs; `read_s` says for how long), its t from t = 0, when
        counting began, so the first interval is as long as the others."""
        s, reader = self.session, self.reader
        a = time.monotonic_ns()
        futexes, buckets = reader.interval_arrays()
        counters, missed = reader.interval_counters(buckets), reader.missed_runs()
        b = time.monotonic_ns()
        reader.release_buffers()
        elapsed = ((a + b) // 2 - s.t0_ns) / 1e9
        row = self.live.row(elapsed, futexes, counters, missed,
                            targets.comm_label, s.comms, buckets, events=s.events,
                            infer_prctl=assemble.method_facts(s)["prctl_results"] == "inferred",
                            at_attach=s.attach_state)
        row["read_s"] = round((b - a) / 1e9, 6)
        # Only the rows that changed since the last read (numpy, as the exporter
        # reads them): the WaitBook's high-water marks skip the others anyway.
        row["lock_waits"] = self.lock_deltas.interval(reader.lock_wait_rows(), row["interval_s"], s.comms)
        self.live.show(row)
        # The read's temporaries are freed, but glibc keeps the heap they grew (13 MiB
        # of RSS beside a 32,768-futex workload): handed back, as the exporter does.
        release_freed_heap()

    def recording(self, duration: float) -> dict:
        """The recording, each listed futex address named (processes[].futex_names)."""
        from futextrace.naming.recorded import name_processes
        rec = assemble.recording(self.session, self.reader, duration, self.live.rows)
        sites = self.reader.call_sites() if self.opts.call_sites else None
        name_processes(rec, self.names, sites=sites)
        if sites is not None:
            rec["call_sites"] = callsites.summary(self.session.program, sites)
        return rec


def _keep_output_error(rec: Recorder, result: dict) -> None:
    """Hand a write error that ended the run to the command, which writes what
    was recorded before reporting it (not part of the recording itself)."""
    if rec.session.output_error:
        result["output_error"] = rec.session.output_error


def record_pids(opts: RecordOptions, model=None, outputs: RecordOutputs | None = None) -> dict:
    """Trace running processes (or everything when no filter is given)."""
    for pid in opts.pids:
        targets.check_pid(pid)
    for tid in opts.tids:
        targets.check_tid(tid)
    if opts.comms:
        procevents.preload()      # --comm opens the connector before attaching
    with startup.SlowStartWatch():
        rec = Recorder(opts, model, outputs)
        rec.start()
    # Exit events pushed by the kernel (None: poll /proc), subscribed once attached:
    # the start does not wait for pyroute2, and an exit before the subscription
    # is seen by ExitWatch's own check of its targets.
    exits = procevents.exit_watch(opts.pids)
    try:
        def one_gone() -> bool:
            return not all(targets.alive(p) for p in opts.pids)
        until = exits.any_exited if exits else one_gone
        duration = rec.run(until=until if opts.pids else None)
        result = rec.recording(duration)
        _keep_output_error(rec, result)
        # The target whose exit ended the run: the watch's first, not the first
        # -p target gone by now (a sibling may exit after the window closed).
        gone = list(exits.exited) if exits else [p for p in opts.pids if not targets.alive(p)]
    finally:
        rec.close()
        if exits:
            exits.close()
    unmatched = filternotes.unmatched(opts, result, rec.session.comm_seen)
    if unmatched:
        result["error"] = unmatched
    if gone:
        # A normal end, like a command that exits: the recording is complete up to here.
        result["target_exited"] = {"pid": gone[0], "t": round(duration, 3),
                                   "note": f"PID {gone[0]} exited during tracing"
                                           + (exits.describe(gone[0]) if exits else "")
                                           + f" at +{duration:.2f} s: the recording ends there"}
    return result


def _go(child: targets.StoppedChild, slots: int | None, name: str) -> dict | None:
    """Let the command exec; with `slots`, set its hash size before its first
    instruction (acting/launch.py) and return the kernel's answers."""
    answer = launch.start(child, slots)
    return None if answer is None else answer.as_json(slots, name, child.pid)


def record_command(argv: list[str], opts: RecordOptions, model=None,
                   outputs: RecordOutputs | None = None) -> dict:
    """Start `argv`, trace it (and what it forks) until it exits."""
    # forked, waits for go() before exec
    child = targets.StoppedChild(argv, stdout_to_stderr=opts.command_stdout_to_stderr)
    try:
        opts = replace(opts, pids=(child.pid, *opts.pids))
        with startup.SlowStartWatch():
            rec = Recorder(opts, model, outputs)
            rec.start()
        attachstate.mark_launched(rec.session.attach_state, child.pid, os.path.basename(argv[0]))
    except BaseException:
        child.kill()
        raise
    try:
        hash_set = _go(child, opts.command_slots, os.path.basename(argv[0]))
        rec.names.snap(child.pid)     # its new image, mapped: a command may exit before the next turn
        duration = rec.run(until=child.exited)
        stopped = not child.exited()     # the run ended first (duration, signal, write error)
        if stopped:
            child.kill()
        result = rec.recording(duration)
        _keep_output_error(rec, result)
        result["command"] = {"argv": argv, "pid": child.pid, "exit_status": child.status(),
                             "stopped_by_futextrace": stopped}
        result["command"]["stdout_tail"] = child.output_tail()
        if hash_set is not None:
            result["command"]["futex_hash_set"] = hash_set
    finally:
        rec.close()
        child.kill()
    return result
