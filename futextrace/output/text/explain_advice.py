"""explain's recommendation in words: what was measured and what a size would
change (analysis/explain.py `recommend` and analysis/lockwaits.py `advice` decide)."""
from __future__ import annotations

import shlex

from futextrace.analysis.lockwaits import MAX_SLOTS, MEASURABLE_MS_PER_S
from futextrace.output.text.names_text import name_text
from futextrace.output.text.whatif_text import worded_table
from futextrace.recording import BUCKET_NOT_VISIBLE

SHARED_WHY = ("shared futexes (process-shared or file-backed), which always use the global hash: "
              "no PR_FUTEX_HASH_SET_SLOTS size changes their buckets")
NO_TABLE = {
    "no_list": ("the recording has no per-futex list (made by a futextrace before it kept one): "
                "no what-if table, no size to suggest"),
    "all_shared": f"its lookups were of {SHARED_WHY}",
    "list_full": ("the per-futex list holds none of its private futexes (the list was full: raise "
                  "--max-futexes): no what-if table, no size to suggest"),
}
ADVICE = {
    "global_chosen": ("the process chose the global hash; a private hash is no longer possible for it "
                      "(SET_SLOTS returns -EBUSY)"),
    "not_measured": ("this recording did not measure bucket-lock waits (lock:contention_begin/end "
                     "not attached): no size is suggested; the table shows only how the futexes "
                     "would spread"),
    "global_hash": ("the process uses the global hash, whose bucket locks are not traced here: "
                    "no measured cost, no size to suggest"),
}


def _wait_effect(adv: dict) -> str:
    rate = adv["ms_per_s"]
    verdict, hit = adv["verdict"], adv["buckets_hit"]
    if verdict in ("collision", "no_separating_size"):
        names = ", ".join(str(b) for b in hit[:6]) + (" ..." if len(hit) > 6 else "")
        head = (f"collisions cost {rate['collision']:.2f} ms/s of lock waits in "
                f"bucket{'s' if len(hit) > 1 else ''} {names}")
        if verdict == "no_separating_size":
            return (f"{head}; no size up to {MAX_SLOTS:,} puts those futexes in buckets of their own: "
                    "more buckets are not the fix")
        return f"{head}; at {adv['slots']} buckets those futexes no longer share"
    if verdict == "same_futex":
        return (f"the lock waits ({rate['same_futex']:.2f} ms/s) are each on "
                "one futex's own bucket: more buckets will not help")
    if verdict == "untied":
        return "the lock waits could not be tied to a futex (not from the waiter's futex call): no size to suggest"
    return (f"no measurable bucket-lock wait (under {MEASURABLE_MS_PER_S} ms/s): "
            f"the current size ({adv['current']} buckets) costs nothing measurable")


def advice_words(adv: dict) -> dict:
    """{slots, c_line, measured, effect} of an advice (analysis.lockwaits.advice, or
    explain's verdicts before it): the C line to set the size, what the waits were."""
    c_line = f"prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS, {adv['slots']}, 0);" if adv["slots"] else None
    if adv["verdict"] in ADVICE:
        measured = "bucket-lock waits: not traced on the global hash" if adv["verdict"] == "global_hash" else None
        return {"slots": adv["slots"], "c_line": c_line, "measured": measured, "effect": ADVICE[adv["verdict"]]}
    rate = adv["ms_per_s"]
    measured = (f"bucket-lock waits: {adv['waits']:,} in {adv['window_s']:.1f} s, {rate['total']:.3f} ms/s "
                f"({rate['collision']:.3f} collision, {rate['same_futex']:.3f} same futex)")
    return {"slots": adv["slots"], "c_line": c_line, "measured": measured, "effect": _wait_effect(adv)}


def _measured(r: dict, facts: dict) -> str:
    d, cur, imb = r["distinct_futexes"], r["current_buckets"], r["max_over_mean"]
    sharing = (f"{r['collisions']} collisions (futexes beyond one per bucket)" if facts["collisions_known"]
               else f"sharing a bucket: {BUCKET_NOT_VISIBLE}")
    text = (f"measured: {d} distinct futexes in {cur or 'the global hash'}{' buckets' if cur else ''}, "
            f"{sharing}"
            + (f", busiest bucket {imb:.1f}× the mean" if imb else "")
            + (f", {r['atomic_share']:.1%} of refcount gets atomic"
               + (" (inferred)" if facts["atomic_inferred"] else "") if cur else ""))
    adv = advice_words(facts["advice"])
    return text + ("; " + adv["measured"] if adv["measured"] else "")


