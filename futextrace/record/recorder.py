"""`futextrace record`: attach, collect, detach, aggregate.

The Recorder owns the loaded programs: every exit path (end of duration, the
traced command exiting, SIGINT/SIGTERM/SIGHUP, an error) goes through
`Program.close()`, and the kernel drops the programs by itself if this process
is SIGKILLed (BCC holds them only through file descriptors and perf links).
"""
from __future__ import annotations

import datetime as dt
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field

from futextrace.errors import EnvironmentProblem, FileProblem, KernelRefused, UsageError
from futextrace.kernel import modelcache
from futextrace.kernel.layout import EVENT
from futextrace.loading import preconditions
from futextrace.loading.loader import BLIND_SPOTS, PRCTL_INFERRED, Filters, Program
from futextrace.loading.maps import MapReader
from futextrace.loading.methods import candidates
from futextrace.record import attachstate, commwatch, filternotes, procevents, startup, targets
from futextrace.record.aggregate import KIND_NAMES, build_recording
from futextrace.record.live import IntervalReporter
from futextrace.record.livewaits import WaitDeltas
from futextrace.record.lockwaits import contention_dump, contention_section
from futextrace.recording import Kernel, Method, Recording, Window

POLL_MS = 100
# Thread births/exits kept for the `threads` list. Beyond this, only thread events
# that can mark a resize (a NEWTASK whose hash state differs from the process's
# last one) are kept; the rest are counted, so a thread-churning target cannot
# grow the tracer's memory without bound.
MAX_THREAD_EVENTS = 20000


@dataclass
class RecordOptions:
    pids: list[int] = field(default_factory=list)
    tids: list[int] = field(default_factory=list)
    comms: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    hash_kind: str = "all"            # all | private | global
    duration: float | None = None
    interval: float | None = None
    method: str = "auto"
    max_futexes: int | None = None    # None: loader.default_max_futexes()
    timestamps: bool = False
    jsonl: object | None = None       # output/jsonio.Output for per-interval JSON lines
    live_out: object | None = None    # output/live_text.LiveView for per-interval text (None: not printed)
    exact_prctl: bool = False         # tracepoint method: hook prctl's exit (loader.Program)
    announce: bool = True             # say "Tracing..." on stderr once attached
    command_stdout_to_stderr: bool = False   # our stdout carries JSON: the command's goes to stderr
    comm_in_bpf: bool = False         # --comm: compare names in BPF even where the proc connector works


