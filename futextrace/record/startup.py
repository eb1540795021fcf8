"""The tracer's own start: how long it took, what it waits for, and running it
at a real-time priority when real-time threads leave it no CPU."""
from __future__ import annotations

import os
import sys
import threading
import time

from futextrace.errors import EnvironmentProblem, UsageError

SLOW_START_S = 2.0     # say what we wait for after this long
RT_POLICIES = {1: "SCHED_FIFO", 2: "SCHED_RR"}


def process_age() -> float:
    """Seconds since this process started (interpreter start and imports
    included), from /proc/self/stat's start time in clock ticks after boot."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)


def rt_busy_cpus(at_least: int = 0) -> tuple[set[int], int]:
    """(CPUs a runnable SCHED_FIFO/RR thread of another process, at real-time
    priority `at_least` or above, was last on; how many such threads). Our own
    threads are left out: with --rt-priority they are runnable real-time
    threads too (the loads run in threads), but they hold nothing against us."""
    cpus: set[int] = set()
    n = 0
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # rest[k] is field k + 3 of proc(5): state 3, processor 39, rt_priority 40, policy 41.
            if rest[0] == "R" and int(rest[38]) in RT_POLICIES and int(rest[37]) >= at_least:
                cpus.add(int(rest[36]))
                n += 1
    return cpus, n


class SlowStartWatch:
    """Started before the model and the compile; if they are not done
    SLOW_START_S after the process started (its imports count: under a
    starving real-time thread they are most of the wait) and real-time threads
    are runnable on every CPU (they starve everything at a normal priority),
    say so once on stderr."""

    def __init__(self, out=None, after: float = SLOW_START_S):
        self._done = threading.Event()
        self._out = out or sys.stderr
        self._after = after
        self._thread = threading.Thread(target=self._watch, daemon=True,
                                        name="futextrace-slow-start")
        self.reported = False

    def __enter__(self):
        if process_age() >= self._after:
            # Already late (starved imports): look now, in this thread, so the
            # rest of the start cannot finish before the look and hide why it was slow.
            self._report()
        else:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()

    def _watch(self):
        if not self._done.wait(max(0.0, self._after - process_age())):
            self._report()

    def _report(self):
        ours = os.sched_getaffinity(0)
        # Under --rt-priority only threads at our priority or above can hold us off.
        policy = os.sched_getscheduler(os.getpid()) & ~os.SCHED_RESET_ON_FORK   # the main thread
        mine = os.sched_getparam(os.getpid()).sched_priority if policy in RT_POLICIES else 0
        busy, threads = rt_busy_cpus(mine)
        if not ours <= busy or self._done.is_set():
            return
        self.reported = True
        waited = max(self._after, process_age())
        print(f"futextrace: still compiling/attaching after {waited:.0f} s: {threads} runnable "
              f"SCHED_FIFO/RR threads hold every CPU it may run on ({len(ours)}); try "
              "--rt-priority N (above theirs) to run the tracer at a real-time priority",
              file=self._out, flush=True)


def set_rt_priority(priority: int) -> None:
    """Run this process under SCHED_FIFO at `priority`. Children (the traced
    command) go back to the normal policy: SCHED_RESET_ON_FORK."""
    lo, hi = os.sched_get_priority_min(os.SCHED_FIFO), os.sched_get_priority_max(os.SCHED_FIFO)
    if not lo <= priority <= hi:
        raise UsageError(f"--rt-priority must be between {lo} and {hi}")
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(priority))
    except OSError as e:
        raise EnvironmentProblem(f"cannot run at SCHED_FIFO priority {priority}: {e.strerror} "
                         "(needs root or CAP_SYS_NICE)")
