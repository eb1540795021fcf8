"""`futextrace explain` in words: the sentences of each step, line and
recommendation (its JSON "text", "why", "measured" and "effect"), and the text
report. analysis/explain.py decides; this module only says it."""
from __future__ import annotations

from futextrace.analysis.explain import clone_kind, explain
from futextrace.analysis.steps import Step
from futextrace.output.text.atomic_text import atomic_text, installed_text
from futextrace.output.text.explain_advice import try_commands, try_lines, worded_recommendation
from futextrace.output.text.history_text import at_attach_text
from futextrace.output.text.whatif_text import render as whatif_lines
from futextrace.output.text.words import count_noun
from futextrace.recording import Recording

RULES = {
    "thread+vm": "a clone allocates only with CLONE_THREAD|CLONE_VM",
    "vm-not-vfork": "a clone allocates with CLONE_VM, except vfork",
    "vm": "every CLONE_VM clone allocates, vfork included",
}
CLONE_KINDS = {None: "clone", "thread": "thread", "vfork": "vfork child", "vm": "clone(CLONE_VM) child",
               "fork": "fork child"}


def kind_text(flags: int | None) -> str:
    return CLONE_KINDS[clone_kind(flags)]


def formula_text(f: dict) -> str:
    """The formula's steps with the real inputs."""
    return (f"min({f['threads']} threads, {f['online_cpus']} online CPUs) = {f['min']}"
            f" → 4 × {f['min']} = {f['times4']} → roundup_pow_of_two = {f['pow2']}"
            f" → clamp(16, global size {f['global_size']}) = {f['buckets']} buckets")


def _ms(s: float) -> str:
    return f"{s * 1000:.2f} ms" if s < 1 else f"{s:.2f} s"


def desc(buckets: int | None, custom: bool, global_chosen: bool, pending: int | None = None) -> str:
    """The installed hash; a replacement waiting for its pivot beside it, not as current."""
    if buckets is None:
        return "unknown"
    if buckets == 0:
        text = "global (chosen with prctl, for good)" if global_chosen else "global (no private hash yet)"
    else:
        text = f"{buckets} buckets ({'custom' if custom else 'automatic'})"
    return text + (f"; {pending} buckets pending (waiting for the pivot)" if pending else "")


def why_size(limit: dict | None) -> str | None:
    """analysis.explain.size_limit in words."""
    if limit is None:
        return None
    n, online, nxt = limit["buckets"], limit["online_cpus"], limit["next"]
    if limit["case"] == "ceiling":
        return (f"{n} is the global hash size per node, the formula's ceiling: no automatic resize "
                "makes it bigger (only prctl(SET_SLOTS) can)")
    step = (f"the next size, {nxt['buckets']}, needs min(threads, online CPUs) ≥ {nxt['needs']}: a clone "
            f"made while the process has at least {nxt['needs']} threads")
    if limit["case"] == "sized_with_more_cpus":
        return (f"with {online} online CPUs the formula gives at most {nxt['ceiling_here']}: {n} was sized while "
                f"more CPUs were online (the hash never shrinks); {step} and {nxt['needs']} online CPUs")
    if limit["case"] == "cpu_bound":
        return (f"with {online} online CPUs the automatic size stops at {nxt['ceiling_here']} whatever the "
                f"thread count (4 × min(threads, {online}) ≤ {4 * online}, rounded up and clamped to at "
                f"least 16); {step} on a machine with at least {nxt['needs']} online CPUs")
    return f"{step} ({online} CPUs are online)"


def pending_text(s: dict) -> str:
    if s.get("pivot_t") is None:
        return "still pending when the recording ended (the old hash was still referenced)"
    if not s.get("pending_s"):
        return "installed at once (no old hash to drain)"
    what = "prctl waited" if s["trigger"] == "prctl" else "pending"
    return f"{what} {_ms(s['pending_s'])} before the pivot at +{s['pivot_t']:.3f} s"


