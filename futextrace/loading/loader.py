"""Compile and attach futextrace's BPF programs for one attach method.

The kernel model (BTF + kallsyms) supplies every offset as a -D macro; the
filters the user asked for are compiled in, the others compiled out, so an
unfiltered run pays nothing for them. `Program.close()` detaches everything,
and is also registered to run at interpreter exit.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import time
from dataclasses import dataclass

from futextrace.errors import EnvironmentProblem, KernelRefused
from futextrace.kernel.headers import bcc_environment
from futextrace.kernel.layout import bpf_dir, header_text
from futextrace.kernel.topology import node_macros, nr_cpu_ids
from futextrace.loading import earlymaps, earlyprograms, lockwaits, fentry, kprobes, preconditions, tpbtf
from futextrace.loading.bpfsys import BPF_PROG_TYPE_RAW_TRACEPOINT, prog_stats
from futextrace.loading.callsites import call_site_macros
from futextrace.loading.lockwaits import lockwait_macros
from futextrace.loading.kprobes import attach_kprobes
from futextrace.loading.progcache import compile_program

METHODS = ("fentry", "kprobe", "tracepoint")
# The bpf/ headers source_for() pastes where a program's text #includes them
# (each at most once): all but futextrace.h, which declares no map. Their jobs:
# docs/architecture.md, "Kernel side".
HOT_PATH_HEADERS = ("maps.h", "filters.h", "futex_hash.h", "tiers.h", "seen_filter.h", "call_sites.h",
                    "lookup_cache.h",
                    "task_memo.h", "task_events.h", "kernel_bucket.h")
# Per-CPU slots of the lookup cache (64 bytes each): 2048 (128 KiB) so that
# `perf bench futex hash`'s default, 1024 futexes per thread, is all cache
# hits; fewer on big machines, so that the whole cache (which user space
# scans at every read) stays within FUTEX_CACHE_BUDGET. Against 256 slots
# (16 KiB, inside a first-level data cache), side by side: +0.114 of
# retained throughput at 1,024 futexes, -0.037..-0.003 where every lookup
# misses anyway (4,096 to 1,048,576): docs/figures.md, "A lookup cache that
# holds perf bench's default".
FUTEX_CACHE_SLOTS_MAX = 2048
FUTEX_CACHE_SLOTS_MIN = 256
FUTEX_CACHE_BUDGET = 4 << 20      # bytes the lookup cache may take (64-byte slots, every possible CPU)
BUCKET_CACHE_SLOTS_MAX = 4096     # per-CPU slots of the per-bucket cache
BUCKET_CACHE_SLOTS_MIN = 1024
BUCKET_CACHE_BUDGET = 16 << 20    # bytes the per-bucket cache may take (64-byte slots, every possible CPU)
# A lookup-cache miss is admitted to the cache once per ADMIT_EVERY misses
# counted in its bucket's slot; the others are counted in that slot only.
ADMIT_EVERY = 32
# The first-seen filter (bpf/seen_filter.h first_seen): 2^19 words (4 MiB,
# shared by all CPUs), SEEN_K bits in each of two words per key, the futexes of
# one 32-byte span in the same two 64-byte lines (a futex array costs two filter
# lines per 8 futexes, not a line per futex). Simulated
# (benchmarks/seen_filter_sim.py), the expected futexes taken as seen are
# 1.3e-7 at 65,536 futexes and 17 at 1,048,576: docs/figures.md, "First-seen filter".
SEEN_WORDS_LOG2 = 19
SEEN_SPAN_SHIFT = 5
SEEN_K = 6
SEEN_WORDS_PER_KEY = 2      # not a build parameter: first_seen() sets two words
FUTEXES_BUDGET = 32 << 20   # bytes of kernel memory the per-futex list may take by default
FUTEXES_MAX_DEFAULT = 65536
# Rows of the `buckets` row table (the exact counts, bpf/maps.h), whatever the
# CPU count: per CPU a 32-byte stat each (2 MiB), plus its key and its index
# entry once (~100 bytes: 6.5 MiB). Bounded by the hash sizes in use: a
# process's private hash has at most as many buckets as it has entries.
MAX_BUCKETS = 65536


def default_max_futexes(ncpus: int | None = None) -> int:
    """Rows of the per-futex list (the `futexes` row table): 65536, fewer on big
    machines so that it (a 32-byte stat per CPU per row, made at the start)
    stays within FUTEXES_BUDGET. A power of two, at least 4096."""
    ncpus = ncpus or os.cpu_count() or 1
    fit = FUTEXES_BUDGET // (32 * ncpus + 96)   # + the key and its index entry: ~100 bytes a row
    return max(4096, min(FUTEXES_MAX_DEFAULT, 1 << (fit.bit_length() - 1)))


def _slots_within(budget: int, ncpus: int, least: int, most: int) -> int:
    """Per-CPU 64-byte slots of a cache: the largest power of two from `least`
    to `most` whose slots on every possible CPU fit in `budget` bytes."""
    fit = max(1, budget // (64 * max(1, ncpus)))
    return max(least, min(most, 1 << (fit.bit_length() - 1)))


def futex_cache_slots(ncpus: int) -> int:
    """Per-CPU slots of the lookup cache: 2048 up to 32 CPUs, fewer beyond so
    it stays within FUTEX_CACHE_BUDGET (at least 256)."""
    return _slots_within(FUTEX_CACHE_BUDGET, ncpus, FUTEX_CACHE_SLOTS_MIN, FUTEX_CACHE_SLOTS_MAX)


def bucket_cache_slots(ncpus: int) -> int:
    """Per-CPU slots of the per-bucket cache: 4096 up to 64 CPUs, fewer beyond
    so it stays within BUCKET_CACHE_BUDGET (at least 1024)."""
    return _slots_within(BUCKET_CACHE_BUDGET, ncpus, BUCKET_CACHE_SLOTS_MIN, BUCKET_CACHE_SLOTS_MAX)


# What each method cannot see, printed with every recording.
BLIND_SPOTS = {
    "tracepoint": [
        "futex operations the kernel issues itself (io_uring futex ops, robust-list and exit wakes)",
        "retries inside one syscall (each syscall key counts once)",
        "the bucket of shared (non-private) futexes: their hash input (inode or mm-shared key) is not visible",
        "refcount traffic is inferred: one get and one put per private-hash lookup, atomic when the hash state is atomic",
        "the pivot of a deferred resize is seen at the process's next futex call, not at the kernel's pivot",
    ],
    "kprobe": [
        "refcount gets/puts of inlined helpers are counted at their nearest probed caller",
    ],
    "fentry": [
        "refcount gets/puts of inlined helpers are counted at their nearest probed caller",
        "where GCC split futex_private_hash_put (a .part.0 body, no BTF), puts that call the split body "
        "directly are not seen (the probe list then names it)",
    ],
}

# Added to the tracepoint method's blind spots without --exact-prctl.
PRCTL_INFERRED = ("PR_FUTEX_HASH results are inferred from the arguments and the hash in use before and "
                  "after (-ENOMEM: the caller was seen again without the new hash); --exact-prctl hooks "
                  "prctl's exit instead, at a cost on every syscall")


@dataclass(frozen=True)
class Filters:
    """What the programs filter on, compiled in (cflags_for) and filled into
    their maps: built once (record/session.py filters_for), then only read."""
    pids: tuple[int, ...] = ()
    tids: tuple[int, ...] = ()
    comms: tuple[str, ...] = ()
    cgroup_ids: tuple[int, ...] = ()
    follow_forks: bool = True
    tgid_map: bool = False      # a tgid filter filled by user space (record/commwatch.py), even if empty
    exec_comms: tuple[str, ...] = ()  # with tgid_map: names the kernel adds at exec/fork

    def __post_init__(self):
        for name in ("pids", "tids", "comms", "cgroup_ids", "exec_comms"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


def task_memo(method: str, filters: Filters) -> bool:
    """Whether the programs keep the task memo (bpf/task_memo.h, compiled with
    -DTASK_MEMO): the tracepoint method's, unless a filter's answer may change
    without a task event (a name, a cgroup, a tgid set that user space keeps
    as processes come and go: --comm). The one statement of that rule."""
    return method == "tracepoint" and not (filters.comms or filters.cgroup_ids or filters.tgid_map)


def task_event_probes(cflags: list[str]) -> list[str]:
    """The task-event raw tracepoints of a program compiled with `cflags`
    (bpf/task_events.h; BCC attaches them at load), as listed in the recording:
    sched_process_exec only where --comm's exec rule or the task memo's epoch
    needs it."""
    execs = ["raw_tracepoint:sched_process_exec"] if (
        "-DCOMM_AT_EXEC" in cflags or "-DTASK_MEMO" in cflags) else []
    return ["raw_tracepoint:task_newtask", *execs, "raw_tracepoint:sched_process_exit"]


def _need(model, key: str) -> int:
    val = model.offsets.get(key)
    if val is None:
        raise EnvironmentProblem(
            f"this kernel's BTF has no {key}: futextrace cannot trace its futex hash "
            "(run `futextrace doctor` for details)")
    return int(val)


def _size_macros(max_futexes: int, ncpu_ids: int) -> dict[str, int]:
    """The maps' sizes and the caches' and filter's shapes, as compiled in."""
    fslots, bslots = futex_cache_slots(ncpu_ids), bucket_cache_slots(ncpu_ids)
    return {"MAX_FUTEXES": max_futexes, "MAX_BUCKETS": MAX_BUCKETS, "NR_CPU_IDS": ncpu_ids,
            "FUTEX_CACHE_SLOTS": fslots, "FUTEX_CACHE_BITS": fslots.bit_length() - 1,
            "BUCKET_CACHE_SLOTS": bslots, "BUCKET_CACHE_BITS": bslots.bit_length() - 1, "ADMIT_EVERY": ADMIT_EVERY,
            "SEEN_WORDS_LOG2": SEEN_WORDS_LOG2, "SEEN_K": SEEN_K, "SEEN_SPAN_SHIFT": SEEN_SPAN_SHIFT,
            "RINGBUF_PAGES": 256}


