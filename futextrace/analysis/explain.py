"""Why a process's futex hash has the bucket count it has (`futextrace explain`).

Everything here is computed from a recording: its resize timeline, its thread
history and the kernel model it carries (online CPUs, global hash size, the
clone rule learned by watching a real clone). Facts: kernel/futex/core.c
futex_hash_allocate_default() and futex_hash_allocate(), kernel/fork.c
need_futex_hash_allocate_default().
"""
from __future__ import annotations

import errno

from futextrace.analysis import contention, whatif
from futextrace.analysis.atomic import atomic_text, installed_text, process_cost
from futextrace.analysis.history import at_attach_text
from futextrace.kernel.constants import CLONE_THREAD, CLONE_VFORK, CLONE_VM
from futextrace.kernel.sizing import auto_buckets, next_automatic, threads_before_clone
from futextrace.output.render import MIN_HIST_LOOKUPS
from futextrace.output.words import count_noun
from futextrace.record.aggregate import BUCKET_NOT_VISIBLE

# prctl results as the kernel returns them (negative errno).
EINVAL, EBUSY, ENOMEM = -errno.EINVAL, -errno.EBUSY, -errno.ENOMEM
# The clone rule as the kernel model learned it live (a real clone watched),
# never named by version: the rule change was backported to 6.18.y and 7.0.y.
RULES = {
    "thread+vm": "a clone allocates only with CLONE_THREAD|CLONE_VM",
    "vm-not-vfork": "a clone allocates with CLONE_VM, except vfork",
    "vm": "every CLONE_VM clone allocates, vfork included",
}


def clone_kind(flags: int | None) -> str:
    if flags is None:
        return "clone"
    if flags & CLONE_THREAD:
        return "thread"
    if flags & CLONE_VFORK:
        return "vfork child"
    if flags & CLONE_VM:
        return "clone(CLONE_VM) child"
    return "fork child"


def triggers(rule: str | None, flags: int | None) -> bool | None:
    """Does this clone call futex_hash_allocate_default() under `rule`? None: unknown."""
    if flags is None or rule not in RULES:
        return None
    if rule == "thread+vm":
        return flags & (CLONE_THREAD | CLONE_VM) == (CLONE_THREAD | CLONE_VM)
    if rule == "vm":
        return bool(flags & CLONE_VM)
    return flags & (CLONE_VM | CLONE_VFORK) == CLONE_VM


def formula_text(f: dict) -> str:
    """The formula's steps with the real inputs."""
    return (f"min({f['threads']} threads, {f['online_cpus']} online CPUs) = {f['min']}"
            f" → 4 × {f['min']} = {f['times4']} → roundup_pow_of_two = {f['pow2']}"
            f" → clamp(16, global size {f['global_size']}) = {f['buckets']} buckets")


def _ms(s: float) -> str:
    return f"{s * 1000:.2f} ms" if s < 1 else f"{s:.2f} s"


def _desc(buckets: int | None, custom: bool, global_chosen: bool, pending: int | None = None) -> str:
    """The installed hash; a replacement waiting for its pivot beside it, not as current."""
    if buckets is None:
        return "unknown"
    if buckets == 0:
        text = "global (chosen with prctl, for good)" if global_chosen else "global (no private hash yet)"
    else:
        text = f"{buckets} buckets ({'custom' if custom else 'automatic'})"
    return text + (f"; {pending} buckets pending (waiting for the pivot)" if pending else "")


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


def why_size(st: "_State", k: dict) -> str | None:
    """For an automatic hash: what the formula allows on this machine, and at which
    thread and CPU count the next size would come (on 2 CPUs: 16 whatever the threads)."""
    n, online, gsize = st.buckets, k["online_cpus"], k["global_size"]
    if not n or st.custom or not (online and gsize):
        return None
    nxt = next_automatic(n, online, gsize)
    if nxt is None:
        return (f"{n} is the global hash size per node, the formula's ceiling: no automatic resize "
                "makes it bigger (only prctl(SET_SLOTS) can)")
    step = (f"the next size, {nxt['buckets']}, needs min(threads, online CPUs) ≥ {nxt['needs']}: a clone "
            f"made while the process has at least {nxt['needs']} threads")
    if n > nxt["ceiling_here"]:
        return (f"with {online} online CPUs the formula gives at most {nxt['ceiling_here']}: {n} was sized while "
                f"more CPUs were online (the hash never shrinks); {step} and {nxt['needs']} online CPUs")
    if nxt["needs"] > online:
        return (f"with {online} online CPUs the automatic size stops at {nxt['ceiling_here']} whatever the "
                f"thread count (4 × min(threads, {online}) ≤ {4 * online}, rounded up and clamped to at "
                f"least 16); {step} on a machine with at least {nxt['needs']} online CPUs")
    return f"{step} ({online} CPUs are online)"


