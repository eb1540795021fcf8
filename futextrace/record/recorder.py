"""`futextrace record`: attach, collect, detach, aggregate.

The Recorder owns the loaded programs: every exit path (end of duration, the
traced command exiting, SIGINT/SIGTERM/SIGHUP, an error) goes through
`Program.close()`, and the kernel drops the programs by itself if this process
is SIGKILLed (BCC holds them only through file descriptors and perf links).
"""
from __future__ import annotations

import ctypes as ct
import datetime as dt
import json
import mmap
import os
import signal
import sys
import time
from dataclasses import dataclass, field

from futextrace.kernel import model as kmodel
from futextrace.record import procevents, targets
from futextrace.record.aggregate import build_recording
from futextrace.errors import EnvironmentProblem, KernelRefused, TargetError, UsageError
from futextrace.loading.layout import COUNTER, EVENT, KIND
from futextrace.loading.loader import BLIND_SPOTS, PRCTL_INFERRED, Filters, Program

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
    jsonl: object | None = None       # file object for per-interval JSON lines
    live_out: object | None = None    # where per-interval text goes (None: stdout)
    exact_prctl: bool = False         # tracepoint method: hook prctl's exit (loader.Program)


def kprobe_precondition(model) -> str | None:
    """Why the kprobe method cannot work here, or None. Cheap checks only:
    loading the real programs is the proof (see Recorder.start)."""
    from futextrace.loading.doctor import KPROBE_PMU
    if not KPROBE_PMU.is_dir():
        return f"kernel built without CONFIG_KPROBES (no {KPROBE_PMU})"
    if not model.probeable("futex_hash"):
        return "futex_hash has no symbol (inlined): nothing to probe"
    return None


def choose_method(model, requested: str) -> tuple[str, str]:
    """(method, why). `auto` prefers kprobes (they see the kernel's own bucket
    and refcount calls) and falls back to the tracepoint method. fentry is
    served by the kprobe programs: futex_hash may return a struct by value,
    which fexit cannot attach to. `futextrace doctor` shows the full proof."""
    if requested == "tracepoint":
        return "tracepoint", "asked for with --method"
    if requested in ("kprobe", "fentry"):
        why = kprobe_precondition(model)
        if why:
            raise EnvironmentProblem(f"method {requested} is not available here: {why} "
                                     "(run `futextrace doctor`, or use --method auto)")
        return "kprobe", "asked for with --method" + (" (fentry served by kprobes)" if requested == "fentry" else "")
    why = kprobe_precondition(model)
    if why:
        return "tracepoint", f"kprobes not usable: {why}"
    return "kprobe", "kprobes available: they see the kernel's own bucket and refcount calls"


