"""Why a process's futex hash has the bucket count it has (`futextrace explain`),
as data: each step's reason and the facts its sentence needs (under "facts",
which output/text/explain_text.py words and drops).

Everything here is computed from a recording: its resize timeline, its thread
history and the kernel model it carries (online CPUs, global hash size, the
clone rule learned by watching a real clone). Facts: kernel/futex/core.c
futex_hash_allocate_default() and futex_hash_allocate(), kernel/fork.c
need_futex_hash_allocate_default().
"""
from __future__ import annotations

import errno

from futextrace.analysis import lockwaits, whatif
from futextrace.analysis.atomic import process_cost
from futextrace.analysis.steps import PrctlReason, Step
from futextrace.kernel.constants import CLONE_THREAD, CLONE_VFORK, CLONE_VM
from futextrace.kernel.sizing import auto_buckets, next_automatic, threads_before_clone
from futextrace.recording import Recording

# prctl results as the kernel returns them (negative errno).
EINVAL, EBUSY, ENOMEM = -errno.EINVAL, -errno.EBUSY, -errno.ENOMEM
# The clone rules the kernel model can learn live (a real clone watched),
# never named by version: the rule change was backported to 6.18.y and 7.0.y.
CLONE_RULES = ("thread+vm", "vm-not-vfork", "vm")
# Figures that mean nothing for a handful of lookups (explain and the summary):
# max/mean and CV need at least one lookup per bucket on average, histograms a
# few dozen values.
MIN_HIST_LOOKUPS = 32


def clone_kind(flags: int | None) -> str | None:
    """thread, vfork, vm (a CLONE_VM child) or fork; None: flags unknown."""
    if flags is None:
        return None
    if flags & CLONE_THREAD:
        return "thread"
    if flags & CLONE_VFORK:
        return "vfork"
    if flags & CLONE_VM:
        return "vm"
    return "fork"


def triggers(rule: str | None, flags: int | None) -> bool | None:
    """Does this clone call futex_hash_allocate_default() under `rule`? None: unknown."""
    if flags is None or rule not in CLONE_RULES:
        return None
    if rule == "thread+vm":
        return flags & (CLONE_THREAD | CLONE_VM) == (CLONE_THREAD | CLONE_VM)
    if rule == "vm":
        return bool(flags & CLONE_VM)
    return flags & (CLONE_VM | CLONE_VFORK) == CLONE_VM


class _State:
    def __init__(self):
        self.buckets: int | None = None
        self.custom = False
        self.global_chosen = False
        self.set_by = None   # the prctl step that made it custom/global
        self.pending = None  # buckets of a replacement waiting for its pivot

    def start_from(self, state: dict) -> None:
        """The hash read at attach (hash_at_attach)."""
        self.buckets = state["buckets"] or 0
        self.custom = state["mode"] == "custom"
        self.global_chosen = state["kind"] == "global" and self.custom
        self.pending = (state.get("pending") or {}).get("buckets")


def size_limit(st: "_State", k: dict) -> dict | None:
    """For an automatic hash: what the formula allows on this machine, and at which
    thread and CPU count the next size would come (on 2 CPUs: 16 whatever the threads).
    case: ceiling (the global size: only prctl grows it), sized_with_more_cpus,
    cpu_bound (this machine's CPUs stop it) or threads (more threads would do)."""
    n, online, gsize = st.buckets, k["online_cpus"], k["global_size"]
    if not n or st.custom or not (online and gsize):
        return None
    nxt = next_automatic(n, online, gsize)
    if nxt is None:
        case = "ceiling"
    elif n > nxt["ceiling_here"]:
        case = "sized_with_more_cpus"
    elif nxt["needs"] > online:
        case = "cpu_bound"
    else:
        case = "threads"
    return {"case": case, "buckets": n, "online_cpus": online, "next": nxt}


def _threads_before(th: dict) -> int:
    return threads_before_clone(th["nr_threads"], th["clone_flags"])