def _threads_before(th: dict) -> int:
    return threads_before_clone(th["nr_threads"], th["clone_flags"])


def _pending_text(r: dict) -> str:
    if r.get("pivot_t") is None:
        return "still pending when the recording ended (the old hash was still referenced)"
    if not r.get("pending_s"):
        return "installed at once (no old hash to drain)"
    what = "prctl waited" if r["trigger"] == "prctl" else "pending"
    return f"{what} {_ms(r['pending_s'])} before the pivot at +{r['pivot_t']:.3f} s"


def _clone_resize(r: dict, th: dict | None, st: _State, k: dict) -> dict:
    flags = r.get("clone_flags")
    if flags is None and th is not None:
        flags = th["clone_flags"]
    kind = clone_kind(flags)
    f = None
    if r.get("threads") is not None and k["online_cpus"] and k["global_size"]:
        f = auto_buckets(r["threads"], k["online_cpus"], k["global_size"])
    text = f"{kind} created at +{r['t']:.3f} s with {count_noun(r['threads'], 'thread')}"
    text += f" → {formula_text(f)}" if f else " (formula inputs unknown)"
    notes = []
    if f and r["new_buckets"] != f["buckets"]:
        notes.append(f"the kernel gave {r['new_buckets']}, not the formula's {f['buckets']}: "
                     "check the online CPUs and global hash size in the kernel model")
    if triggers(k["rule"], flags) is False:
        notes.append(f"this kernel allocated on a {kind} although its learned rule says it would not "
                     f"({RULES[k['rule']]}); the recording shows it did")
    notes.append(_pending_text(r))
    waiting = r.get("pivot_t") is None
    return {"t": r["t"], "kind": "resize", "trigger": "clone", "tid": th["tid"] if th else None,
            "clone_flags": flags, "formula": f, "buckets_before": r["old_buckets"],
            "buckets_after": r["old_buckets"] if waiting else r["new_buckets"],
            "pending_buckets": r["new_buckets"] if waiting else None, "pending_s": r.get("pending_s"),
            "pivot_t": r.get("pivot_t"), "reason": "resized",
            "text": f"{text}; {r['old_buckets']} → {r['new_buckets']} buckets; " + "; ".join(notes)}


def _no_resize(th: dict, st: _State, k: dict) -> dict:
    flags = th["clone_flags"]
    kind = clone_kind(flags)
    n = _threads_before(th)
    f = auto_buckets(n, k["online_cpus"], k["global_size"]) if k["online_cpus"] and k["global_size"] else None
    head = f"{kind} created at +{th['t']:.3f} s with {count_noun(n, 'thread')} (clone flags {flags:#x}): no resize"
    trig = triggers(k["rule"], flags)
    if trig is False:
        reason = "flags_do_not_trigger"
        why = f"these clone flags do not allocate a hash on this kernel ({RULES[k['rule']]})"
        f = None
    elif st.global_chosen:
        reason, f = "global_chosen", None   # formula runs, but futex_hash_allocate() returns 0 first
        why = "the process chose the global hash (SET_SLOTS 0): an automatic request returns 0"
    elif st.custom:
        reason, f = "custom", None          # returns before the formula
        why = f"custom hash: no automatic resize (its {st.buckets} buckets were set with prctl)"
    elif f and st.buckets is not None and f["buckets"] <= st.buckets:
        reason = "big_enough"
        why = (f"{formula_text(f)}, and the hash already has {st.buckets}: "
               "it only grows, never shrinks")
    elif f and st.buckets is None:
        reason = "unknown_size"
        why = f"{formula_text(f)}; the size before was not seen, so no resize may have been needed"
    else:
        reason = "unexplained"
        why = ((formula_text(f) + " would grow it; ") if f else "") + \
            "no new hash was seen (events lost, or the clone failed with -ENOMEM)"
    return {"t": th["t"], "kind": "no_resize", "trigger": "clone", "tid": th["tid"], "clone_flags": flags,
            "formula": f, "buckets_before": st.buckets, "buckets_after": st.buckets, "pending_s": None,
            "pivot_t": None, "reason": reason, "threads": n, "why": why, "text": f"{head}: {why}"}