class Recorder:
    def __init__(self, opts: RecordOptions, model=None):
        if opts.duration is not None and opts.duration <= 0:
            raise UsageError("-d/--duration must be more than 0 seconds")
        if opts.interval is not None and opts.interval <= 0:
            raise UsageError("-i/--interval must be more than 0 seconds")
        self.opts = opts
        self.model = model or kmodel.load()
        if not self.model.private_hash:
            raise EnvironmentProblem("this kernel has no futex private hash (CONFIG_FUTEX_PRIVATE_HASH, "
                                     "Linux 6.17+): nothing for futextrace to show")
        self.method, self.why = choose_method(self.model, opts.method)
        self.filters = Filters(pids=list(opts.pids), tids=list(opts.tids), comms=list(opts.comms),
                               cgroup_ids=[targets.cgroup_id(c) for c in opts.cgroups])
        self.program: Program | None = None
        self.events: list[dict] = []
        self.intervals: list[dict] = []
        self.t0_ns = 0
        self.comms: dict[int, str] = {}
        self._stop = False
        self._last_totals = {}
        self._last_snapshot: dict = {}
        self._last_elapsed = 0.0
        self._last_missed = 0
        self._cache_map = None
        self._thread_events = 0
        self.thread_events_dropped = 0
        self._last_state: dict[int, tuple] = {}   # tgid -> hash state of its last kept event

    # -- lifecycle -----------------------------------------------------------
    def start(self):
        try:
            self.program = Program(self.model, self.method, self.filters, self.opts.max_futexes,
                                   exact_prctl=self.opts.exact_prctl)
        except (EnvironmentProblem, KernelRefused) as e:
            if self.opts.method != "auto" or self.method == "tracepoint":
                raise
            self.method, self.why = "tracepoint", f"the kprobe method failed to load ({e})"
            self.program = Program(self.model, self.method, self.filters, self.opts.max_futexes,
                                   exact_prctl=self.opts.exact_prctl)
        b = self.program.bpf
        b["events"].open_ring_buffer(self._on_event)
        self.t0_ns = time.monotonic_ns()
        self.started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")

    def stop(self, *_):
        self._stop = True

    def missed_runs(self) -> int:
        """Hits the kernel dropped on our probes, shown and never silent: a run
        of our program skipped because one was already running on that CPU
        (Program.missed_runs), or a kprobe the kernel itself missed
        (kprobe_profile, when BCC created the probe through tracefs)."""
        missed = self.program.missed_runs()
        if self.method != "kprobe":
            return missed
        tag = f"_bcc_{os.getpid()}"
        for base in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
            try:
                with open(f"{base}/kprobe_profile") as f:
                    for line in f:
                        parts = line.split()
                        if len(parts) >= 3 and parts[0].endswith(tag):
                            missed += int(parts[2])
                break
            except OSError:
                continue
        return missed

    def close(self):
        if self._cache_map is not None:
            self._cache_map.close()
            self._cache_map = None
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
        return not (unchanged and self._thread_events > MAX_THREAD_EVENTS)

    # -- the loop ------------------------------------------------------------
    def run(self, until=None) -> float:
        """Poll until the duration ends, `until()` says so, or a signal arrives.
        Returns the recording's duration in seconds."""
        old = {s: signal.signal(s, self.stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            start = time.monotonic()
            next_tick = start + self.opts.interval if self.opts.interval else None
            while not self._stop:
                self.program.bpf.ring_buffer_poll(POLL_MS)
                now = time.monotonic()
                if next_tick and now >= next_tick:
                    self._interval_report(now - start)
                    next_tick += self.opts.interval
                if self.opts.duration and now - start >= self.opts.duration:
                    break
                if until is not None and until():
                    break
            self.program.bpf.ring_buffer_poll(0)
            return time.monotonic() - start
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def counters(self, futexes: list[dict]) -> dict[str, list[int]]:
        """Per-CPU counters. The BPF side counts in PRIVATE and GLOBAL only the
        lookups no map could hold (the hot path does not touch a counter); the
        lookups of every stored futex are added here, so both count all."""
        table = self.program.bpf["counters"]
        out = {}
        for name, idx in COUNTER.items():
            if name == "FTC_NR":
                continue
            out[name.removeprefix("FTC_")] = list(table[ct.c_int(idx)])
        for f in futexes:
            col = out["PRIVATE" if f["kind"] == KIND["FT_PRIVATE"] else "GLOBAL"]
            for cpu, v in enumerate(f["per_cpu"][:len(col)]):
                col[cpu] += v[0]
        return out

    def _interval_report(self, elapsed: float):
        from futextrace.record import live
        futexes = self.dump_futexes()
        c = {k: sum(v) for k, v in self.counters(futexes).items()}
        prev = self._last_totals or {k: 0 for k in c}
        delta = {k: c[k] - prev.get(k, 0) for k in c}
        self._last_totals = c
        # Rates over the time that really passed: a slow poll stretches an interval.
        span = round(elapsed - self._last_elapsed, 6)
        self._last_elapsed = elapsed
        row = {"t": round(elapsed, 3), "interval_s": span,
               "lookups": delta["PRIVATE"] + delta["GLOBAL"], "private": delta["PRIVATE"],
               "global": delta["GLOBAL"], "unattributed": delta["UNATTRIBUTED"],
               "lost_events": delta["LOST_EVENTS"],
               "missed_runs": self._missed_delta(),
               "resize_events": sum(1 for e in self.events if e["type"] != EVENT["FTE_EXIT"])}
        snap = live.snapshot(futexes)
        for pid in {k[0] for k in snap} - set(self.comms):
            self.comms[pid] = targets.comm_of(pid)
        row["processes"] = live.processes(self._last_snapshot, snap, span, self.comms)
        self._last_snapshot = snap
        self.intervals.append(row)
        out = self.opts.live_out or sys.stdout
        text = "\n".join(live.render(row, row["processes"], self.opts.timestamps))
        if out.isatty():
            text = live.CLEAR + text   # redraw in place, like top
        print(text, file=out, flush=True)
        if self.opts.jsonl:
            self.opts.jsonl.write(json.dumps(row) + "\n")
            self.opts.jsonl.flush()

    def _missed_delta(self) -> int:
        missed = self.missed_runs()
        delta, self._last_missed = missed - self._last_missed, missed
        return delta

    def _cache_items(self):
        """(index, slot) of every used slot of the lookup cache, read through
        its memory mapping: one pass over the lookup counts, no syscalls."""
        table = self.program.bpf["fcache"]
        if self._cache_map is None:
            size = ct.sizeof(table.Leaf) * table.max_entries
            self._cache_map = mmap.mmap(table.map_fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        buf = self._cache_map
        leaf = table.Leaf
        # The u64 `st.lookups` of each slot, located through BCC's ctypes view of futextrace.h.
        at = leaf.st.offset + dict(leaf._fields_)["st"].lookups.offset
        words = ct.sizeof(leaf) // 8
        lookups = memoryview(buf).cast("Q")[at // 8::words]
        used = [i for i, n in enumerate(lookups) if n]
        lookups.release()
        return [(i, leaf.from_buffer_copy(buf, i * words * 8)) for i in used]

    def dump_futexes(self) -> list[dict]:
        """Per-futex counts from the map and the per-CPU cache in front of it
        (the same futex can be in both: aggregate.merge_futexes adds them)."""
        b = self.program.bpf
        futexes = []

        def add(k, per_cpu_vals):
            futexes.append({"tgid": k.tgid, "kind": k.kind, "uaddr": k.uaddr, "hash_mask": k.hash_mask,
                            "per_cpu": [[v.lookups, v.atomic_lookups, v.bucket, v.node, v.kernel_bucket]
                                        for v in per_cpu_vals]})
        for k, vals in b["futexes"].items():
            add(k, vals)
        nslots, ncpus = self.program.cache_slots, self.program.ncpu_ids
        for idx, s in self._cache_items():
            if s.st.lookups:
                per_cpu = [type(s.st)()] * ncpus
                per_cpu[idx // nslots] = s.st
                add(s.key, per_cpu)
        return futexes

    def dump(self) -> dict:
        """Everything the kernel side holds, as plain data (see aggregate.py)."""
        futexes = self.dump_futexes()
        return {"counters": self.counters(futexes), "futexes": futexes, "events": self.events,
                "intervals": self.intervals, "missed_runs": self.missed_runs()}

    def recording(self, duration: float) -> dict:
        raw = self.dump()
        if self.opts.hash_kind != "all":
            keep = ("private",) if self.opts.hash_kind == "private" else ("global", "global_shared", "global_numa")
            from futextrace.record.aggregate import KIND_NAMES
            raw["futexes"] = [f for f in raw["futexes"] if KIND_NAMES.get(f["kind"]) in keep]
        topo = self.model.topology
        g = self.model.global_hash
        kernel = {"release": self.model.release, "online_cpus": topo.online_cpus,
                  "cpu_node": {str(k): v for k, v in topo.cpu_node.items()}, "nodes": topo.nodes,
                  "global_hash": {"buckets_per_node": g.buckets_per_node, "shift": g.shift,
                                  "nodes": g.nodes, "source": g.source},
                  "clone_rule": self.model.clone_rule, "hash_returns": self.model.hash_returns,
                  "mm_layout": self.model.mm_layout}
        inferred = self.method == "tracepoint" and not self.program.exact_prctl
        method = {"name": self.method, "why": self.why,
                  "blind_spots": BLIND_SPOTS[self.method] + ([PRCTL_INFERRED] if inferred else []),
                  "prctl_results": "inferred" if inferred else "exit",
                  "probes": self.program.probes,
                  "probes_fallback": self.program.fallback_reason,
                  "refcount_probes": [p for p in self.program.probes
                                      if p.startswith("k") and ("private_hash" in p or "hash_put" in p
                                                                or p.endswith(":futex_hash"))]}
        for pid in {e["tgid"] for e in self.events} | set(self.opts.pids):
            self.comms.setdefault(pid, targets.comm_of(pid))
        rec = build_recording(raw, kernel, method, duration, self.started_at, self.comms)
        rec["totals"]["thread_events_dropped"] = self.thread_events_dropped
        return rec


def record_pids(opts: RecordOptions, model=None) -> dict:
    """Trace running processes (or everything when no filter is given)."""
    for pid in opts.pids:
        targets.check_pid(pid)
    for tid in opts.tids:
        targets.check_tid(tid)
    rec = Recorder(opts, model)
    rec.start()
    exits = procevents.exit_watch(opts.pids)   # exit events pushed by the kernel; None: poll /proc
    try:
        alive = lambda: all(targets.alive(p) for p in opts.pids)
        until = exits.any_exited if exits else (lambda: not alive())
        duration = rec.run(until=until if opts.pids else None)
        result = rec.recording(duration)
        gone = [p for p in opts.pids if not targets.alive(p)]
    finally:
        rec.close()
        if exits:
            exits.close()
    if gone:
        result["error"] = f"PID {gone[0]} exited during tracing" + (exits.describe(gone[0]) if exits else "")
    return result


def record_command(argv: list[str], opts: RecordOptions, model=None) -> dict:
    """Start `argv`, trace it (and what it forks) until it exits."""
    child = targets.StoppedChild(argv)   # forked, waits for go() before exec
    try:
        opts.pids = [child.pid] + list(opts.pids)
        rec = Recorder(opts, model)
        rec.start()
    except BaseException:
        child.kill()
        raise
    try:
        child.go()
        duration = rec.run(until=child.exited)
        if not child.exited():
            child.kill()
        result = rec.recording(duration)
        result["command"] = {"argv": argv, "pid": child.pid, "exit_status": child.status()}
        result["command"]["stdout_tail"] = child.output_tail()
    finally:
        rec.close()
        child.kill()
    return result
