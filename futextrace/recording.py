"""The recording's structure (`futextrace-recording`, docs/json-schema.md), once.

The one definition that the code building a recording (record/aggregate.py,
record/recorder.py), the JSON writer and reader (output/jsonio.py) and the
renderers (output/, export/reading.py) share. A recording stays a plain dict
(it is JSON): these TypedDicts only name its keys and their types, so a key
read or written anywhere is declared here (tests/unit/test_recording_types.py
walks the recorded fixtures against them).

`total=False` where a key is optional: added in a later version of schema 1
(absent in older recordings), present only in some cases (`command`, `error`),
or kept from older recordings (`lookups_missed`, estimate bounds). Keys that are
Python keywords (`global`) use TypedDict's functional form. Keys whose
names are data (bucket numbers, PIDs, CPU numbers) are `dict[str, …]`.

Imports nothing from futextrace, so every layer may import it.
"""
from __future__ import annotations

from typing import Optional, TypedDict

SCHEMA = "futextrace-recording"
SCHEMA_VERSION = 1     # raised when a field is removed, renamed or changes meaning (docs/json-schema.md)
# A `global_shared` HashSummary's `note`: shown (text) and given as the reason beside
# null (JSON) wherever a figure needs the bucket of a shared futex, which is not
# recorded (bucket UNKNOWN). record/ writes it, output/text/ shows it.
BUCKET_NOT_VISIBLE = "n/a (shared futexes: bucket not visible with this method)"


# --- method and kernel -------------------------------------------------------

class Method(TypedDict, total=False):
    name: str                      # "tracepoint", "kprobe"
    why: str
    blind_spots: list[str]
    probes: list[str]
    probes_fallback: Optional[str]
    refcount_probes: list[str]
    prctl_results: str             # "exit", "inferred"
    comm_filter: str


class GlobalHash(TypedDict, total=False):
    buckets_per_node: int
    shift: int
    nodes: int
    source: str


class Kernel(TypedDict, total=False):
    release: str
    online_cpus: list[int]
    cpu_node: dict[str, int]       # "cpu" -> node
    nodes: list[int]
    global_hash: GlobalHash
    clone_rule: Optional[str]
    hash_returns: Optional[str]
    futex_hash_bucket_size: Optional[int]
    mm_layout: Optional[str]
    model_cached: bool


# --- totals ------------------------------------------------------------------

class UnattributedCauses(TypedDict):
    map_full: int
    user_memory_unreadable: int


class SeenFilter(TypedDict, total=False):
    words: int
    bits_per_key: int
    words_per_key: int             # absent in recordings made with one word per key
    false_positive_rate: float
    method: str


class FutexList(TypedDict, total=False):
    """totals.futex_list: the bounded per-futex list against the exact counts."""
    capacity: Optional[int]
    full: bool
    complete: bool
    futexes_listed: int
    futexes_unlisted: int
    lookups_listed: int
    lookups_missed: int            # recordings made before the first-seen filter
    seen_filter: SeenFilter


Totals = TypedDict("Totals", {
    "lookups": int, "lookups_per_s": float, "private": int, "global": int,
    "unattributed": int, "unattributed_causes": UnattributedCauses,
    "mpol_assumed_no_policy": int, "lost_events": int, "read_faults": int,
    "kernel_mismatch": int, "missed_runs": int, "futex_list": FutexList,
    "thread_events_dropped": int,
}, total=False)


# --- processes and their hashes ----------------------------------------------

class Imbalance(TypedDict):
    buckets: int
    used: int
    max: int
    mean: float
    max_over_mean: float
    cv: float


class HistSlot(TypedDict):
    low: int
    high: int
    count: int


class HotBucket(TypedDict):
    bucket: int
    node: Optional[int]            # None: a private hash
    lookups: int
    futexes: int
    addresses: list[str]           # hex


class FutexDetail(TypedDict, total=False):
    complete: bool
    futexes_listed: int
    futexes_unlisted: int
    lookups_listed: int
    lookups_missed: int            # recordings made before the first-seen filter


class Estimate(TypedDict, total=False):
    value: int
    error_pct: float
    method: str
    low: int                       # recordings made before the first-seen filter: bounds
    high: int


class Estimates(TypedDict, total=False):
    distinct_futexes: Estimate
    collisions: Estimate
    note: str


class HashSummary(TypedDict, total=False):
    """One hash a process used. `global_shared` summaries whose buckets are not
    visible have only kind, buckets, lookups, distinct_futexes, futex_detail, note."""
    kind: str                      # private, global, global_numa, global_shared
    buckets: int
    lookups: int
    distinct_futexes: int
    imbalance: Imbalance
    lookups_per_bucket_hist: list[HistSlot]
    futexes_per_bucket_hist: list[HistSlot]
    collisions: int
    kernel_checked: int
    futex_detail: FutexDetail
    hottest: list[HotBucket]
    bucket_counts: dict[str, int]  # "bucket" or "node:bucket" -> lookups
    estimates: Estimates
    note: str


class ListedFutex(TypedDict):
    uaddr: str                     # hex
    lookups: int


