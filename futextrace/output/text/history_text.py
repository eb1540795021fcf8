"""A process's hash at attach in words (analysis/history.py says what it implies)."""
from __future__ import annotations

from futextrace.analysis.history import automatic_history


def _automatic(n: int, threads: int | None, k: dict) -> str:
    online, gsize = k.get("online_cpus"), k.get("global_size")
    head = f"{n} buckets, automatic, sized before the recording began"
    h = automatic_history(n, k)
    if h["case"] == "inputs_unknown":
        return head + " (the online CPUs or global size are unknown: the formula cannot be replayed)"
    if h["case"] == "not_here":
        return (f"{head}: no thread count gives {n} with today's {online} online CPUs and global size "
                f"{gsize} (at most {h['biggest']}): it was sized while more CPUs were online (CPUs hot-unplugged "
                "since) or under another global size")
    t, f = h["threads"], h["formula"]
    text = (f"{head}: the hash only grows, so a clone once ran the formula with at least {t} "
            f"thread{'s' if t != 1 else ''} while {online} CPUs were online (min({t}, {online}) → 4 × {f['min']}"
            f" → {f['pow2']} → clamp(16, {gsize}) = {n})")
    if threads is not None and t > threads:
        text += f"; it has {threads} now: threads exited since"
    return text


def at_attach_text(state: dict, k: dict) -> str:
    """One line for a process's hash at attach (hash_at_attach.processes[pid])."""
    n, threads = state.get("buckets"), state.get("threads")
    if state.get("launched"):
        text = "launched by futextrace: right after exec it has no hash yet"
    elif state["kind"] == "none":
        text = (f"no private hash at attach ({threads} thread{'s' if threads != 1 else ''}): its futexes "
                "use the global hash until a clone that allocates (see the clone rule above) creates one")
    elif state["kind"] == "global":
        text = ("global hash, chosen with prctl(SET_SLOTS, 0) before the recording began: global for good "
                "(later SET_SLOTS requests get -EBUSY and clones never allocate)")
    elif state["mode"] == "custom":
        text = (f"{n} buckets, custom: set with prctl(SET_SLOTS, {n}) before the recording began; "
                "a custom hash is never resized automatically")
    else:
        text = _automatic(n, threads, k)
    pend = state.get("pending")
    if pend:
        what = "custom" if pend.get("custom") else "automatic"
        text += (f"; a replacement of {pend['buckets']} buckets ({what}) was waiting for its pivot "
                 "(the old hash was still referenced)")
    if state.get("refcount") == "atomic":
        text += "; its references were counted on the shared atomic (a replacement in progress)"
    return text