def _effect(r: dict, facts: dict, cost: dict, final: dict) -> str:
    effect = advice_words(facts["advice"])["effect"]
    if facts["no_table"]:
        effect = f"{effect}; no what-if table: {NO_TABLE[facts['no_table']]}"
    elif facts["shared_share"] >= 0.5:
        effect = f"{facts['shared_share']:.0%} of its lookups were of {SHARED_WHY}; for its private futexes: {effect}"
    if "avoided_atomic_s" in r:
        a = cost["atomic"]
        label = "" if a["source"] == "measured" else " (inferred)"
        # Without a suggested size, the size it ended with is the one to set at start.
        size = r["slots"] or f"{final['buckets']} (the size it ended with)"
        effect += (f"; setting {size} at start would have avoided {a['total_s'] * 1000:.2f} ms "
                   f"of atomic refcounting{label} ({a['lookups']:,} lookups)")
    return effect


COLLIDING_NAMES = 4   # futexes named per bucket in explain's colliding lines


def colliding_lines(colliding: list[dict], names: dict) -> list[str]:
    """One sentence per bucket whose futexes collide, each futex named:
    "bucket 1 of 2 (lock waits): ledger_gate (app .bss), orders_mutex (app .data)"."""
    out = []
    for c in colliding:
        named = [name_text(names[a]) if a in names else a for a in c["addresses"][:COLLIDING_NAMES]]
        more = c["futexes"] - len(named)
        how = "lock waits" if c["source"] == "lock_waits" else "lookups"
        out.append(f"bucket {c['bucket']} of {c['buckets']} ({how}): " + ", ".join(named)
                   + (f" and {more} more" if more > 0 else ""))
    return out


def worded_recommendation(r: dict | None, cost: dict, final: dict, names: dict | None = None) -> dict | None:
    """The recommendation with its `measured` and `effect` sentences, keys in the schema's order;
    with the process's futex_names, `colliding`: the futexes sharing a bucket, named."""
    if r is None:
        return None
    facts = r["facts"]
    out = {key: r[key] for key in ("slots", "distinct_futexes", "current_buckets", "collisions",
                                   "max_over_mean", "atomic_share", "expected_collisions_now")}
    out["measured"] = _measured(r, facts)
    out["effect"] = _effect(r, facts, cost, final)
    out["c_line"], out["whatif"] = advice_words(facts["advice"])["c_line"], worded_table(r["whatif"])
    if "avoided_atomic_s" in r:
        out["avoided_atomic_s"] = r["avoided_atomic_s"]
    if names and r.get("colliding"):
        out["colliding"] = colliding_lines(r["colliding"], names)
    return out


def _secs(d: float | None) -> str:
    """The recording's duration as a -d value: whole seconds from 10 s, else one decimal."""
    if not d:
        return "SECS"
    return f"{d:.0f}" if d >= 10 else f"{max(d, 0.1):.1f}".rstrip("0").rstrip(".")


def try_commands(slots: int | None, pid: int, rec: dict, source: str | None) -> list[str]:
    """The commands to try a suggested size (`futextrace set`, `futextrace run`)
    and compare the result with this recording (`futextrace diff`); SET_SLOTS 0
    is the global hash. [] without a suggested size."""
    if slots is None:
        return []
    flag = "--global" if slots == 0 else f"--slots {slots}"
    cmd = rec.get("command") or {}
    started = cmd.get("pid") == pid and cmd.get("argv")
    argv = shlex.join(cmd["argv"]) if started else "COMMAND"
    before = shlex.quote(source) if source and source != "-" else "before.json"
    if started:
        # explain started it and it has exited: a new run is the only one to try the size on.
        return [f"futextrace run {flag} -- {argv}",
                f"futextrace record --slots {slots} --json after.json -- {argv}; futextrace diff {before} after.json"]
    return [f"futextrace set -p {pid} {flag}", f"futextrace run {flag} -- {argv}",
            f"futextrace record -p {pid} -d {_secs(rec.get('duration_s'))} --json after.json; "
            f"futextrace diff {before} after.json"]


def try_lines(commands: list[str]) -> list[str]:
    """try_commands as explain's text shows them, each with what it acts on."""
    if not commands:
        return []
    if len(commands) == 2:      # the program explain ran: it has exited
        return [f"    try it:   {commands[0]}       (a new run of the program)",
                f"    compare:  {commands[1]}"]
    return [f"    try it:   {commands[0]}          (on the running process; acts on a live process, see README)",
            f"              {commands[1]}       (a new run of the program)",
            f"    compare:  {commands[2]}"]