class ProcessFutexList(TypedDict):
    """processes[].futex_list: the process's private-key futexes, for the what-if table."""
    listed: list[ListedFutex]
    not_listed: int
    not_listed_lookups: int


class Frame(TypedDict):
    """One frame of a call site's user stack (futextrace/naming/callsites.py)."""
    ip: str                        # hex
    function: Optional[str]        # the function symbol covering ip; None: see why_unknown
    offset: Optional[int]          # ip - the function's start
    mapping: Optional[str]         # the file (or [anon], ...) holding ip
    trusted: bool                  # reached through frame pointers every function before it keeps
    why_unknown: Optional[str]


class CallSite(TypedDict, total=False):
    """A user stack taken at a futex's first lookup or at a bucket-lock wait."""
    frames: list[Frame]            # frame 0: the user ip at the futex syscall
    trusted_frames: int            # the leading frames to trust
    ends: str                      # why the trustworthy part stops there
    count: int                     # lock waits: how many of the stacks taken were this one


class CallSites(TypedDict):
    """futex_names[].call_sites (record and explain take them; --no-call-sites: absent)."""
    first_lookup: Optional[CallSite]   # None: not taken (budget spent, before the run, or a repeat)
    lock_waits: list[CallSite]         # distinct stacks of its first waits per CPU, most first


class CallSiteBudget(TypedDict):
    """The recording's call_sites: how many stacks the program took, and did not."""
    stacks: int                    # stored (first lookups and lock waits, all processes)
    over_budget: int               # not taken: the CPU had taken per_cpu_budget already
    lost: int                      # not stored: no user stack to walk, or the map full
    per_cpu_budget: int


class FutexName(TypedDict, total=False):
    """processes[].futex_names[hex address]: what the futex is (futextrace/naming/)."""
    mapping: Optional[str]         # the file's path, "[heap]", "[stack]", "[anon]", "[anon:NAME]"; None: unmapped
    kind: str                      # file, shared_file, heap, malloc_arena, stack, thread_stack, anon, special, unmapped
    section: Optional[str]         # ".data", ".bss", ... (file only)
    symbol: Optional[str]          # the data symbol covering the address; None: see why_unknown
    offset: Optional[int]          # from the symbol's start, else the section's, else the mapping's
    tid: Optional[int]             # thread_stack: the thread whose stack it is (None: known by layout only)
    why_unknown: Optional[str]     # why no symbol names it; None when one does
    call_sites: CallSites          # where its lookups and waits came from (user stacks)


class Process(TypedDict, total=False):
    pid: int
    comm: str
    lookups: int
    atomic_lookups: int
    hashes: list[HashSummary]
    futex_list: ProcessFutexList
    futex_names: dict[str, FutexName]   # hex address -> its name (recordings from futextrace with naming/)


# --- per CPU, per node, refcount ---------------------------------------------

CpuRow = TypedDict("CpuRow", {
    "cpu": int, "node": int, "lookups": int, "private": int, "global": int, "atomic": int,
    "ref_get_percpu": int, "ref_get_atomic": int, "ref_put_percpu": int, "ref_put_atomic": int,
}, total=False)

NodeRow = TypedDict("NodeRow", {
    "node": int, "cpus": list[int], "lookups": int, "private": int, "global": int, "atomic": int,
}, total=False)


class Refcount(TypedDict):
    source: str
    get_percpu: int
    get_atomic: int
    put_percpu: int
    put_atomic: int


# --- the timeline: resizes, threads, hash states -----------------------------

class Resize(TypedDict, total=False):
    t: float
    pid: int
    comm: str
    trigger: str                   # "clone", "prctl"
    clone_flags: Optional[int]
    threads: int
    online_cpus: Optional[int]
    requested: Optional[int]
    custom: bool
    result: Optional[int]
    result_inferred: Optional[bool]
    old_buckets: int
    new_buckets: int
    pivot_t: Optional[float]
    pending_s: Optional[float]


class ThreadEvent(TypedDict):
    t: float
    pid: int
    tid: int
    event: str                     # "new", "exit"
    clone_flags: int
    nr_threads: int


class HashState(TypedDict):
    t: float
    pid: int
    comm: str
    buckets: int
    custom: bool
    private: bool
    first_seen: bool


# --- the hash at attach ------------------------------------------------------

class PendingHash(TypedDict):
    buckets: int
    custom: bool


class AttachState(TypedDict, total=False):
    pid: int
    comm: str
    threads: int
    buckets: int
    kind: str                      # "private", "global", "none"
    mode: Optional[str]            # "custom", "auto"
    refcount: Optional[str]        # "per-cpu", "atomic"
    pending: Optional[PendingHash]
    launched: bool


class HashAtAttach(TypedDict, total=False):
    source: str                    # "iterator", "unavailable"
    note: str
    complete: bool
    targets: list[int]
    processes: dict[str, AttachState]   # "tgid" -> state
    filter: str


# --- intervals (-i; also the lines of --jsonl) -------------------------------

class IntervalPending(TypedDict):
    buckets: int
    since_t: float