def _prctl(r: dict, st: _State) -> dict:
    n, ret = r["requested"], r["result"]
    head = f"prctl(PR_FUTEX_HASH, SET_SLOTS, {n}) at +{r['t']:.3f} s"
    after = r["new_buckets"]
    if ret == 0 and n == 0:
        reason, why = "global_set", ("→ the global hash, for good: later SET_SLOTS requests get -EBUSY "
                                     "and new threads no longer resize")
    elif ret == 0:
        reason, why = "custom_set", (f"→ {r['old_buckets']} → {after} buckets, custom: automatic resizes "
                                     f"stop; {_pending_text(r)}")
    elif ret == EINVAL:
        reason = "einval"
        why = ("→ -EINVAL: the size must be 0 or a power of two ≥ 2" if n == 1 or (n & (n - 1))
               else "→ -EINVAL: arg4 was not 0 (or the kernel has no private hash)")
    elif ret == EBUSY:
        reason, why = "ebusy", ("→ -EBUSY: the process chose the global hash (SET_SLOTS 0) "
                                "earlier; there is no way back")
    elif ret == ENOMEM:
        reason, why = "enomem", f"→ -ENOMEM: allocating {n} buckets failed"
        if r.get("result_inferred"):
            why += " (inferred: the caller was seen again without the new hash)"
    elif ret is None:
        reason, why = "unresolved", ("→ result not seen: the caller was not seen again before the "
                                     "recording ended (--exact-prctl hooks prctl's exit)")
    else:
        reason, why = "other", f"→ {ret}"
    if ret != 0:
        # A refused request changes nothing: the size is what the tracer read
        # when the request was made (even before any other sight of the hash).
        after = r["old_buckets"] if r["old_buckets"] is not None else st.buckets
    return {"t": r["t"], "kind": "prctl", "trigger": "prctl", "tid": None, "requested": n, "result": ret,
            "clone_flags": None, "formula": None, "buckets_before": r["old_buckets"],
            "buckets_after": after, "pending_s": r.get("pending_s"), "pivot_t": r.get("pivot_t"),
            "reason": reason, "text": f"{head} {why}"}


def _apply(st: _State, step: dict) -> None:
    if step["kind"] == "prctl" and step["result"] == 0:
        st.custom = True
        st.global_chosen = step["requested"] == 0
    if step["buckets_after"] is not None:
        st.buckets = step["buckets_after"]
    if step["kind"] in ("resize", "prctl") and (step["kind"] == "resize" or step["result"] == 0):
        st.pending = step.get("pending_buckets")


def _kernel_inputs(rec: dict) -> dict:
    kern = rec.get("kernel", {})
    return {"online_cpus": len(kern.get("online_cpus", [])) or None,
            "global_size": kern.get("global_hash", {}).get("buckets_per_node"),
            "rule": kern.get("clone_rule")}


def _items(pid: int, rec: dict) -> list[tuple]:
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


def _first_seen(r: dict, st: _State) -> dict:
    st.buckets, st.custom = r["buckets"], r["custom"]
    st.global_chosen = r["custom"] and r["buckets"] == 0
    return {"t": r["t"], "kind": "first_seen", "tid": None, "reason": "first_seen",
            "buckets_before": None, "buckets_after": r["buckets"], "formula": None,
            "text": f"first seen at +{r['t']:.3f} s: "
                    f"{_desc(r['buckets'], r['custom'], st.global_chosen)}"
                    + (" (sized before tracing began: its inputs were not seen)" if r["buckets"] else "")}


def _pending_took_over(r: dict, st: _State) -> dict:
    """The replacement waiting at attach is seen in use."""
    step = {"t": r["t"], "kind": "pivot", "tid": None, "reason": "pending_took_over",
            "buckets_before": st.buckets, "buckets_after": r["buckets"], "formula": None,
            "text": f"the replacement waiting at attach took over by +{r['t']:.3f} s: "
                    f"{st.buckets} → {r['buckets']} buckets (first seen in use then)"}
    st.buckets, st.pending = r["buckets"], None
    return step


def _at_attach(state: dict, st: _State, k: dict) -> dict:
    st.start_from(state)
    return {"t": 0.0, "kind": "at_attach", "tid": None, "reason": "at_attach", "buckets_before": None,
            "buckets_after": st.buckets, "pending_buckets": st.pending, "formula": None,
            "text": "at attach: " + at_attach_text(state, k)}


def explain_process(pid: int, rec: dict) -> dict:
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
                      "text": _desc(st.buckets, st.custom, st.global_chosen, st.pending),
                      **({"why_size": why} if (why := why_size(st, k)) else {})},
            "cost": cost, "recommendation": with_avoided_cost(recommend(pid, rec, st), cost, st)}