def cflags_for(model, method: str, filters: Filters, max_futexes: int,
               ncpu_ids: int | None = None, call_sites: bool = False) -> list[str]:
    off = {
        "OFF_TASK_MM": _need(model, "task_struct.mm"),
        "OFF_TASK_SIGNAL": _need(model, "task_struct.signal"),
        "OFF_TASK_PID": _need(model, "task_struct.pid"),
        "OFF_TASK_TGID": _need(model, "task_struct.tgid"),
        "OFF_SIGNAL_NR_THREADS": _need(model, "signal_struct.nr_threads"),
        "OFF_MM_PHASH": _need(model, "mm_struct.futex_phash"),
        "OFF_MM_PHASH_NEW": _need(model, "mm_struct.futex_phash_new"),
        "OFF_FPH_MASK": _need(model, "futex_private_hash.hash_mask"),
        "OFF_FPH_CUSTOM": _need(model, "futex_private_hash.custom"),
        "OFF_FPH_MM": _need(model, "futex_private_hash.mm"),
        "OFF_FPH_QUEUES": _need(model, "futex_private_hash.queues"),
        "OFF_REGS_DI": _need(model, "pt_regs.di"),
        "OFF_REGS_SI": _need(model, "pt_regs.si"),
        "OFF_REGS_DX": _need(model, "pt_regs.dx"),
        "OFF_REGS_R10": _need(model, "pt_regs.r10"),
        "OFF_REGS_R8": _need(model, "pt_regs.r8"),
        "OFF_REGS_ORIG_AX": _need(model, "pt_regs.orig_ax"),
    }
    state = model.offsets.get("futex_private_hash.state")
    # One 8-byte read fetches {state, hash_mask}; needs them adjacent (6.17+).
    if state is None or off["OFF_FPH_MASK"] != state + 4:
        raise EnvironmentProblem("unexpected struct futex_private_hash layout "
                                 "(state/hash_mask not adjacent): unsupported kernel")
    off["OFF_FPH_STATE"] = state
    off["BUCKET_SIZE"] = int(model.sizes["futex_hash_bucket"])
    g = model.global_hash
    off["GLOBAL_MASK"] = g.buckets_per_node - 1
    off["GLOBAL_SHIFT"] = g.shift
    off.update(node_macros(model.topology.possible_nodes))   # nr_node_ids: possible nodes
    if off["OFF_REGS_DI"] != off["OFF_REGS_SI"] + 8:
        raise EnvironmentProblem("unexpected struct pt_regs layout (si/di not adjacent): unsupported kernel")
    ncpu_ids = ncpu_ids or nr_cpu_ids()
    off.update(_size_macros(max_futexes, ncpu_ids))
    off.update(call_site_macros(call_sites, ncpu_ids))
    flags = [f"-D{k}={v}" for k, v in {**off, **lockwait_macros(model)}.items()]
    flags += ["-DCALL_SITES"] if call_sites else []
    flags += filter_cflags(method, filters)
    flags += _method_cflags(model, method)
    flags += [f"-I{bpf_dir()}", "-Wno-macro-redefined", "-Wno-unused-function"]
    return flags