class IntervalProcess(TypedDict, total=False):
    pid: int
    comm: str
    lookups: int
    lookups_per_s: float
    hash: str
    futexes: int
    buckets_touched: Optional[int]
    max_over_mean: Optional[float]
    buckets_unknown: str
    bucket_counts: dict[str, int]
    installed: Optional[str]
    pending: Optional[IntervalPending]


class WaitCauses(TypedDict):
    collision: Optional[float]
    same_futex: Optional[float]
    unknown: Optional[float]


class IntervalWaitProcess(TypedDict):
    pid: int
    comm: str
    wait_ms_per_s: Optional[float]


class IntervalWaitBucket(TypedDict):
    pid: int
    bucket: int
    buckets: int
    waits: int
    wait_ms_per_s: Optional[float]
    cause: str


class IntervalWaits(TypedDict):
    waits: int
    wait_ms_per_s: Optional[float]
    by_cause_ms_per_s: WaitCauses
    processes: list[IntervalWaitProcess]
    top_buckets: list[IntervalWaitBucket]


Interval = TypedDict("Interval", {
    "t": float, "read_s": float, "interval_s": float, "lookups": int, "private": int, "global": int,
    "unattributed": int, "lost_events": int, "missed_runs": int, "resizes": int,
    "resize_events": int,          # recordings before `resizes`
    "processes": list[IntervalProcess], "lock_waits": IntervalWaits,
}, total=False)


# --- resize cost -------------------------------------------------------------

class Installed(TypedDict):
    buckets: int
    custom: bool
    since_t: float


class PendingCost(TypedDict):
    buckets: int
    since_t: float
    for_s: float
    atomic_share: float


class AtomicWindow(TypedDict, total=False):
    t: float
    end_t: float
    s: float
    open: bool
    superseded: bool               # ended by a later pivot, not its own
    old_buckets: int
    new_buckets: Optional[int]


class AtomicTime(TypedDict):
    source: str                    # "measured", "inferred"
    windows: list[AtomicWindow]
    total_s: float
    longest_s: float
    lookups: int
    private_lookups: int
    share: float


class ResizeCost(TypedDict):
    pid: int
    comm: str
    installed: Optional[Installed]
    pending: Optional[PendingCost]
    atomic: AtomicTime


# --- contention --------------------------------------------------------------

class CauseCount(TypedDict):
    waits: int
    wait_ns: int


class ByCause(TypedDict):
    collision: CauseCount
    same_futex: CauseCount
    unknown: CauseCount


class WaitFutex(TypedDict):
    uaddr: Optional[str]           # hex; None: unknown
    waits: int
    wait_ns: int


class WaitBucket(TypedDict):
    bucket: int
    buckets: int
    waits: int
    wait_ns: int
    max_ns: int
    cause: str                     # "collision", "same_futex", "unknown"
    futexes: list[WaitFutex]


class WaitProcess(TypedDict):
    pid: int
    comm: Optional[str]
    waits: int
    wait_ns: int
    wait_ms_per_s: Optional[float]
    by_cause: ByCause
    buckets_waited: int
    buckets: list[WaitBucket]


class Contention(TypedDict, total=False):
    status: str
    window_s: float
    waits: int
    wait_ns: int
    wait_ms_per_s: Optional[float]
    private_lookups: int
    by_cause: ByCause
    waits_lost: int
    processes: list[WaitProcess]
    blind_spots: list[str]


# --- the run: command, window, exit ------------------------------------------

class Command(TypedDict, total=False):
    argv: list[str]
    pid: int
    exit_status: Optional[int]
    stopped_by_futextrace: bool
    stdout_tail: Optional[str]
    futex_hash_set: Optional[dict]   # record --slots: the kernel's answers (futextrace set --json's keys)


class Window(TypedDict, total=False):
    clock: str                     # "CLOCK_MONOTONIC"
    start_ns: list[int]            # [before, after] the attach
    end_ns: list[int]              # [before, after] the detach
    t0_ns: int
    duration_ns: int


class AttachPhases(TypedDict, total=False):
    startup: float
    model: float
    compile: float
    attach: float


class TargetExited(TypedDict):
    pid: int
    t: float
    note: str


# --- the recording -----------------------------------------------------------

class Recording(TypedDict, total=False):
    """The whole recording: what `record --json` writes and `report` reads."""
    schema: str
    schema_version: int
    tool_version: str
    started_at: str
    duration_s: float
    host: str
    method: Method
    kernel: Kernel
    totals: Totals
    processes: list[Process]
    per_cpu: list[CpuRow]
    per_node: list[NodeRow]
    refcount: Refcount
    resizes: list[Resize]
    threads: list[ThreadEvent]
    hash_states: list[HashState]
    intervals: list[Interval]
    hash_at_attach: HashAtAttach
    resize_cost: list[ResizeCost]
    monotonic_start_ns: int
    window: Window
    contention: Contention
    call_sites: CallSiteBudget
    command: Command
    attach_s: float
    attach_phases_s: AttachPhases
    compile_cache: str
    early_maps: int      # maps the command line began creating before its imports (loading/earlymaps.py)
    early_programs: int  # tp_btf programs it began loading there too, taken by this start (loading/earlyprograms.py)
    error: str
    target_exited: TargetExited