def _clone_resize(r: dict, th: dict | None, st: _State, k: dict) -> Step:
    flags = r.get("clone_flags")
    if flags is None and th is not None:
        flags = th["clone_flags"]
    f = None
    if r.get("threads") is not None and k["online_cpus"] and k["global_size"]:
        f = auto_buckets(r["threads"], k["online_cpus"], k["global_size"])
    waiting = r.get("pivot_t") is None
    return {"t": r["t"], "kind": "resize", "trigger": "clone", "tid": th["tid"] if th else None,
            "clone_flags": flags, "formula": f, "buckets_before": r["old_buckets"],
            "buckets_after": r["old_buckets"] if waiting else r["new_buckets"],
            "pending_buckets": r["new_buckets"] if waiting else None, "pending_s": r.get("pending_s"),
            "pivot_t": r.get("pivot_t"), "reason": "resized",
            "facts": {"threads": r["threads"], "new_buckets": r["new_buckets"],
                      "formula_differs": bool(f and r["new_buckets"] != f["buckets"]),
                      "against_rule": triggers(k["rule"], flags) is False}}


def _no_resize(th: dict, st: _State, k: dict) -> Step:
    flags = th["clone_flags"]
    n = _threads_before(th)
    f = auto_buckets(n, k["online_cpus"], k["global_size"]) if k["online_cpus"] and k["global_size"] else None
    trig = triggers(k["rule"], flags)
    if trig is False:
        reason, f = "flags_do_not_trigger", None
    elif st.global_chosen:
        reason, f = "global_chosen", None   # formula runs, but futex_hash_allocate() returns 0 first
    elif st.custom:
        reason, f = "custom", None          # returns before the formula
    elif f and st.buckets is not None and f["buckets"] <= st.buckets:
        reason = "big_enough"
    elif f and st.buckets is None:
        reason = "unknown_size"
    else:
        reason = "unexplained"              # events lost, or the clone failed with -ENOMEM
    return {"t": th["t"], "kind": "no_resize", "trigger": "clone", "tid": th["tid"], "clone_flags": flags,
            "formula": f, "buckets_before": st.buckets, "buckets_after": st.buckets, "pending_s": None,
            "pivot_t": None, "reason": reason, "threads": n}


PRCTL_REASONS: dict[int | None, PrctlReason] = {0: "custom_set", EINVAL: "einval", EBUSY: "ebusy",
                                                ENOMEM: "enomem", None: "unresolved"}


def _prctl(r: dict, st: _State) -> Step:
    n, ret = r["requested"], r["result"]
    after = r["new_buckets"]
    reason = "global_set" if ret == 0 and n == 0 else PRCTL_REASONS.get(ret, "other")
    if ret != 0:
        # A refused request changes nothing: the size is what the tracer read
        # when the request was made (even before any other sight of the hash).
        after = r["old_buckets"] if r["old_buckets"] is not None else st.buckets
    return {"t": r["t"], "kind": "prctl", "trigger": "prctl", "tid": None, "requested": n, "result": ret,
            "clone_flags": None, "formula": None, "buckets_before": r["old_buckets"],
            "buckets_after": after, "pending_s": r.get("pending_s"), "pivot_t": r.get("pivot_t"),
            "reason": reason, "facts": {"new_buckets": r["new_buckets"], "bad_size": n == 1 or bool(n & (n - 1)),
                                        "result_inferred": bool(r.get("result_inferred"))}}


def _apply(st: _State, step: dict) -> None:
    if step["kind"] == "prctl" and step["result"] == 0:
        st.custom = True
        st.global_chosen = step["requested"] == 0
    if step["buckets_after"] is not None:
        st.buckets = step["buckets_after"]
    if step["kind"] in ("resize", "prctl") and (step["kind"] == "resize" or step["result"] == 0):
        st.pending = step.get("pending_buckets")


def _kernel_inputs(rec: Recording) -> dict:
    kern = rec.get("kernel", {})
    return {"online_cpus": len(kern.get("online_cpus", [])) or None,
            "global_size": kern.get("global_hash", {}).get("buckets_per_node"),
            "rule": kern.get("clone_rule")}