def filter_cflags(method: str, filters: Filters) -> list[str]:
    """The filters compiled in (the others compiled out) and the task memo
    where task_memo() keeps it."""
    flags = []
    if filters.pids or filters.tgid_map:
        flags.append("-DFILTER_TGID")
        if filters.follow_forks:
            flags.append("-DFOLLOW_FORKS")
    if filters.tgid_map:    # user space changes the filter as it runs: no task memo (task_memo())
        flags.append("-DFILTER_TGID_LIVE")
    if filters.tids:
        flags.append("-DFILTER_TID")
    if filters.cgroup_ids:
        flags.append("-DFILTER_CGROUP")
    if filters.comms:
        flags.append("-DFILTER_COMM")
    if filters.tgid_map and filters.exec_comms:
        flags.append("-DCOMM_AT_EXEC")
    if task_memo(method, filters):
        flags.append("-DTASK_MEMO")
    return flags


def _method_cflags(model, method: str) -> list[str]:
    """The kernel-bucket check's inputs (kprobe and fentry) and fentry's own."""
    if method == "tracepoint":
        return []
    return kprobes.cflags(model) + (fentry.cflags(model) if method == "fentry" else [])


def source_for(method: str) -> str:
    """The program text with the headers of HOT_PATH_HEADERS pasted in: BCC
    rewrites map calls (`map.lookup()`) only in the main text, never in
    #included files."""
    name = {"tracepoint": "trace_tp.bpf.c", "kprobe": "trace_kprobe.bpf.c",
            "fentry": "trace_fentry.bpf.c"}[method]
    text = (bpf_dir() / name).read_text()
    for header in HOT_PATH_HEADERS:
        text = text.replace(f'#include "{header}"', (bpf_dir() / header).read_text(), 1)
    return text + "\n" + (bpf_dir() / "lock_waits.h").read_text()   # every method: bucket-lock waits