def with_avoided_cost(r: dict | None, cost: dict, st: _State) -> dict | None:
    """The recommendation, quoting the atomic refcount time the resizes cost
    (automatic ones, or a prctl made once threads ran): a size set before any
    thread exists is installed at once, with nothing to drain."""
    a = cost["atomic"]
    if r is None or not a["total_s"] or st.global_chosen or not (r["slots"] or st.buckets):
        return r
    label = "" if a["source"] == "measured" else " (inferred)"
    # Without a suggested size, the size it ended with is the one to set at start.
    size = r["slots"] or f"{st.buckets} (the size it ended with)"
    r["avoided_atomic_s"] = a["total_s"]
    r["effect"] += (f"; setting {size} at start would have avoided {a['total_s'] * 1000:.2f} ms "
                    f"of atomic refcounting{label} ({a['lookups']:,} lookups)")
    return r


def _same_run(a: dict, b: dict) -> bool:
    """Consecutive steps told as one line: threads created with the same outcome."""
    return (a["kind"] == b["kind"] == "no_resize" and a["reason"] == b["reason"]
            and a["buckets_before"] == b["buckets_before"] and clone_kind(a["clone_flags"]) ==
            clone_kind(b["clone_flags"]))


def _run_line(run: list[dict]) -> str:
    first, last = run[0], run[-1]
    top = max(run, key=lambda s: s["threads"])
    low, high = min(s["threads"] for s in run), top["threads"]
    kind = clone_kind(first["clone_flags"])
    counts = f"{low}" if low == high else f"{low}–{high}"
    return (f"{len(run)} × {kind} created from +{first['t']:.3f} s to +{last['t']:.3f} s "
            f"with {counts} threads: no resize: {top['why']}")


def group_steps(steps: list[dict]) -> list[dict]:
    """Runs of consecutive steps with the same outcome as one line each
    (`first`/`count` index `steps`, which keeps every event)."""
    lines, i = [], 0
    while i < len(steps):
        j = i + 1
        while j < len(steps) and _same_run(steps[i], steps[j]):
            j += 1
        run = steps[i:j]
        text = run[0]["text"] if len(run) == 1 else _run_line(run)
        lines.append({"first": i, "count": len(run), "t_first": run[0]["t"], "t_last": run[-1]["t"],
                      "text": text})
        i = j
    return lines


def _hash_stats(pid: int, rec: dict) -> dict | None:
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


def _whatif(pid: int, rec: dict) -> dict | None:
    proc = next((p for p in rec.get("processes", []) if p["pid"] == pid), None)
    if not proc or not proc.get("futex_list"):
        return None
    # Futexes counted per bucket by the first-seen filter, beyond the bounded
    # per-futex list (recordings before the filter: the lookups it missed).
    details = [h.get("futex_detail") or {} for h in proc.get("hashes", [])]
    unlisted = sum(d.get("futexes_unlisted", 0) for d in details)
    missed = sum(d.get("lookups_missed", 0) for d in details)
    unattributed = (rec.get("totals") or {}).get("unattributed_causes", {}).get("map_full")
    notes = [f"{unlisted:,} futexes of this process are beyond the per-futex list (it was full): "
             "they are not in the table" if unlisted else "",
             f"{missed:,} lookups of this process are beyond the per-futex list (it was full): "
             "their futexes are not in the table" if missed else "",
             f"{unattributed:,} lookups were not attributed at all (map full): not in the table"
             if unattributed else ""]
    note = "; ".join(n for n in notes if n) or None
    return whatif.table(proc["futex_list"], rec.get("kernel", {}).get("futex_hash_bucket_size"), note)


def _kib(n_bytes: int | None) -> str:
    return f"{n_bytes / 1024:.0f} KiB" if n_bytes else "unknown memory"


def _advice(pid: int, rec: dict, st: _State, cur: int) -> dict:
    """{slots, effect, c_line, measured}: from the bucket-lock waits the recording
    measured (analysis/contention.py), never from the lookup spread alone."""
    if st.global_chosen:
        return {"slots": None, "c_line": None, "measured": None,
                "effect": ("the process chose the global hash; a private hash is no longer possible for it "
                           "(SET_SLOTS returns -EBUSY)")}
    if not contention.measured(rec):
        return {"slots": None, "c_line": None, "measured": None,
                "effect": ("this recording did not measure bucket-lock waits (lock:contention_begin/end "
                           "not attached): no size is suggested; the table shows only how the futexes "
                           "would spread")}
    return contention.advice(pid, rec, cur or st.buckets or 0)   # lookups only on the global hash: the final hash