def _items(pid: int, rec: Recording) -> list[tuple]:
    """(t, order, what, resize/state, thread) for one process, in time order."""
    resizes = [r for r in rec.get("resizes", []) if r["pid"] == pid]
    news = [t for t in rec.get("threads", []) if t["pid"] == pid and t["event"] == "new"]
    states = [s for s in rec.get("hash_states", []) if s["pid"] == pid]
    # A clone resize is stamped with its NEWTASK event's time: pair them up.
    by_t = {(t["t"], t["clone_flags"]): t for t in news}
    paired = set()
    items = []
    for r in resizes:
        th = by_t.get((r["t"], r["clone_flags"])) if r["trigger"] == "clone" else None
        if th is None and r["trigger"] == "clone" and r["clone_flags"] is None:
            # kprobe method: futex_hash_allocate() runs inside copy_process(),
            # just before the new task's task_newtask event from the same parent.
            th = next((t for t in news if t["t"] >= r["t"] and id(t) not in paired), None)
        if th:
            paired.add(id(th))
        items.append((r["t"], 1, "resize", r, th))
    items += [(t["t"], 1, "thread", None, t) for t in news if id(t) not in paired]
    items += [(s["t"], 0, "state", s, None) for s in states]
    return sorted(items, key=lambda i: (i[0], i[1]))


def _first_seen(r: dict, st: _State) -> Step:
    st.buckets, st.custom = r["buckets"], r["custom"]
    st.global_chosen = r["custom"] and r["buckets"] == 0
    return {"t": r["t"], "kind": "first_seen", "tid": None, "reason": "first_seen",
            "buckets_before": None, "buckets_after": r["buckets"], "formula": None,
            "facts": {"custom": r["custom"], "global_chosen": st.global_chosen}}


def _pending_took_over(r: dict, st: _State) -> Step:
    """The replacement waiting at attach is seen in use."""
    step = {"t": r["t"], "kind": "pivot", "tid": None, "reason": "pending_took_over",
            "buckets_before": st.buckets, "buckets_after": r["buckets"], "formula": None, "facts": {}}
    st.buckets, st.pending = r["buckets"], None
    return step


def _at_attach(state: dict, st: _State, k: dict) -> Step:
    st.start_from(state)
    return {"t": 0.0, "kind": "at_attach", "tid": None, "reason": "at_attach", "buckets_before": None,
            "buckets_after": st.buckets, "pending_buckets": st.pending, "formula": None,
            "facts": {"state": state}}


def explain_process(pid: int, rec: Recording) -> dict:
    k = _kernel_inputs(rec)
    st = _State()
    steps = []
    state = (rec.get("hash_at_attach") or {}).get("processes", {}).get(str(pid))
    if state:
        steps.append(_at_attach(state, st, k))
    for _, _, what, r, th in _items(pid, rec):
        if what == "state":
            # Only the first sight matters: later changes are pivots of resizes above.
            if st.buckets is None:
                steps.append(_first_seen(r, st))
            elif st.pending and r["buckets"] == st.pending:
                steps.append(_pending_took_over(r, st))
            continue
        if what == "resize" and r["trigger"] == "prctl":
            step = _prctl(r, st)
        elif what == "resize":
            step = _clone_resize(r, th, st, k)
        else:
            step = _no_resize(th, st, k)
        steps.append(step)
        _apply(st, step)
    comm = (state or {}).get("comm") or next(
        (x["comm"] for x in rec.get("resizes", []) + rec.get("hash_states", []) if x["pid"] == pid
         and x.get("comm")), "")
    cost = process_cost(pid, rec)
    return {"pid": pid, "comm": comm, "steps": steps, "lines": group_steps(steps),
            "final": {"buckets": st.buckets, "custom": st.custom, "global_chosen": st.global_chosen,
                      "private": bool(st.buckets), "pending_buckets": st.pending,
                      "facts": {"size_limit": size_limit(st, k)}},
            "cost": cost, "recommendation": with_avoided_cost(recommend(pid, rec, st), cost, st)}