def _resize_text(s: dict, facts: dict, k: dict) -> str:
    kind, f = kind_text(s["clone_flags"]), s["formula"]
    text = f"{kind} created at +{s['t']:.3f} s with {count_noun(facts['threads'], 'thread')}"
    text += f" → {formula_text(f)}" if f else " (formula inputs unknown)"
    notes = []
    if facts["formula_differs"]:
        notes.append(f"the kernel gave {facts['new_buckets']}, not the formula's {f['buckets']}: "
                     "check the online CPUs and global hash size in the kernel model")
    if facts["against_rule"]:
        notes.append(f"this kernel allocated on a {kind} although its learned rule says it would not "
                     f"({RULES[k['rule']]}); the recording shows it did")
    notes.append(pending_text(s))
    return f"{text}; {s['buckets_before']} → {facts['new_buckets']} buckets; " + "; ".join(notes)


NO_RESIZE_WHY = {
    "flags_do_not_trigger": lambda s, k: f"these clone flags do not allocate a hash on this kernel ({RULES[k['rule']]})",
    "global_chosen": lambda s, k: "the process chose the global hash (SET_SLOTS 0): an automatic request returns 0",
    "custom": lambda s, k: f"custom hash: no automatic resize (its {s['buckets_before']} buckets were set with prctl)",
    "big_enough": lambda s, k: (f"{formula_text(s['formula'])}, and the hash already has {s['buckets_before']}: "
                                "it only grows, never shrinks"),
    "unknown_size": lambda s, k: (f"{formula_text(s['formula'])}; the size before was not seen, so no resize "
                                  "may have been needed"),
    "unexplained": lambda s, k: (((formula_text(s["formula"]) + " would grow it; ") if s["formula"] else "")
                                 + "no new hash was seen (events lost, or the clone failed with -ENOMEM)"),
}


def no_resize_why(s: Step, k: dict) -> str:
    return NO_RESIZE_WHY[s["reason"]](s, k)


def _enomem(s: Step, facts: dict) -> str:
    return f"→ -ENOMEM: allocating {s['requested']} buckets failed" + (
        " (inferred: the caller was seen again without the new hash)" if facts["result_inferred"] else "")


PRCTL_WHY = {
    "global_set": lambda s, facts: ("→ the global hash, for good: later SET_SLOTS requests get -EBUSY "
                                    "and new threads no longer resize"),
    "custom_set": lambda s, facts: (f"→ {s['buckets_before']} → {s['buckets_after']} buckets, custom: "
                                    f"automatic resizes stop; {pending_text(s)}"),
    "einval": lambda s, facts: ("→ -EINVAL: the size must be 0 or a power of two ≥ 2" if facts["bad_size"]
                                else "→ -EINVAL: arg4 was not 0 (or the kernel has no private hash)"),
    "ebusy": lambda s, facts: "→ -EBUSY: the process chose the global hash (SET_SLOTS 0) earlier; there is no way back",
    "enomem": _enomem,
    "unresolved": lambda s, facts: ("→ result not seen: the caller was not seen again before the "
                                    "recording ended (--exact-prctl hooks prctl's exit)"),
    "other": lambda s, facts: f"→ {s['result']}",
}


def _prctl_why(s: Step, facts: dict) -> str:
    return PRCTL_WHY[s["reason"]](s, facts)


def _kernel(expl: dict) -> dict:
    return {"online_cpus": expl["online_cpus"] or None, "global_size": expl["global_size"],
            "rule": expl["clone_rule"]}


def _no_resize_text(s: Step, facts: dict, k: dict, out: dict) -> str:
    out["why"] = no_resize_why(s, k)
    return (f"{kind_text(s['clone_flags'])} created at +{s['t']:.3f} s with "
            f"{count_noun(s['threads'], 'thread')} (clone flags {s['clone_flags']:#x}): no resize: {out['why']}")


STEP_TEXT = {
    "resize": lambda s, facts, k, out: _resize_text(s, facts, k),
    "no_resize": _no_resize_text,
    "prctl": lambda s, facts, k, out: (f"prctl(PR_FUTEX_HASH, SET_SLOTS, {s['requested']}) at +{s['t']:.3f} s "
                                       f"{_prctl_why(s, facts)}"),
    "first_seen": lambda s, facts, k, out: (
        f"first seen at +{s['t']:.3f} s: {desc(s['buckets_after'], facts['custom'], facts['global_chosen'])}"
        + (" (sized before tracing began: its inputs were not seen)" if s["buckets_after"] else "")),
    "pivot": lambda s, facts, k, out: (f"the replacement waiting at attach took over by +{s['t']:.3f} s: "
                                       f"{s['buckets_before']} → {s['buckets_after']} buckets (first seen in use then)"),
    "at_attach": lambda s, facts, k, out: "at attach: " + at_attach_text(facts["state"], k),
}


