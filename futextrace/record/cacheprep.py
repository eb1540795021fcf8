"""`futextrace cache build`: every program the commands can ask for on this
kernel, compiled into the program cache (loading/progcache.py) ahead of the
first start, with nothing loaded or attached.

A program variant is its -D flags. They follow the filters' shape (which
filters are given), never their values: pids, tids, names and cgroup ids are
filled into maps at run time (loader.Program._fill_filters), so one
placeholder per filter stands for every value. The shapes are the commands'
own RecordOptions, made into Program arguments by the session's functions
(filters_for, program_args) and into flags by the loader's (start_flags), so
a start and the build cannot disagree on what a variant is.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from futextrace.errors import EnvironmentProblem, KernelRefused
from futextrace.loading import earlymaps, loader
from futextrace.loading.methods import PREFERENCE, candidates
from futextrace.record.session import RecordOptions, filters_for, program_args

PLACEHOLDER = 1   # a pid, tid or cgroup id: only whether one is given is compiled in

# (what a user types, the options, --comm's names kept as tgids by the proc connector).
# -- COMMAND is -p's shape (the launched PID); follow_forks is never turned off
# by a command, so -p's only shape follows forks.
FILTER_SHAPES = (
    ("", RecordOptions(), False),
    ("-p", RecordOptions(pids=(PLACEHOLDER,)), False),
    ("--tid", RecordOptions(tids=(PLACEHOLDER,)), False),
    ("--comm", RecordOptions(comms=("x",)), True),                          # the proc connector works
    ("--comm (in BPF)", RecordOptions(comms=("x",)), False),                # it does not
    ("-p --comm", RecordOptions(pids=(PLACEHOLDER,), comms=("x",)), False),  # both must hold: in BPF
    ("--cgroup", RecordOptions(cgroups=("/",)), False),
)
# record and explain take call sites (record --no-call-sites, serve and
# snapshot do not); record --exact-prctl and explain hook prctl's exit.
CALL_SITES = ((True, ""), (False, " --no-call-sites"))
EXACT_PRCTL = ((False, ""), (True, " --exact-prctl"))
# The shape each command starts with by default, whose big maps its first start
# then has the kernel create before the imports (loading/earlymaps.py).
DEFAULT_SHAPE = {"record": "", "serve": "--no-call-sites"}


@dataclass(frozen=True)
class Variant:
    method: str
    flags: tuple[str, ...]
    shapes: tuple[str, ...]      # the options that compile to these flags

    def label(self) -> str:
        return f"{self.method}: " + ", ".join(s or "(no filter)" for s in self.shapes)


def shapes(max_futexes: int | None = None) -> list[tuple[str, RecordOptions, bool]]:
    """Every options shape the commands can ask a session for."""
    out = []
    for name, opts, as_tgids in FILTER_SHAPES:
        for call_sites, cs in CALL_SITES:
            for exact, ex in EXACT_PRCTL:
                out.append(((name + cs + ex).strip(), replace(opts, call_sites=call_sites, exact_prctl=exact,
                                                               max_futexes=max_futexes), as_tgids))
    return out


def variants(model, method: str, max_futexes: int | None = None) -> list[Variant]:
    """The distinct programs `method` compiles for every shape, in shapes() order."""
    found: dict[tuple[str, ...], list[str]] = {}
    for name, opts, as_tgids in shapes(max_futexes):
        cgroup_ids = tuple(PLACEHOLDER for _ in opts.cgroups)
        args = program_args(opts, filters_for(opts, cgroup_ids, as_tgids))
        found.setdefault(tuple(loader.start_flags(model, method, **args)), []).append(name)
    return [Variant(method, flags, tuple(names)) for flags, names in found.items()]


def usable_methods(model, asked: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """[(method, why it is skipped or None)] for the methods asked for (all by default),
    decided as `record --method M` decides it."""
    out = []
    for method in asked or PREFERENCE:
        try:
            candidates(model, method)
            out.append((method, None))
        except EnvironmentProblem as e:
            out.append((method, str(e)))
    return out


def build(variant: Variant) -> tuple[str, float]:
    """Compile one variant into the cache: (what happened, seconds)."""
    t0 = time.monotonic()
    try:
        b = loader.compile_only(variant.method, list(variant.flags))
    except KernelRefused as e:
        return f"failed ({e})", time.monotonic() - t0
    try:
        for command, shape in DEFAULT_SHAPE.items():
            if shape in variant.shapes and b.map_tables:
                earlymaps.remember(b.map_tables, command)
        if b.compile_cache == "hit":
            said = "already cached"
        elif b.compile_cache == "off":
            said = "compiled, not cached (FUTEXTRACE_NO_PROG_CACHE is set)"
        elif not b.cacheable:
            said = "compiled, but cannot be cached (a reference the replay cannot patch)"
        else:
            said = {"miss": "built", "stale": "built (the cached maps no longer matched)",
                    "mismatch": "built (replaced an entry made for another kernel or options)"}[b.compile_cache]
    finally:
        b.cleanup()
    return said, time.monotonic() - t0