def with_avoided_cost(r: dict | None, cost: dict, st: _State) -> dict | None:
    """The recommendation, quoting the atomic refcount time the resizes cost
    (automatic ones, or a prctl made once threads ran): a size set before any
    thread exists is installed at once, with nothing to drain."""
    a = cost["atomic"]
    if r is None or not a["total_s"] or st.global_chosen or not (r["slots"] or st.buckets):
        return r
    r["avoided_atomic_s"] = a["total_s"]
    return r


def _same_run(a: dict, b: dict) -> bool:
    """Consecutive steps told as one line: threads created with the same outcome."""
    return (a["kind"] == b["kind"] == "no_resize" and a["reason"] == b["reason"]
            and a["buckets_before"] == b["buckets_before"] and clone_kind(a["clone_flags"]) ==
            clone_kind(b["clone_flags"]))


def group_steps(steps: list[dict]) -> list[dict]:
    """Runs of consecutive steps with the same outcome as one line each
    (`first`/`count` index `steps`, which keeps every event)."""
    lines, i = [], 0
    while i < len(steps):
        j = i + 1
        while j < len(steps) and _same_run(steps[i], steps[j]):
            j += 1
        run = steps[i:j]
        lines.append({"first": i, "count": len(run), "t_first": run[0]["t"], "t_last": run[-1]["t"]})
        i = j
    return lines


def _hash_stats(pid: int, rec: Recording) -> dict | None:
    proc = next((p for p in rec.get("processes", []) if p["pid"] == pid), None)
    if not proc:
        return None
    private = [h for h in proc["hashes"] if h["kind"] == "private"]
    return (private or proc["hashes"] or [None])[0]


def expected_collisions(futexes: int, buckets: int) -> float:
    """Expected futexes minus used buckets (the recording's `collisions`), for
    `futexes` keys hashed uniformly into `buckets`."""
    if buckets <= 0 or futexes <= 0:
        return 0.0
    empty = buckets * (1 - 1 / buckets) ** futexes
    return futexes - (buckets - empty)


def _whatif(pid: int, rec: Recording) -> dict | None:
    proc = next((p for p in rec.get("processes", []) if p["pid"] == pid), None)
    if not proc or not proc.get("futex_list"):
        return None
    # Futexes counted per bucket by the first-seen filter, beyond the bounded
    # per-futex list (recordings before the filter: the lookups it missed).
    details = [h.get("futex_detail") or {} for h in proc.get("hashes", [])]
    unlisted = sum(d.get("futexes_unlisted", 0) for d in details)
    missed = sum(d.get("lookups_missed", 0) for d in details)
    unattributed = (rec.get("totals") or {}).get("unattributed_causes", {}).get("map_full")
    return whatif.table(proc["futex_list"], rec.get("kernel", {}).get("futex_hash_bucket_size"),
                        {"futexes_unlisted": unlisted, "lookups_missed": missed, "unattributed": unattributed})


def _advice(pid: int, rec: Recording, st: _State, cur: int) -> dict:
    """{verdict, slots, ...}: from the bucket-lock waits the recording measured
    (analysis/lockwaits.py), never from the lookup spread alone; verdict
    global_chosen or not_measured before any wait is read."""
    if st.global_chosen:
        return {"verdict": "global_chosen", "slots": None}
    if not lockwaits.measured(rec):
        return {"verdict": "not_measured", "slots": None}
    return lockwaits.advice(pid, rec, cur or st.buckets or 0)   # lookups only on the global hash: the final hash


COLLIDING_BUCKETS = 3   # buckets whose sharing futexes explain lists


def colliding(pid: int, rec: Recording, adv: dict) -> list[dict]:
    """The futexes that share a bucket, busiest first: those that waited in a
    collision bucket's lock where the waits say so (`source` lock_waits), else
    those of the hottest private-hash buckets with more than one futex
    (`source` lookups). Each {bucket, buckets, futexes, addresses, source}."""
    if adv.get("verdict") in ("collision", "no_separating_size"):
        proc = next((p for p in (rec.get("contention") or {}).get("processes", []) if p["pid"] == pid), {})
        hit = [b for b in proc.get("buckets", []) if b["cause"] == "collision"]
        return [{"bucket": b["bucket"], "buckets": b["buckets"], "futexes": len(b["futexes"]),
                 "addresses": [f["uaddr"] for f in b["futexes"] if f["uaddr"]], "source": "lock_waits"}
                for b in hit[:COLLIDING_BUCKETS]]
    h = _hash_stats(pid, rec) or {}
    if h.get("kind") != "private":
        return []
    return [{"bucket": b["bucket"], "buckets": h["buckets"], "futexes": b["futexes"],
             "addresses": list(b["addresses"]), "source": "lookups"}
            for b in h.get("hottest", []) if b["futexes"] > 1][:COLLIDING_BUCKETS]