SHARED_WHY = ("shared futexes (process-shared or file-backed), which always use the global hash: "
              "no PR_FUTEX_HASH_SET_SLOTS size changes their buckets")


def _shared_share(pid: int, rec: dict) -> float:
    proc = next((p for p in rec.get("processes", []) if p["pid"] == pid), {})
    shared = sum(h["lookups"] for h in proc.get("hashes", []) if h["kind"] == "global_shared")
    return shared / proc["lookups"] if proc.get("lookups") else 0.0


def no_table_reason(pid: int, rec: dict) -> str:
    """Why there is no what-if table, from what the recording holds."""
    proc = next((p for p in rec.get("processes", []) if p["pid"] == pid), {})
    if "futex_list" not in proc:
        return ("the recording has no per-futex list (made by a futextrace before it kept one): "
                "no what-if table, no size to suggest")
    if proc.get("hashes") and all(h["kind"] == "global_shared" for h in proc["hashes"]):
        return f"its lookups were of {SHARED_WHY}"
    return ("the per-futex list holds none of its private futexes (the list was full: raise "
            "--max-futexes): no what-if table, no size to suggest")


def recommend(pid: int, rec: dict, st: _State) -> dict | None:
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
    sharing = (f"{h['collisions']} collisions (futexes beyond one per bucket)" if "collisions" in h
               else f"sharing a bucket: {BUCKET_NOT_VISIBLE}")
    measured = (f"measured: {d} distinct futexes in {cur or 'the global hash'}{' buckets' if cur else ''}, "
                f"{sharing}"
                + (f", busiest bucket {imb:.1f}× the mean" if imb else "")
                + (f", {atomic_share:.1%} of refcount gets atomic"
                   + (" (inferred)" if str(rc.get("source", "")).startswith("inferred") else "") if cur else ""))
    adv = _advice(pid, rec, st, cur)
    slots, effect, line = adv["slots"], adv["effect"], adv["c_line"]
    if adv["measured"]:
        measured += "; " + adv["measured"]
    if not table and not st.global_chosen:
        effect = f"{effect}; no what-if table: {no_table_reason(pid, rec)}"
    elif (shared := _shared_share(pid, rec)) >= 0.5:
        effect = (f"{shared:.0%} of its lookups were of {SHARED_WHY}; for its private futexes: {effect}")
    return {"slots": slots, "distinct_futexes": d, "current_buckets": cur,
            "collisions": h.get("collisions"), "max_over_mean": imb, "atomic_share": atomic_share,
            "expected_collisions_now": expected_collisions(d, cur) if cur else None,
            "measured": measured, "effect": effect, "c_line": line, "whatif": table}


def explain(rec: dict) -> dict:
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


def _recommendation_lines(r: dict) -> list[str]:
    out = []
    if r.get("whatif"):
        out += ["  " + line for line in whatif.render(r["whatif"])]
    out.append(f"  recommendation: {r['measured']}")
    out.append(f"    SET_SLOTS {r['slots']}: {r['effect']}" if r["slots"] else f"    {r['effect']}")
    if r["c_line"]:
        out.append(f"    {r['c_line']}")
    return out


def render(expl: dict, verbose: bool = False) -> str:
    """The explanation as text: runs of same-outcome events grouped, unless verbose."""
    rule = expl["clone_rule"]
    out = [f"kernel: {expl['online_cpus']} online CPUs, global hash {expl['global_size']} buckets per node, "
           f"clone rule {rule or 'unknown'}"
           + (f" (learned live by watching a real clone: {RULES[rule]})" if rule in RULES else "")]
    attach = expl.get("hash_at_attach") or {}
    if attach.get("source") and attach["source"] != "iterator":
        out.append(f"hash at attach: {attach['note']}")
    if not expl["processes"]:
        out.append("no futex hash activity was seen")
    for p in expl["processes"]:
        out.append("")
        out.append(f"PID {p['pid']} {p['comm']}: now {p['final']['text']}")
        if p["final"].get("why_size"):
            out.append(f"  why {p['final']['buckets']}: {p['final']['why_size']}")
        lines = p["steps"] if verbose else p.get("lines") or p["steps"]
        out += [f"  - {s['text']}" for s in lines]
        if p.get("cost"):
            out.append(f"  hash: {installed_text(p['cost'])}")
            if atomic_text(p["cost"]):
                out.append(f"  {atomic_text(p['cost'])}")
        if p["recommendation"]:
            out += _recommendation_lines(p["recommendation"])
    return "\n".join(out)