def program_cflags(model, method: str, filters: Filters, max_futexes: int, ncpu_ids: int,
                   call_sites: bool = False, exact_prctl: bool = False,
                   extra_cflags: list[str] | None = None) -> list[str]:
    """Every flag Program compiles its text with, but TP_BTF_ONLY (first_compile_flags):
    the one statement of how its arguments become -D flags (`cache build` asks it too)."""
    cflags = cflags_for(model, method, filters, max_futexes, ncpu_ids, call_sites) + (extra_cflags or [])
    if exact_prctl and method == "tracepoint":
        cflags.append("-DPRCTL_EXIT")
    return cflags


def first_compile_flags(cflags: list[str], tp_btf_id: int | None) -> list[str]:
    """The flags of a start's first compile: where tp_btf is to be tried, the raw
    sys_enter hook is compiled out (TP_BTF_ONLY): it costs a quarter of the
    compile time (0.2 of 0.9 s CPU). A refused tp_btf compiles `cflags` again."""
    return cflags + (["-DTP_BTF_ONLY"] if tp_btf_id is not None else [])


def start_flags(model, method: str, filters: Filters | None = None, max_futexes: int | None = None,
                exact_prctl: bool = False, call_sites: bool = False) -> list[str]:
    """The flags of the first compile Program(model, method, ...) makes with these
    arguments (its defaults too): what `cache build` compiles ahead of a start."""
    flags = program_cflags(model, method, filters or Filters(), max_futexes or default_max_futexes(),
                           nr_cpu_ids(), call_sites, exact_prctl)
    return first_compile_flags(flags, sys_enter_btf_id(model) if method == "tracepoint" else None)