class Recorder:
    def __init__(self, opts: RecordOptions, model=None):
        if opts.duration is not None and not (math.isfinite(opts.duration) and opts.duration > 0):
            raise UsageError("-d/--duration must be a finite number of seconds above 0")
        if opts.interval is not None and not (math.isfinite(opts.interval) and opts.interval > 0):
            raise UsageError("-i/--interval must be a finite number of seconds above 0")
        self.opts = opts
        # Setup time, reported as attach_s: the process's own start counts for
        # the first recorder of a process only (bench and sweep make several).
        self.timings = {"startup": round(startup.process_age(), 3) if _first_in_process() else 0.0}
        t0 = time.monotonic()
        self.model, self.model_cached = (model, False) if model else modelcache.load_running()
        self.timings["model"] = round(time.monotonic() - t0, 3)
        self._setup_t0 = t0
        preconditions.require_private_hash(self.model)
        # The methods to try in turn (auto: fentry, kprobe, tracepoint, those usable).
        self._candidates = candidates(self.model, opts.method)
        self.method, self.why = self._candidates[0]
        self.filters = Filters(pids=list(opts.pids), tids=list(opts.tids), comms=list(opts.comms),
                               cgroup_ids=[targets.cgroup_id(c) for c in opts.cgroups])
        self.program: Program | None = None
        self.compile_cache = "off"      # progcache: where the instructions came from
        self.maps: MapReader | None = None
        self.events: list[dict] = []
        self.live = IntervalReporter(opts.live_out, opts.jsonl, opts.timestamps)
        self.intervals: list[dict] = self.live.rows
        self.lock_deltas = WaitDeltas()     # bucket-lock waits per interval (record/livewaits.py)
        self.t0_ns = 0
        self.comms: dict[int, str] = {}
        self._stop = False
        self.output_error: str | None = None   # a write error that ended the run early
        self._thread_events = 0
        self.thread_events_dropped = 0
        self.max_thread_events = MAX_THREAD_EVENTS   # the exporter keeps none (no thread list)
        self._last_state: dict[int, tuple] = {}   # tgid -> hash state of its last kept event
        self.comm_watch: commwatch.CommWatch | None = None
        self.comm_seen: set[int] = set()     # processes --comm matched, kept past close()
        self.comm_how: str | None = None

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
            self.filters.comms, self.filters.tgid_map, self.filters.exec_comms = [], True, list(opts.comms)
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
        if self.opts.announce:
            print(announcement(self.opts.duration), file=sys.stderr, flush=True)
            filternotes.say_waiting(self.opts, self.comm_watch)

    def _attach(self):
        self._open_comm_watch()
        # --comm's tgids go into the filter before the counting hook attaches:
        # its processes are counted from the window's start, like -p targets.
        fill = (lambda bpf: self.comm_watch.start(bpf["tgid_filter"])) if self.comm_watch else None
        failed = []
        for i, (self.method, why) in enumerate(self._candidates):
            self.why = "; ".join([why, *failed])
            try:
                self.program = Program(self.model, self.method, self.filters, self.opts.max_futexes,
                                       exact_prctl=self.opts.exact_prctl, before_counting=fill)
                break
            except (EnvironmentProblem, KernelRefused) as e:
                if i == len(self._candidates) - 1:
                    raise
                failed.append(f"the {self.method} method failed to load ({e})")
        self.maps = MapReader(self.program)
        self.program.bpf["events"].open_ring_buffer(self._on_event)
        self.timings.update(self.program.timings)
        self.compile_cache = self.program.bpf.compile_cache
        self.attach_s = round(self.timings["startup"] + time.monotonic() - self._setup_t0, 3)

    def stop(self, *_):
        self._stop = True

    def missed_runs(self) -> int:
        """Runs of our probes the kernel skipped (see MapReader.missed_runs)."""
        return self.maps.missed_runs(kprobes=self.method == "kprobe")

    def close(self):
        if self.comm_watch is not None:
            self.comm_seen = set(self.comm_watch.seen)
            self.comm_watch.close()
            self.comm_watch = None
        if self.maps is not None:
            self.maps.close()
            self.maps = None
        if self.program is not None:
            self.program.close()
            self.program = None

    def _on_event(self, ctx, data, size):
        e = self.program.bpf["events"].event(data)
        ev = {name: getattr(e, name) for name, _ in e._fields_ if name != "pad"}
        ev["comm"] = e.comm.decode(errors="replace")
        ev["t"] = (e.ts - self.t0_ns) / 1e9
        del ev["ts"]
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

    # -- the loop ------------------------------------------------------------
    def run(self, until=None) -> float:
        """Poll until the duration ends, `until()` says so, or a signal arrives;
        then stop counting (loader.Program.stop_counting) before anything is
        read. Returns the recording's duration in seconds: the window counted,
        from the counting hook's attach to its detach, whatever the load."""
        old = {s: signal.signal(s, self.stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            start = self.t0_ns / 1e9           # counting began here (time.monotonic's clock)
            end = start + self.opts.duration if self.opts.duration else None
            next_tick = start + self.opts.interval if self.opts.interval else None
            while not self._stop:
                now = time.monotonic()
                # A tick due at the end still gets its row (-d 2 -i 1: two rows).
                if next_tick and now >= next_tick and (end is None or next_tick <= end + 1e-9):
                    try:
                        self._interval_report()
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
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def window(self) -> Window:
        """The counted window (the recording's `window`): CLOCK_MONOTONIC ns
        bracketing the attach and the detach of the hook that counts."""
        start, end = self.program.counting_from, self.program.counting_until
        d = {"clock": "CLOCK_MONOTONIC", "start_ns": list(start), "t0_ns": self.t0_ns}
        if end is not None:
            d["end_ns"] = list(end)
            d["duration_ns"] = (end[0] + end[1]) // 2 - self.t0_ns
        return d

    def counters(self, buckets: list[dict]) -> dict[str, list[int]]:
        return self.maps.counters(buckets)

    def dump_futex_map(self) -> list[dict]:
        """The `futexes` map alone (not the cache): part of the exact counts."""
        return self.maps.futex_map()

    def read_maps(self) -> tuple[list[dict], list[dict]]:
        """(per-futex list: map and cache, exact per-bucket counts), reading
        the futexes map once for both."""
        fmap = self.dump_futex_map()
        return self.maps.futexes(fmap), self.maps.buckets(fmap)

    def dump_futexes(self) -> list[dict]:
        return self.maps.futexes(self.dump_futex_map())

    def _interval_report(self):
        """One `-i` row. Its boundary is the middle of the map read (the counts
        move while it runs; `read_s` says for how long), its t from t = 0, when
        counting began, so the first interval is as long as the others."""
        a = time.monotonic_ns()
        futexes, buckets = self.read_maps()
        counters, missed = self.counters(buckets), self.missed_runs()
        b = time.monotonic_ns()
        elapsed = ((a + b) // 2 - self.t0_ns) / 1e9
        row = self.live.row(elapsed, futexes, counters, missed,
                            targets.comm_label, self.comms, buckets, events=self.events,
                            infer_prctl=self._method_facts()["prctl_results"] == "inferred",
                            at_attach=self.attach_state)
        row["read_s"] = round((b - a) / 1e9, 6)
        row["lock_waits"] = self.lock_deltas.interval(contention_dump(self.program)["lock_waits"],
                                                      row["interval_s"], self.comms)
        self.live.show(row)

    def dump(self) -> dict:
        """Everything the kernel side holds, as plain data (see aggregate.py)."""
        futexes, buckets = self.read_maps()
        return {"counters": self.counters(buckets), "buckets": buckets, "futexes": futexes,
                "futex_capacity": self.program.max_futexes, "seen_filter": self.maps.seen_filter(),
                "events": self.events,
                "intervals": self.intervals, "missed_runs": self.missed_runs(),
                **contention_dump(self.program)}

    def _kernel_facts(self) -> Kernel:
        """The recording's `kernel` section: what the model learned."""
        topo, g = self.model.topology, self.model.global_hash
        return {"release": self.model.release, "online_cpus": topo.online_cpus,
                "cpu_node": {str(k): v for k, v in topo.cpu_node.items()}, "nodes": topo.nodes,
                "global_hash": {"buckets_per_node": g.buckets_per_node, "shift": g.shift,
                                "nodes": g.nodes, "source": g.source},
                "clone_rule": self.model.clone_rule,
                "futex_hash_bucket_size": self.model.sizes.get("futex_hash_bucket"), "hash_returns": self.model.hash_returns,
                "mm_layout": self.model.mm_layout}

    def _method_facts(self) -> Method:
        """The recording's `method` section: what was attached, why, and its blind spots."""
        inferred = self.method == "tracepoint" and not self.program.exact_prctl
        probes = self.program.probes
        return {"name": self.method, "why": self.why,
                "blind_spots": BLIND_SPOTS[self.method] + ([PRCTL_INFERRED] if inferred else []),
                "prctl_results": "inferred" if inferred else "exit",
                "probes": probes,
                "probes_fallback": self.program.fallback_reason,
                **({"comm_filter": self.comm_how} if self.comm_how else {}),
                "refcount_probes": [p for p in probes
                                    if p.startswith(("k", "fentry:", "fexit:"))
                                    and ("private_hash" in p or "hash_put" in p or "hash_get" in p
                                         or p.endswith(":futex_hash"))]}

    def recording(self, duration: float) -> Recording:
        raw = self.dump()
        if self.opts.hash_kind != "all":
            keep = ("private",) if self.opts.hash_kind == "private" else ("global", "global_shared", "global_numa")
            raw["futexes"] = [f for f in raw["futexes"] if KIND_NAMES.get(f["kind"]) in keep]
            raw["buckets"] = [b for b in raw["buckets"] if KIND_NAMES.get(b["kind"]) in keep]
        kernel, method = self._kernel_facts(), self._method_facts()
        for pid in {e["tgid"] for e in self.events} | set(self.opts.pids):
            self.comms.setdefault(pid, targets.comm_label(pid))
        raw["hash_at_attach"] = self.attach_state
        rec = build_recording(raw, kernel, method, duration, self.started_at, self.comms)
        rec["contention"] = contention_section(raw, duration, self.comms)
        # Only private-hash bucket locks are traced: with no private lookup, a wait count is unknown, not 0.
        rec["contention"]["private_lookups"] = rec["totals"]["private"]
        rec["totals"]["thread_events_dropped"] = self.thread_events_dropped
        rec["attach_s"] = self.attach_s
        rec["monotonic_start_ns"] = self.t0_ns   # t = 0: lines up a workload's CLOCK_MONOTONIC stamps
        rec["window"] = self.window()
        rec["attach_phases_s"] = dict(self.timings)
        rec["compile_cache"] = self.compile_cache
        rec["kernel"]["model_cached"] = self.model_cached
        return rec


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


def _keep_output_error(rec: Recorder, result: dict) -> None:
    """Hand a write error that ended the run to the command, which writes what
    was recorded before reporting it (not part of the recording itself)."""
    if rec.output_error:
        result["output_error"] = rec.output_error


def record_pids(opts: RecordOptions, model=None) -> dict:
    """Trace running processes (or everything when no filter is given)."""
    for pid in opts.pids:
        targets.check_pid(pid)
    for tid in opts.tids:
        targets.check_tid(tid)
    if opts.pids or opts.comms:
        procevents.preload()      # the exit watch and --comm need it once attached
    with startup.SlowStartWatch():
        rec = Recorder(opts, model)
        rec.start()
    exits = procevents.exit_watch(opts.pids)   # exit events pushed by the kernel; None: poll /proc
    try:
        def one_gone() -> bool:
            return not all(targets.alive(p) for p in opts.pids)
        until = exits.any_exited if exits else one_gone
        duration = rec.run(until=until if opts.pids else None)
        result = rec.recording(duration)
        _keep_output_error(rec, result)
        gone = [p for p in opts.pids if not targets.alive(p)]
    finally:
        rec.close()
        if exits:
            exits.close()
    unmatched = filternotes.unmatched(opts, result, rec.comm_seen)
    if unmatched:
        result["error"] = unmatched
    if gone:
        # A normal end, like a command that exits: the recording is complete up to here.
        result["target_exited"] = {"pid": gone[0], "t": round(duration, 3),
                                   "note": f"PID {gone[0]} exited during tracing"
                                           + (exits.describe(gone[0]) if exits else "")
                                           + f" at +{duration:.2f} s: the recording ends there"}
    return result


def record_command(argv: list[str], opts: RecordOptions, model=None) -> dict:
    """Start `argv`, trace it (and what it forks) until it exits."""
    # forked, waits for go() before exec
    child = targets.StoppedChild(argv, stdout_to_stderr=opts.command_stdout_to_stderr)
    try:
        opts.pids = [child.pid] + list(opts.pids)
        with startup.SlowStartWatch():
            rec = Recorder(opts, model)
            rec.start()
        attachstate.mark_launched(rec.attach_state, child.pid, os.path.basename(argv[0]))
    except BaseException:
        child.kill()
        raise
    try:
        child.go()
        duration = rec.run(until=child.exited)
        stopped = not child.exited()     # the run ended first (duration, signal, write error)
        if stopped:
            child.kill()
        result = rec.recording(duration)
        _keep_output_error(rec, result)
        result["command"] = {"argv": argv, "pid": child.pid, "exit_status": child.status(),
                             "stopped_by_futextrace": stopped}
        result["command"]["stdout_tail"] = child.output_tail()
    finally:
        rec.close()
        child.kill()
    return result