def _worded_step(s: Step, k: dict) -> dict:
    """The step with its sentence (`text`; `why` too for no_resize). A kind without a
    sentence is a KeyError here, never a wrong line."""
    facts = s.get("facts") or {}
    out = {key: v for key, v in s.items() if key != "facts"}
    out["text"] = STEP_TEXT[s["kind"]](s, facts, k, out)
    return out


def _line_text(run: list[dict]) -> str:
    """One step's text, or a run of threads created with the same outcome as one line."""
    if len(run) == 1:
        return run[0]["text"]
    first, last = run[0], run[-1]
    top = max(run, key=lambda s: s["threads"])
    low, high = min(s["threads"] for s in run), top["threads"]
    counts = f"{low}" if low == high else f"{low}–{high}"
    return (f"{len(run)} × {kind_text(first['clone_flags'])} created from +{first['t']:.3f} s to "
            f"+{last['t']:.3f} s with {counts} threads: no resize: {top['why']}")


def lines_text(steps: list[dict], lines: list[dict]) -> list[dict]:
    """analysis.explain.group_steps' lines of worded steps, each with its text."""
    return [{**ln, "text": _line_text(steps[ln["first"]:ln["first"] + ln["count"]])} for ln in lines]


def _worded_process(p: dict, k: dict, rec: Recording | None, source: str | None) -> dict:
    steps = [_worded_step(s, k) for s in p["steps"]]
    lines = lines_text(steps, p["lines"])
    f = p["final"]
    final = {key: v for key, v in f.items() if key != "facts"}
    final["text"] = desc(f["buckets"], f["custom"], f["global_chosen"], f["pending_buckets"])
    if why := why_size(f["facts"]["size_limit"]):
        final["why_size"] = why
    names = next((q.get("futex_names") for q in (rec or {}).get("processes", []) if q["pid"] == p["pid"]), None)
    r = worded_recommendation(p["recommendation"], p["cost"], f, names)
    if r is not None and r["slots"] is not None and rec is not None:
        r["try"] = try_commands(r["slots"], p["pid"], rec, source)
    return {"pid": p["pid"], "comm": p["comm"], "steps": steps, "lines": lines, "final": final,
            "cost": p["cost"], "recommendation": r}


def worded(expl: dict, rec: Recording | None = None, source: str | None = None) -> dict:
    """analysis.explain.explain()'s data with its sentences (the `explain --json`
    explanation); with the recording, the commands to try a suggested size
    (`try`), `source` the file the recording is saved in."""
    k = _kernel(expl)
    return {**expl, "processes": [_worded_process(p, k, rec, source) for p in expl["processes"]]}


def explained(rec: Recording, source: str | None = None) -> dict:
    return worded(explain(rec), rec, source)


def _recommendation_lines(r: dict) -> list[str]:
    out = []
    if r.get("whatif"):
        out += ["  " + line for line in whatif_lines(r["whatif"])]
    out.append(f"  recommendation: {r['measured']}")
    out += [f"    colliding in {line}" for line in r.get("colliding") or []]
    out.append(f"    SET_SLOTS {r['slots']}: {r['effect']}" if r["slots"] else f"    {r['effect']}")
    if r["c_line"]:
        out.append(f"    {r['c_line']}")
    return out + try_lines(r.get("try") or [])


def render(expl: dict, verbose: bool = False) -> str:
    """The explanation (worded) as text: runs of same-outcome events grouped, unless verbose."""
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
            c = p["cost"]
            # "now N buckets" above says it, unless a replacement is pending or they differ.
            if c["pending"] or (c["installed"] or {}).get("buckets") != p["final"].get("buckets"):
                out.append(f"  hash at the end: {installed_text(c)}")
            if atomic_text(p["cost"]):
                out.append(f"  {atomic_text(p['cost'])}")
        if p["recommendation"]:
            out += _recommendation_lines(p["recommendation"])
    return "\n".join(out)
