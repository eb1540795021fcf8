"""SlowStartWatch counts from the process's start: a start already late when
the watch begins (starved imports) is explained before the attach goes on."""
from __future__ import annotations

import io
import os

from futextrace.record import startup


def _rt_threads_everywhere(monkeypatch, age: float):
    monkeypatch.setattr(startup, "process_age", lambda: age)
    monkeypatch.setattr(startup, "rt_busy_cpus", lambda at_least=0: (os.sched_getaffinity(0), 3))


def test_late_start_is_explained_before_the_attach_goes_on(monkeypatch):
    _rt_threads_everywhere(monkeypatch, age=4.6)
    out = io.StringIO()
    with startup.SlowStartWatch(out=out) as watch:
        said = out.getvalue()          # what the user sees before the attach continues
    assert watch.reported
    assert said.startswith("futextrace: still compiling/attaching after 5 s: 3 runnable "
                           "SCHED_FIFO/RR threads hold every CPU"), said


def test_early_start_that_ends_in_time_says_nothing(monkeypatch):
    _rt_threads_everywhere(monkeypatch, age=0.1)
    out = io.StringIO()
    with startup.SlowStartWatch(out=out) as watch:
        pass
    watch._thread.join(timeout=5)
    assert not watch.reported and out.getvalue() == ""


def test_late_start_without_rt_threads_says_nothing(monkeypatch):
    monkeypatch.setattr(startup, "process_age", lambda: 9.0)
    monkeypatch.setattr(startup, "rt_busy_cpus", lambda at_least=0: (set(), 0))
    out = io.StringIO()
    with startup.SlowStartWatch(out=out) as watch:
        pass
    assert not watch.reported and out.getvalue() == ""