def compile_only(method: str, cflags: list[str]):
    """Compile (or find cached) `method`'s text with `cflags` into the program
    cache, loading and attaching nothing; the BPF object, to clean up."""
    _check_can_load(method)
    bcc_environment()
    return _compile(method, cflags, attach=False)


def sys_enter_btf_id(model) -> int | None:
    """BTF id of sys_enter's tp_btf attach point, unless absent or turned off."""
    if os.environ.get("FUTEXTRACE_NO_TP_BTF"):
        return None
    return model.tp_btf_ids.get("sys_enter")


def _check_can_load(method: str) -> None:
    if method not in METHODS:
        raise EnvironmentProblem(f"unknown method {method!r}: use one of {', '.join(METHODS)}")
    preconditions.require_root()


def _compile(method: str, cflags: list[str], attach: bool = True):
    try:
        return compile_program(source_for(method), cflags, header_text(), method, attach)
    except Exception as e:  # BCC raises bare Exceptions for compile/load/attach errors
        raise KernelRefused(f"the kernel refused the {method} programs: {str(e).splitlines()[0]}")


def release_freed_heap() -> None:
    """Hand the heap that clang and LLVM freed after the compile back to the
    kernel: glibc keeps it mapped otherwise, and a tracer that runs for days
    carried it (28 MiB of RSS in `record` on a warm cache: 156 -> 128 MiB,
    benchmarks/footprint.py). Without glibc's malloc_trim, nothing is done."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


class Program:
    """A loaded, attached set of futextrace probes. Use as a context manager."""

    def __init__(self, model, method: str, filters: Filters | None = None,
                 max_futexes: int | None = None, extra_cflags: list[str] | None = None,
                 exact_prctl: bool = False, before_counting=None, contention: bool = True,
                 call_sites: bool = False):
        _check_can_load(method)
        bcc_environment()   # before any compile: BCC reads the header path then
        self.method = method
        # Tracepoint method: hook prctl's exit for exact PR_FUTEX_HASH results
        # (costs every syscall a tracepoint call) instead of inferring them.
        self.exact_prctl = exact_prctl and method == "tracepoint"
        self.filters = filters or Filters()
        self.probes: list[str] = []
        self.fallback_reason: str | None = None   # why the preferred hooks were not used
        self.contention_fallback: str | None = None   # why the lock tracepoints are not tp_btf
        self.contention_fds: list[int] = []            # begin and end programs (run statistics)
        # (attachment fd, program fd) we made ourselves: tp_btf, the fentry method's trampolines,
        # the lock tracepoints; the counting hook's first where it is one of them
        self._tp_btf: list[tuple[int, int]] = []
        self.max_futexes = max_futexes or default_max_futexes()
        self.ncpu_ids = nr_cpu_ids()
        self.futex_cache_slots = futex_cache_slots(self.ncpu_ids)     # per CPU, as compiled in
        self.bucket_cache_slots = bucket_cache_slots(self.ncpu_ids)
        self.call_sites = call_sites      # the user stacks of first lookups and lock waits (bpf/call_sites.h)
        self._bpf = None
        self._cflags = program_cflags(model, method, self.filters, self.max_futexes, self.ncpu_ids,
                                      call_sites, self.exact_prctl, extra_cflags)
        self._tp_btf_id = sys_enter_btf_id(model) if method == "tracepoint" else None
        self.timings: dict[str, float] = {}     # seconds: compile (BCC, maps), attach (load, attach)
        # CLOCK_MONOTONIC ns just before and just after the hook that counts
        # lookups was attached (counting began in between) and detached
        # (stop_counting): the recording's window is exactly the counted one.
        self.counting_from: tuple[int, int] | None = None
        self.counting_until: tuple[int, int] | None = None
        self._hot_kprobe: bytes | None = None    # kprobe method: the counting probe's BCC event
        # Called with the BPF object once its maps are filled, right before the
        # counting hook attaches (again after a recompile): a filter filled from
        # user space (--comm's tgids) is complete when counting starts.
        self._before_counting = before_counting
        self._prepared = None
        self._load_and_attach(model, contention)

    def _load_and_attach(self, model, contention: bool) -> None:
        """Compile (or replay) the programs, fill the filters, attach the
        method's hooks (the counting one last) and the lock tracepoints."""
        t0 = time.monotonic()
        self._bpf = _compile(self.method, first_compile_flags(self._cflags, self._tp_btf_id))
        atexit.register(self.close)
        t1 = time.monotonic()
        t1_ns = time.monotonic_ns()
        early = self._tp_btf_programs(model, contention)
        tpbtf.prefetch(self._bpf, early)
        self._fill_filters()
        self.probes = self._attach_method(model)
        if self.counting_from is None:   # no stamp around the one hook: the whole attach phase
            self.counting_from = (t1_ns, time.monotonic_ns())
        self.contention = self._attach_contention(model) if contention else "not asked for"
        if self._bpf.cache_entry_name:    # the next start of this command shape loads them before its imports
            earlyprograms.remember(earlymaps.hint_keys(), self._bpf.cache_entry_name, early)
        self.timings = {"compile": round(t1 - t0, 3), "attach": round(time.monotonic() - t1, 3)}
        release_freed_heap()

    def _tp_btf_programs(self, model, contention: bool) -> list[tuple[str, int]]:
        """The tp_btf programs this start will load, to verify them at once
        (tpbtf.prefetch): the tracepoint method's sys_enter and the waitv
        chunk it tail-calls, and the lock tracepoints."""
        mine = []
        if self.method == "tracepoint" and self._tp_btf_id is not None:
            mine = [("ft_btf_sys_enter", self._tp_btf_id), ("ft_btf_waitv_chunk", self._tp_btf_id)]
        return mine + (lockwaits.tp_btf_programs(model) if contention else [])

    def _attach_method(self, model) -> list[str]:
        """The method's hooks; the probes attached, as listed in the recording."""
        task_probes = task_event_probes(self._cflags)
        if self.method == "tracepoint":
            return self._attach_syscall_hooks() + task_probes
        if self.method == "fentry":
            try:
                self._prepare()   # --comm's tgids in the filter before the counting fexit attaches
                links, probes = fentry.attach(self._bpf, model, task_probes)
            except Exception:
                self.close()
                raise
            self._tp_btf.extend(links)
            return probes
        return self._attach_kprobes(model, self.method, task_probes)

    def _attach_kprobes(self, model, method: str, task_probes: list[str]) -> list[str]:
        """The kprobe method's probes, futex_hash's return (where lookups are
        counted) last and timed (counting_from)."""
        stamps: dict = {}
        try:
            self._prepare()
            probes = attach_kprobes(self._bpf, model, method, stamps, task_probes)
        except Exception:
            self.close()
            raise
        self.counting_from, self._hot_kprobe = stamps.get("counting"), stamps.get("event")
        return probes

    def _attach_syscall_hooks(self) -> list[str]:
        """sys_enter as a BTF tracepoint where the kernel takes it (plain loads
        of the syscall's registers: the cheap path), else as a raw tracepoint;
        with exact_prctl, prctl's own exit tracepoint for PR_FUTEX_HASH results.
        Everything is loaded (the tail-called program's verification takes up
        to a second) before sys_enter, the hook that counts, is attached, last
        and timed (counting_from)."""
        prog = None
        if self._tp_btf_id is not None:
            try:
                prog = tpbtf.load(self._bpf, "ft_btf_sys_enter", self._tp_btf_id)
            except KernelRefused as e:
                return self._fall_back_to_raw(e)
        try:
            if prog is None:
                self._bpf.load_func(b"ft_raw_sys_enter", BPF_PROG_TYPE_RAW_TRACEPOINT)
            # futex_waitv entries beyond one program's verifier budget: a tail call.
            tpbtf.fill_tail_call(self._bpf, "waitv_progs", "ft_btf_waitv_chunk", "ft_raw_waitv_chunk",
                                 self._tp_btf_id if prog is not None else None)
            probes = []
            if self.exact_prctl:
                self._bpf.attach_tracepoint(tp=b"syscalls:sys_exit_prctl", fn_name=b"ft_tp_sys_exit_prctl")
                probes.append("tracepoint:syscalls:sys_exit_prctl")
            self._prepare()
            t0 = time.monotonic_ns()
            if prog is None:
                self._bpf.attach_raw_tracepoint(tp=b"sys_enter", fn_name=b"ft_raw_sys_enter")
            else:
                try:
                    self._tp_btf.append((tpbtf.attach_loaded(prog, "ft_btf_sys_enter"), prog))
                except KernelRefused as e:
                    os.close(prog)
                    return self._fall_back_to_raw(e)
            self.counting_from = (t0, time.monotonic_ns())
            return ["tp_btf:sys_enter" if prog is not None else "raw_tracepoint:sys_enter"] + probes
        except Exception as e:  # BCC raises bare Exceptions
            self.close()
            raise KernelRefused(f"the kernel refused the syscall tracepoints: {str(e).splitlines()[0]}")

    def _prepare(self) -> None:
        if self._before_counting is not None and self._prepared is not self._bpf:
            self._before_counting(self._bpf)
            self._prepared = self._bpf

    def _fall_back_to_raw(self, why: KernelRefused) -> list[str]:
        """The kernel refused tp_btf: the raw sys_enter hook instead (recompiled)."""
        self.fallback_reason = str(why)
        self._tp_btf_id = None
        self._recompile_with_raw_hook()
        return self._attach_syscall_hooks()

    def _attach_contention(self, model) -> str:
        """lock:contention_begin/end for bucket-lock waits (loading/lockwaits.py);
        where they cannot be attached the recording goes on without them.
        Returns how they are attached, or why not."""
        why_not = lockwaits.supported(model)
        if why_not:
            return why_not
        try:
            probes, self.contention_fallback, self.contention_fds = lockwaits.attach(
                self._bpf, model, self._tp_btf)
        except KernelRefused as e:
            return str(e)
        self.probes += probes
        return "attached"

    def _recompile_with_raw_hook(self) -> None:
        """The kernel refused tp_btf, and the first compile left the raw hook
        out: compile again with it (new maps, so the filters again)."""
        tpbtf.drop_prefetched(self._bpf)
        self._bpf.cleanup()
        self._bpf = None
        self._bpf = _compile(self.method, self._cflags)
        self._fill_filters()

    def detach_counting_hook(self) -> bool:
        """Detach the hook that counts lookups where it is a BPF link (the
        tp_btf sys_enter, fentry's fexit), its program kept loaded and every
        map and count kept. False where it is not one, or is detached already."""
        if not (self._counting_link_first() and self._tp_btf[0][0] >= 0):
            return False
        link, prog = self._tp_btf[0]
        os.close(link)
        self._tp_btf[0] = (-1, prog)
        return True

    def reattach_counting_hook(self) -> None:
        """Attach the tracepoint method's tp_btf sys_enter hook again after
        detach_counting_hook(), with no compile or load in between (what
        benchmarks/futexset.py alternates untraced and traced runs with)."""
        link, prog = self._tp_btf[0] if self._counting_link_first() else (0, -1)
        if self.method != "tracepoint" or link >= 0:
            raise EnvironmentProblem("only a detached tp_btf sys_enter hook can be attached again")
        self._tp_btf[0] = (tpbtf.attach_loaded(prog, "ft_btf_sys_enter"), prog)

    def _counting_link_first(self) -> bool:
        """Whether _tp_btf[0] is the hook that counts lookups: fentry's fexit on
        futex_hash, or the tp_btf sys_enter (not the raw one it falls back to)."""
        return bool(self._tp_btf) and (self.method == "fentry"
                                       or (self.method == "tracepoint" and self._tp_btf_id is not None))

    def _close_links(self):
        while self._tp_btf:
            for fd in self._tp_btf.pop():
                if fd >= 0:
                    os.close(fd)

    def stop_counting(self) -> tuple[int, int]:
        """Detach every hook, the one that counts lookups first, and keep the
        maps and the program fds (their run statistics) for the final read:
        counts no longer move while they are read. Returns CLOCK_MONOTONIC ns
        just before and after the counting hook went (also `counting_until`)."""
        if self.counting_until is not None or self._bpf is None:
            return self.counting_until or (0, 0)
        b = self._bpf
        t0 = time.monotonic_ns()
        # The counting hook: tp_btf sys_enter or fentry's fexit come first in _tp_btf
        # (the lock tracepoints are appended after them); the kprobe method's is a kretprobe.
        if not self.detach_counting_hook():
            if b"sys_enter" in b.raw_tracepoint_fds:
                b.detach_raw_tracepoint(b"sys_enter")
            elif self._hot_kprobe in b.kprobe_fds:
                b.detach_kprobe_event(self._hot_kprobe)
        self.counting_until = (t0, time.monotonic_ns())
        for i, (link, prog) in enumerate(self._tp_btf):
            if link >= 0:
                os.close(link)
                self._tp_btf[i] = (-1, prog)
        for ev in list(b.kprobe_fds):
            b.detach_kprobe_event(ev)
        for tp in list(b.tracepoint_fds):
            b.detach_tracepoint(tp)
        for tp in list(b.raw_tracepoint_fds):
            b.detach_raw_tracepoint(tp)
        return self.counting_until

    def missed_runs(self) -> int:
        """Runs of our programs the kernel skipped because one was already
        running on that CPU (bpf_prog_info.recursion_misses): nested BPF, or,
        where syscall tracepoints run preemptibly (lazy/full preemption), a
        preempted run of ours. The lookups of a skipped run are not counted."""
        missed = 0
        for fd in self.program_fds():
            try:
                missed += prog_stats(fd).recursion_misses
            except OSError:
                continue
        return missed

    def program_fds(self) -> list[int]:
        """The fds of every loaded program of ours: BCC's and the tp_btf ones
        loaded here (for their run statistics, bpfsys.prog_stats)."""
        if not self._bpf:
            return []
        return [fn.fd for fn in self._bpf.funcs.values()] + [prog for _, prog in self._tp_btf]

    @property
    def bpf(self):
        return self._bpf

    def _fill_filters(self):
        import ctypes as ct
        f = self.filters
        one = ct.c_uint8(1)
        for table, keys in (("tgid_filter", f.pids), ("tid_filter", f.tids),
                            ("cgroup_filter", f.cgroup_ids)):
            if keys:
                t = self._bpf[table]
                for k in keys:
                    t[t.Key(k)] = one
        if f.comms or (f.tgid_map and f.exec_comms):
            t = self._bpf["comm_filter"]
            for c in f.comms or f.exec_comms:
                key = t.Key()
                key.comm = c.encode()[:15]
                t[key] = one

    def close(self):
        self._close_links()
        if self._bpf is not None:
            try:
                tpbtf.drop_prefetched(self._bpf)
                self._bpf.cleanup()
            finally:
                self._bpf = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