def _shared_share(pid: int, rec: Recording) -> float:
    proc = next((p for p in rec.get("processes", []) if p["pid"] == pid), {})
    shared = sum(h["lookups"] for h in proc.get("hashes", []) if h["kind"] == "global_shared")
    return shared / proc["lookups"] if proc.get("lookups") else 0.0


def no_table_reason(pid: int, rec: Recording) -> str:
    """Why there is no what-if table: no_list (an older recording), all_shared
    (only shared futexes) or list_full (none of its private futexes listed)."""
    proc = next((p for p in rec.get("processes", []) if p["pid"] == pid), {})
    if "futex_list" not in proc:
        return "no_list"
    if proc.get("hashes") and all(h["kind"] == "global_shared" for h in proc["hashes"]):
        return "all_shared"
    return "list_full"


def recommend(pid: int, rec: Recording, st: _State) -> dict | None:
    """A SET_SLOTS value from the what-if table (analysis/whatif.py): the smallest
    size where no hot futex shares a bucket, with its memory cost."""
    h = _hash_stats(pid, rec)
    table = _whatif(pid, rec)
    if (not h or not h.get("distinct_futexes")) and not table:
        return None
    h = h or {}
    d = h.get("distinct_futexes", 0)
    cur = h.get("buckets", 0) if h.get("kind") == "private" else 0   # 0: on the global hash
    rc = rec.get("refcount", {})
    gets = (rc.get("get_percpu") or 0) + (rc.get("get_atomic") or 0)
    atomic_share = (rc.get("get_atomic") or 0) / gets if gets else 0.0
    imb = (h.get("imbalance") or {}).get("max_over_mean")
    if h.get("lookups", 0) < max(h.get("buckets") or 0, MIN_HIST_LOOKUPS):
        imb = None   # a handful of lookups: max/mean means nothing (as in the summary)
    adv = _advice(pid, rec, st, cur)
    no_table = no_table_reason(pid, rec) if not table and not st.global_chosen else None
    return {"slots": adv["slots"], "distinct_futexes": d, "current_buckets": cur,
            "collisions": h.get("collisions"), "max_over_mean": imb, "atomic_share": atomic_share,
            "expected_collisions_now": expected_collisions(d, cur) if cur else None,
            "whatif": table, "colliding": colliding(pid, rec, adv),
            "facts": {"collisions_known": "collisions" in h,
                      "atomic_inferred": str(rc.get("source", "")).startswith("inferred"),
                      "advice": adv, "no_table": no_table,
                      "shared_share": _shared_share(pid, rec) if no_table is None else 0.0}}


def explain(rec: Recording) -> dict:
    """One explanation per process that had a hash event or a thread created,
    and per traced target (an idle one included)."""
    at_attach = rec.get("hash_at_attach") or {}
    pids = ({r["pid"] for r in rec.get("resizes", [])}
            | {t["pid"] for t in rec.get("threads", []) if t["event"] == "new"}
            | {s["pid"] for s in rec.get("hash_states", [])} | set(at_attach.get("targets", [])))
    main = (rec.get("command") or {}).get("pid")
    order = sorted(pids, key=lambda p: (p != main, p))
    kern = rec.get("kernel", {})
    return {"clone_rule": kern.get("clone_rule"), "online_cpus": len(kern.get("online_cpus", [])),
            "global_size": kern.get("global_hash", {}).get("buckets_per_node"),
            "hash_at_attach": {k: at_attach.get(k) for k in ("source", "note")},
            "processes": [explain_process(p, rec) for p in order]}
