"""A tracing session: check the options, pick the method, attach (falling back
to the next method), take the ring buffer's events, poll until the end, close.

It reads no map: `record` (record/recorder.py) and `serve`
(export/serve_recorder.py) each hold a session and read the maps through
loading/maps.py's MapReader. The session owns the loaded programs: every exit
path (end of duration, the traced command exiting, SIGINT/SIGTERM/SIGHUP, an
error) goes through `close()`, and the kernel drops the programs by itself if
this process is SIGKILLed (BCC holds them only through file descriptors and
perf links).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import math
import sys
import time
from dataclasses import dataclass

from futextrace.errors import EnvironmentProblem, FileProblem, KernelRefused, UsageError
from futextrace.kernel import modelcache
from futextrace.kernel.layout import EVENT
from futextrace.loading import preconditions
from futextrace.loading.loader import Filters, Program
from futextrace.loading.methods import candidates
from futextrace.procs import stopsignals, targets
from futextrace.record import attachstate, commwatch, filternotes, startup

POLL_MS = 100
# Thread births/exits kept for the `threads` list. Beyond this, only thread events
# that can mark a resize (a NEWTASK whose hash state differs from the process's
# last one) are kept; the rest are counted, so a thread-churning target cannot
# grow the tracer's memory without bound.
MAX_THREAD_EVENTS = 20000


@dataclass(frozen=True)
class RecordOptions:
    """What `record` and `serve` ask of a session: what to trace, and how.
    Built once by the command and only read (a launched command's PID is added
    by a copy: dataclasses.replace). Where `record`'s rows go is beside it:
    recorder.RecordOutputs."""
    pids: tuple[int, ...] = ()
    tids: tuple[int, ...] = ()
    comms: tuple[str, ...] = ()
    cgroups: tuple[str, ...] = ()
    hash_kind: str = "all"            # all | private | global
    duration: float | None = None
    interval: float | None = None
    method: str = "auto"
    max_futexes: int | None = None    # None: loader.default_max_futexes()
    timestamps: bool = False
    exact_prctl: bool = False         # tracepoint method: hook prctl's exit (loader.Program)
    announce: bool = True             # say "Tracing..." on stderr once attached
    command_stdout_to_stderr: bool = False   # our stdout carries JSON: the command's goes to stderr
    command_slots: int | None = None  # record --slots: the command's hash size, set at its exec
    comm_in_bpf: bool = False         # --comm: compare names in BPF even where the proc connector works
    call_sites: bool = False          # user stacks at first lookups and lock waits (bpf/call_sites.h): record on, serve off

    def __post_init__(self):
        for name in ("pids", "tids", "comms", "cgroups"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


def filters_for(opts: RecordOptions, cgroup_ids: tuple[int, ...], names_as_tgids: bool) -> Filters:
    """The programs' filters, in one step. `names_as_tgids`: --comm's names are
    kept as tgids by the proc connector (record/commwatch.py), so BPF keeps a
    tgid set, adds to it at exec under a name (exec_comms), and compares no name."""
    if names_as_tgids:
        return Filters(pids=opts.pids, tids=opts.tids, cgroup_ids=cgroup_ids,
                       tgid_map=True, exec_comms=opts.comms)
    return Filters(pids=opts.pids, tids=opts.tids, comms=opts.comms, cgroup_ids=cgroup_ids)


def program_args(opts: RecordOptions, filters: Filters) -> dict:
    """Program's arguments (but the model and method) for these options: the
    one place they are derived, for the session and for `cache build`."""
    return {"filters": filters, "max_futexes": opts.max_futexes, "exact_prctl": opts.exact_prctl,
            "call_sites": opts.call_sites}


class TraceSession:
    """One attach of the programs, from the options to close().
    `history_lock` guards the events, comms and hash states against readers
    on other threads (serve's scrapes); `max_thread_events`: thread events
    kept beyond those that can mark a resize."""

    def __init__(self, opts: RecordOptions, model=None, history_lock=None,
                 max_thread_events: int = MAX_THREAD_EVENTS):
        if opts.duration is not None and not (math.isfinite(opts.duration) and opts.duration > 0):
            raise UsageError("-d/--duration must be a finite number of seconds above 0")
        if opts.interval is not None and not (math.isfinite(opts.interval) and opts.interval > 0):
            raise UsageError("-i/--interval must be a finite number of seconds above 0")
        self.opts = opts
        # Setup time, reported as attach_s: the process's own start counts for
        # the first session of a process only (bench and sweep make several).
        self.timings = {"startup": round(startup.process_age(), 3) if _first_in_process() else 0.0}
        t0 = time.monotonic()
        self.model, self.model_cached = (model, False) if model else modelcache.load_running()
        self.timings["model"] = round(time.monotonic() - t0, 3)
        self._setup_t0 = t0
        preconditions.require_private_hash(self.model)
        # The methods to try in turn (auto: fentry, kprobe, tracepoint, those usable).
        self._candidates = candidates(self.model, opts.method)
        self.method, self.why = self._candidates[0]
        self._cgroup_ids = tuple(targets.cgroup_id(c) for c in opts.cgroups)   # a bad path: refused here
        self.filters: Filters | None = None     # once the --comm watch is settled (_attach)
        self.program: Program | None = None
        self.compile_cache = "off"      # progcache: where the instructions came from
        self.early_maps = 0             # of the maps, how many the command line made before its imports
        self.early_programs = 0         # of the tp_btf programs, how many it loaded before them
        self.history_lock = history_lock or contextlib.nullcontext()
        self.events: list[dict] = []
        self.t0_ns = 0
        self.comms: dict[int, str] = {}
        self._stop = False
        self.output_error: str | None = None   # a write error that ended the run early
        self._thread_events = 0
        self.thread_events_dropped = 0
        self.max_thread_events = max_thread_events
        self._last_state: dict[int, tuple] = {}   # tgid -> hash state of its last kept event
        self.comm_watch: commwatch.CommWatch | None = None
        self.comm_seen: set[int] = set()     # processes --comm matched, kept past close()
        self.comm_how: str | None = None
        self._signals = contextlib.ExitStack()   # the stop signals, from the attach to close()

    def _open_comm_watch(self):
        """--comm alone: the processes so named, kept as tgids by the proc
        connector, so the hot path does one tgid lookup and no name compare.
        With -p (both must hold) or without the connector: the compare in BPF."""
        opts = self.opts
        if not opts.comms:
            return
        why = "asked for" if opts.comm_in_bpf else "-p given too: both must hold"
        if not opts.pids and not opts.comm_in_bpf:
            self.comm_watch, why = commwatch.open_watch(opts.comms)
        if self.comm_watch:
            self.comm_how = ("process names resolved to tgids: added by BPF at exec and fork, "
                             "removed by the proc connector at exit; the hot path does one tgid lookup")
        else:
            self.comm_how = f"task names compared in BPF ({why})"

    # -- lifecycle -----------------------------------------------------------
    def start(self):
        state = attachstate.AttachState(self.model)   # loaded now, read once attached
        try:
            self._attach()
        except BaseException:
            state.close()
            raise
        # t = 0 is when counting began: the middle of the counting hook's attach
        # (loader.Program.counting_from), not this later moment.
        lo, hi = self.program.counting_from
        self.t0_ns = (lo + hi) // 2
        self.attach_state = state.read(self.opts.pids, attachstate.Scope(self.opts.comms, self.opts.cgroups,
                                                                         self.opts.tids))
        self.started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        # From here until close() a stop signal ends the run (stop()), not the
        # process: the owners print "Tracing..."/"serving" and import their map
        # reader before run() (a Ctrl-C there was an abort, with no recording).
        self._signals.enter_context(stopsignals.routed_to(self.stop))

    def announce(self):
        """Say "Tracing..." (and what a filter waits for), if asked to: called by
        the owner once it is ready to run."""
        if self.opts.announce:
            print(announcement(self.opts.duration), file=sys.stderr, flush=True)
            filternotes.say_waiting(self.opts, self.comm_watch)

    def _attach(self):
        self._open_comm_watch()
        self.filters = filters_for(self.opts, self._cgroup_ids, self.comm_watch is not None)
        # --comm's tgids go into the filter before the counting hook attaches:
        # its processes are counted from the window's start, like -p targets.
        fill = (lambda bpf: self.comm_watch.start(bpf["tgid_filter"])) if self.comm_watch else None
        failed = []
        for i, (self.method, why) in enumerate(self._candidates):
            self.why = "; ".join([why, *failed])
            try:
                self.program = Program(self.model, self.method, before_counting=fill,
                                       **program_args(self.opts, self.filters))
                break
            except (EnvironmentProblem, KernelRefused) as e:
                if i == len(self._candidates) - 1:
                    raise
                failed.append(f"the {self.method} method failed to load ({e})")
        self.program.bpf["events"].open_ring_buffer(self._on_event)
        self.timings.update(self.program.timings)
        self.compile_cache = self.program.bpf.compile_cache
        self.early_maps = self.program.bpf.early_maps
        self.early_programs = getattr(self.program.bpf, "early_programs", 0)
        self.attach_s = round(self.timings["startup"] + time.monotonic() - self._setup_t0, 3)

    def stop(self, *_):
        self._stop = True

    def close(self):
        """Detach and unload (close a MapReader of this program before: its
        mappings); then the stop signals' own handlers are back."""
        try:
            if self.comm_watch is not None:
                self.comm_seen = set(self.comm_watch.seen)
                self.comm_watch.close()
                self.comm_watch = None
            if self.program is not None:
                self.program.close()
                self.program = None
        finally:
            self._signals.close()

    # -- the ring buffer's events ----------------------------------------------
    def _on_event(self, ctx, data, size):
        e = self.program.bpf["events"].event(data)
        ev = {name: getattr(e, name) for name, _ in e._fields_ if name != "pad"}
        ev["comm"] = e.comm.decode(errors="replace")
        ev["t"] = (e.ts - self.t0_ns) / 1e9
        del ev["ts"]
        with self.history_lock:
            self.comms.setdefault(e.tgid, ev["comm"])
            if not self._keep(ev):
                self.thread_events_dropped += 1
                return
            self.events.append(ev)

    def _keep(self, ev: dict) -> bool:
        state = (ev["hash"], ev["hash_mask"], ev["hash_new"], ev["hash_new_mask"])
        is_thread = ev["type"] in (EVENT["FTE_NEWTASK"], EVENT["FTE_EXIT"])
        if not is_thread:
            self._last_state.pop(ev["tgid"], None)   # the timeline's view may have changed
            return True
        self._thread_events += 1
        unchanged = (ev["type"] == EVENT["FTE_EXIT"]
                     or self._last_state.get(ev["tgid"]) == state)
        if ev["type"] == EVENT["FTE_NEWTASK"]:
            self._last_state[ev["tgid"]] = state
        return not (unchanged and self._thread_events > self.max_thread_events)

    def known_tgids(self) -> set[int]:
        """Every process the session holds anything about (events, comms)."""
        with self.history_lock:
            return set(self.comms) | {e["tgid"] for e in self.events}

    def forget(self, tgids: set[int]) -> None:
        """Drop these processes' events, comm and last hash state."""
        with self.history_lock:
            self.events = [e for e in self.events if e["tgid"] not in tgids]
            for t in tgids:
                self.comms.pop(t, None)
                self._last_state.pop(t, None)

    def history_size(self) -> dict[str, int]:
        """What the session retains about processes (the exporter's own metrics)."""
        return {"events": len(self.events), "comms": len(self.comms), "states": len(self._last_state)}

    # -- the loop ------------------------------------------------------------
    def run(self, until=None, tick=None) -> float:
        """Poll until the duration ends, `until()` says so, or a stop signal
        arrives (taken since start()); with -i, call `tick()` every interval (a
        FileProblem from it ends the run, kept in output_error); then stop counting (loader.Program.stop_counting)
        before anything is read. Returns the recording's duration in seconds: the
        window counted, from the counting hook's attach to its detach, whatever the load."""
        start = self.t0_ns / 1e9           # counting began here (time.monotonic's clock)
        end = start + self.opts.duration if self.opts.duration else None
        next_tick = start + self.opts.interval if self.opts.interval and tick else None
        while not self._stop:
            now = time.monotonic()
            # A tick due at the end still gets its row (-d 2 -i 1: two rows).
            if next_tick and now >= next_tick and (end is None or next_tick <= end + 1e-9):
                try:
                    tick()
                except FileProblem as e:   # keep what was recorded: end the run here
                    self.output_error = str(e)
                    break
                next_tick += self.opts.interval
                continue
            if end is not None and now >= end:
                break
            if until is not None and until():
                break
            # Wake for the end or the next tick, not up to POLL_MS after it.
            wake = min(t for t in (end, next_tick, now + POLL_MS / 1000) if t is not None)
            self.program.bpf.ring_buffer_poll(max(1, int((wake - now) * 1000 + 0.999)))
        self.program.stop_counting()
        self.program.bpf.ring_buffer_poll(0)
        return self.window()["duration_ns"] / 1e9

    def window(self) -> dict:
        """The counted window (the recording's `window`): CLOCK_MONOTONIC ns
        bracketing the attach and the detach of the hook that counts."""
        start, end = self.program.counting_from, self.program.counting_until
        d = {"clock": "CLOCK_MONOTONIC", "start_ns": list(start), "t0_ns": self.t0_ns}
        if end is not None:
            d["end_ns"] = list(end)
            d["duration_ns"] = (end[0] + end[1]) // 2 - self.t0_ns
        return d


def announcement(duration: float | None) -> str:
    """The line that marks the attach (scripts wait for "Tracing futex hash
    lookups"): with -d it says when the run ends, as BCC tools do."""
    if duration:
        return f"Tracing futex hash lookups for {duration:g} s..."
    return "Tracing futex hash lookups... Hit Ctrl-C to end."


_setups = 0


def _first_in_process() -> bool:
    global _setups
    _setups += 1
    return _setups == 1
