"""Text output of a recording (used by `record`, `bench` and `report`)."""
from __future__ import annotations

import re

from futextrace.analysis.atomic import resize_cost
from futextrace.analysis.explain import MIN_HIST_LOOKUPS
from futextrace.output.text.atomic_text import atomic_text, installed_text
from futextrace.kernel.errnos import errno_name
from futextrace.output.text.estimates import approx
from futextrace.output.text.words import blind_spot_lines, count_noun
from futextrace.output.text.lockwaits_text import lockwait_lines
from futextrace.output.text.names_text import legend
from futextrace.recording import (BUCKET_NOT_VISIBLE, FutexDetail, FutexList, HashAtAttach, HashSummary, HistSlot,
                                  Method, Process, Recording, Resize)


def log2_hist(rows: list[HistSlot], label: str, width: int = 40) -> list[str]:
    """Like BCC's print_log2_hist with strip_leading_zero: `low -> high : count |****|`,
    from the first power of two that holds a value (the `0 -> 0` row of unused
    buckets kept): 16 buckets of a million lookups each are one row, not 21."""
    rows = _strip_leading_zero(rows)
    if not rows:
        return [f"     {label:<19}: count     distribution", "     (empty)"]
    top = max(r["count"] for r in rows) or 1
    out = [f"     {label:<19}: count     distribution"]
    for r in rows:
        stars = "*" * int(width * r["count"] / top)
        out.append(f"{r['low']:>10} -> {r['high']:<10}: {r['count']:<9} |{stars:<{width}}|")
    return out


def _strip_leading_zero(rows: list[HistSlot]) -> list[HistSlot]:
    zero = [r for r in rows if r["high"] == 0 and r["count"]]
    powers = [r for r in rows if r["high"] > 0]
    first = next((i for i, r in enumerate(powers) if r["count"]), len(powers))
    return zero + powers[first:]


def _stats_meaningful(h: HashSummary) -> bool:
    return h["lookups"] >= max(h["imbalance"]["buckets"], MIN_HIST_LOOKUPS)


def _buckets_desc(h: HashSummary) -> str:
    if h["kind"] == "private":
        return f"private hash, {h['buckets']} buckets"
    if h["kind"] == "global_shared":
        return "global hash (shared futexes)"
    return f"global hash ({h['kind']}), {h['buckets']} buckets"


def _futex_bounds(h: HashSummary) -> str:
    """Distinct futexes: exact, or an estimate that names its method."""
    est = h.get("estimates", {}).get("distinct_futexes")
    if not est:
        return count_noun(h["distinct_futexes"], "distinct futex", "distinct futexes")
    if "value" in est:
        return f"{approx(est)} distinct futexes, by the {est['method'].split(' (')[0]}"
    return (f"{est['low']:,}..{est['high']:,} distinct futexes (estimate: the per-futex list holds "
            f"{h['futex_detail']['lookups_listed']:,} of these lookups)")


def _collisions(h: HashSummary) -> str:
    est = h.get("estimates", {}).get("collisions")
    return f"{h['collisions']:,}" if not est else approx(est)


def _hash_section(h: HashSummary, shared_said: bool = False, names: dict | None = None) -> list[str]:
    """`shared_said`: an earlier process's block already said why a shared
    futex's bucket figures are n/a (stress-ng's four processes repeated it);
    `names`: the process's futex_names, listed under the hottest buckets."""
    lines = [f"  {_buckets_desc(h)}: {h['lookups']:,} lookups, {_futex_bounds(h)}"]
    if "imbalance" not in h:
        why = BUCKET_NOT_VISIBLE if h["kind"] == "global_shared" else h.get("note", "")   # older notes too
        if h["kind"] == "global_shared" and shared_said:
            why = "n/a (shared futexes, as above)"
        lines.append(f"    buckets used, max/mean, collisions: {why}")
        return lines
    im = h["imbalance"]
    if not _stats_meaningful(h):
        lines.append(f"    buckets used {im['used']} of {im['buckets']}; collisions {_collisions(h)} "
                     f"(futexes beyond one per bucket); too few lookups for max/mean, CV and histograms")
    else:
        lines.append(f"    buckets used {im['used']} of {im['buckets']}; max/mean {im['max_over_mean']:.2f}; "
                     f"CV {im['cv']:.2f}; collisions {_collisions(h)} (futexes beyond one per bucket)")
        lines += ["", *("    " + l for l in log2_hist(h["lookups_per_bucket_hist"], "lookups/bucket")), ""]
        lines += [*("    " + l for l in log2_hist(h["futexes_per_bucket_hist"], "futexes/bucket")), ""]
    lines.append("    hottest buckets:" + _hottest_caveat(h.get("futex_detail", {})))
    # A node column only where buckets have one (the global hash's per-node tables).
    nodes = any(b["node"] is not None for b in h["hottest"])
    lines.append(f"    {'bucket':>8}{' node' if nodes else ''} {'lookups':>12} {'futexes':>7}  addresses")
    for b in h["hottest"]:
        node = (" " + ("-" if b["node"] is None else str(b["node"])).rjust(4)) if nodes else ""
        lines.append(f"    {b['bucket']:>8}{node} {b['lookups']:>12,} {b['futexes']:>7,}  "
                     + " ".join(b["addresses"][:4]) + (" ..." if b["futexes"] > 4 else ""))
    named = legend([a for b in h["hottest"] for a in b["addresses"][:4]], names, "      ")
    return lines + (["    the addresses above:", *named] if named else [])


def _futex_list_lines(fl: FutexList | None) -> list[str]:
    """What the per-futex list could not hold, when it could not hold all."""
    if not fl or fl["complete"]:
        return []
    if "futexes_unlisted" in fl:
        return [f"  per-futex list full at {fl['capacity']:,} futexes (raise --max-futexes): "
                f"{fl['futexes_unlisted']:,} more counted per bucket by the {fl['seen_filter']['method']}, "
                "without addresses. Bucket and process counts stay exact; distinct futexes and "
                "collisions are estimates"]
    why = (f"list full at {fl['capacity']}: raise --max-futexes" if fl.get("full") else
           "more futexes in use than the lookup cache holds: a futex missing it is admitted "
           "only now and then, so the list keeps the futexes with repeated lookups")
    return [f"  per-futex list: {fl['futexes_listed']:,} futexes holding {fl['lookups_listed']:,} lookups; "
            f"{fl['lookups_missed']:,} lookups not in it ({why}). Bucket and process counts stay exact; "
            "futex counts, distinct futexes and collisions are bounds"]


def _hottest_caveat(detail: FutexDetail) -> str:
    if detail.get("complete", True):
        return ""
    if "futexes_unlisted" in detail:
        return " (addresses: those in the per-futex list; futexes: with those beyond it)"
    return " (futexes and addresses: those in the per-futex list, a lower bound)"


ATTACH_ROWS = 20   # system-wide, many processes have a hash: the busiest threads first


def _attach_section(att: HashAtAttach | None, shown: set[int] | None = None, folded: set[int] | None = None,
                    verbose: bool = False, comms: dict[int, str] | None = None) -> list[str]:
    """Each traced process's hash when tracing began (hash_at_attach), unless
    verbose without the processes folded above and, system-wide, without those
    that made no lookups (counted on one line). With a filter, a matching
    process that made no lookups is listed: it appears nowhere else."""
    if not att:
        return []
    if att.get("source") != "iterator" and not att.get("processes"):
        return ["", f"Hash at attach: {att.get('note')}"]
    rows = sorted(att["processes"].values(), key=lambda r: (-(r.get("threads") or 0), r["pid"]))
    scope = f"; {att['filter']}" if att.get("filter") else ""
    out = ["", f"Hash at attach ({att.get('note')}{scope}):"]
    if not rows:
        out.append("  none of them was running" if scope else "  no process had a futex hash")
    rest = []
    if shown is not None and not verbose:
        keep = shown | set(att.get("targets") or [])
        rest = [r for r in rows if r["pid"] not in keep and (r["pid"] in (folded or set()) or not scope)]
        rows = [r for r in rows if r not in rest]
    for r in rows[:ATTACH_ROWS if not verbose else None]:
        if r.get("launched"):
            what = "launched: no hash yet (fresh after exec)"
        elif r["kind"] == "none":
            what = "no private hash"
        elif r["kind"] == "global":
            what = "global, chosen with prctl (for good)"
        else:
            what = f"{r['buckets']} buckets, {'custom' if r['mode'] == 'custom' else 'automatic'}"
        pend = f"; {r['pending']['buckets']} pending" if r.get("pending") else ""
        # A launched command's name at attach is its launcher's, before exec.
        comm = (comms or {}).get(r["pid"], r["comm"]) if r.get("launched") else r["comm"]
        out.append(f"  PID {r['pid']} ({comm}), {count_noun(r['threads'], 'thread')}: {what}{pend}")
    if len(rows) > ATTACH_ROWS and not verbose:
        out.append(f"  ... and {len(rows) - ATTACH_ROWS} more (see --json)")
    if rest:
        out.append(f"  ... {len(rest)} more process{'es' if len(rest) != 1 else ''} (folded above, or no "
                   "lookups); -v lists them")
    return out


def _after(seen: str, pending_s: float) -> str:
    """"took over after 0.036 ms", or "at once" below what 3 decimals show."""
    return f"{seen} at once (under 1 us)" if pending_s < 0.5e-6 else f"{seen} after {pending_s * 1000:.3f} ms"


def _resize_section(resizes: list[Resize], folded: set[int] | None = None, verbose: bool = False) -> list[str]:
    """The resize list: request, inputs, result, old -> new, pending time; those
    of the processes folded above counted on one line unless verbose."""
    out = ["", "Resizes:"]
    if not resizes:
        out.append("  none seen")
    hidden = [] if verbose else [r for r in resizes if r["pid"] in (folded or set())]
    for r in (r for r in resizes if r not in hidden):
        res = "ok" if r["result"] == 0 else errno_name(r["result"])
        if r.get("result_inferred"):
            res += " (inferred)" if r["result"] is not None else " (caller not seen again)"
        if r["trigger"] == "clone":
            why = (f"clone with {count_noun(r['threads'], 'thread')}, {r['online_cpus']} online CPUs -> formula "
                   f"{r['requested']}")
        else:
            why = f"prctl(PR_FUTEX_HASH_SET_SLOTS, {r['requested']})"
        seen = "seen in use" if r.get("result_inferred") else "took over"
        pend = "pending" if r["pivot_t"] is None and r["result"] == 0 else (
            _after(seen, r["pending_s"]) if r["pending_s"] is not None else "")
        out.append(f"  +{r['t']:.3f}s PID {r['pid']} {why}: {res}, "
                   f"{r['old_buckets'] or 'global/none'} -> {r['new_buckets'] or 'global'} buckets {pend}".rstrip())
    if hidden:
        out.append(f"  ... {len(hidden)} more of the processes folded above; -v lists them")
    return out


# Processes below both limits are folded into one line, as top and perf report
# do: a system-wide recording beside one busy workload stays one screen.
FOLD_SHARE = 0.01     # under 1% of the recording's lookups...
FOLD_TOP = 10         # ...or beyond the 10 busiest: folded (targets never are)


def fold_processes(rec: Recording) -> tuple[list[Process], list[Process]]:
    """(processes shown in full, processes folded): the busiest FOLD_TOP with at
    least FOLD_SHARE of the lookups, and every -p target or launched command."""
    procs = rec["processes"]
    total = sum(p["lookups"] for p in procs) or 1
    targets = set((rec.get("hash_at_attach") or {}).get("targets") or [])
    targets.add((rec.get("command") or {}).get("pid"))
    shown = [p for i, p in enumerate(procs)
             if p["pid"] in targets or (i < FOLD_TOP and p["lookups"] >= FOLD_SHARE * total)]
    ids = {id(p) for p in shown}
    return shown, [p for p in procs if id(p) not in ids]


def _folded_section(folded: list[Process], verbose: bool) -> list[str]:
    if not folded:
        return []
    n, lookups = len(folded), sum(p["lookups"] for p in folded)
    head = (f"... {n} more process{'es' if n != 1 else ''}, {lookups} lookups "
            f"(each under {FOLD_SHARE:.0%} of all, or beyond the {FOLD_TOP} busiest)")
    if not verbose:
        return ["", head + "; -v lists them"]
    out = ["", head + ":"]
    for p in folded:
        hashes = ", ".join(f"{_buckets_desc(h)} {h['lookups']}" for h in p["hashes"])
        out.append(f"  PID {p['pid']} ({p['comm']}): {p['lookups']} lookups ({hashes})")
    return out


def _thread_lines(rec: Recording, pid: int) -> list[str]:
    """Thread births and exits in the window: the churn behind automatic resizes."""
    events = [e for e in rec.get("threads", []) if e["pid"] == pid]
    if not events:
        return []
    born = [e for e in events if e["event"] == "new"]
    died = [e for e in events if e["event"] == "exit" and e["tid"] != pid]
    # nr_threads of a birth counts the new thread (the kernel's count after it).
    peak = f" (up to {max(e['nr_threads'] for e in born)} at once)" if born else ""
    ended = "; then the process exited" if any(e["event"] == "exit" and e["tid"] == pid for e in events) else ""
    dropped = rec["totals"].get("thread_events_dropped")
    more = f"; {dropped:,} more births/exits of traced processes not kept" if dropped else ""
    return [f"  threads in the window: {len(born):,} created, {len(died):,} exited{peak}{ended}{more}"]


def _process_blocks(rec: Recording, shown: list[Process]) -> list[str]:
    """One block per process shown in full: its hash, refcount time, each hash it used."""
    costs = {c["pid"]: c for c in rec.get("resize_cost") or resize_cost(rec)}
    out: list[str] = []
    shared_said = False
    for p in shown:
        out += ["", f"PID {p['pid']} ({p['comm']}): {p['lookups']:,} lookups"]
        if p["pid"] in costs:
            out += [f"  hash at the end: {installed_text(costs[p['pid']])}",
                    *(f"  {line}" for line in [atomic_text(costs[p["pid"]])] if line)]
        out += _thread_lines(rec, p["pid"])
        for h in p["hashes"]:
            out += _hash_section(h, shared_said, p.get("futex_names"))
            shared_said = shared_said or h["kind"] == "global_shared"
    return out


def method_lines(m: Method) -> list[str]:
    """The method, why (one line per method skipped), its probes, and one line
    per blind spot: a paragraph of semicolons is read by nobody."""
    reasons = re.split(r"; (?=[\w-]+ not usable: )", m["why"])
    return [f"Method: {m['name']}", *(f"  {why}" for why in reasons if why),
            f"  probes: {', '.join(m['probes'])}"
            + (f" (fallback: {m['probes_fallback']})" if m.get("probes_fallback") else ""),
            *blind_spot_lines(m["blind_spots"], "  ")]


def render_text(rec: Recording, verbose: bool = False) -> str:
    t = rec["totals"]
    m = rec["method"]
    # The figures first; how they were taken (the same for every run on this
    # kernel) closes the report.
    out = [f"Lookups: {t['lookups']:,} in {rec['duration_s']:.2f} s ({t['lookups_per_s']:,.0f}/s); "
           f"private hash {t['private']:,}, global hash {t['global']:,}"]
    causes = t.get("unattributed_causes", {"map_full": t["unattributed"]})
    if causes.get("map_full"):
        out.append(f"  {causes['map_full']} lookups not attributed to a bucket: buckets map full")
    out += _futex_list_lines(t.get("futex_list"))
    if causes.get("user_memory_unreadable"):
        out.append(f"  {causes['user_memory_unreadable']} lookups not attributed: their key (a futex_waitv "
                   "entry or a FUTEX2_NUMA node) was on a user page BPF could not read")
    if t.get("mpol_assumed_no_policy"):
        out.append(f"  {t['mpol_assumed_no_policy']} FUTEX2_MPOL lookups counted as if their memory had no "
                   "NUMA policy (the tracepoint cannot see it; with one, the kernel uses that node's table)")
    if t["lost_events"]:
        out.append(f"  {t['lost_events']} events lost: ring buffer full")
    if t.get("missed_runs"):
        those = "that run" if t["missed_runs"] == 1 else "those runs"
        out.append(f"  {count_noun(t['missed_runs'], 'probe run')} skipped by the kernel (one of ours was "
                   "already running on that CPU: nested BPF, or preempted where syscall tracepoints are "
                   f"preemptible): any lookups of {those} are not counted")
    if t.get("read_faults"):
        out.append(f"  {t['read_faults']} kernel/user reads failed")
    if t.get("kernel_mismatch"):
        out.append(f"  {t['kernel_mismatch']} lookups where the computed bucket differed from the kernel's")
    shown, folded = fold_processes(rec)
    out += _process_blocks(rec, shown)
    out += _folded_section(folded, verbose)
    out += ["", "Per CPU:", f"  {'cpu':>4} {'node':>4} {'lookups':>12} {'private':>12} {'global':>12} {'atomic':>8}"]
    for r in rec["per_cpu"]:
        out.append(f"  {r['cpu']:>4} {r['node']:>4} {r['lookups']:>12,} {r['private']:>12,} {r['global']:>12,} "
                   f"{r['atomic']:>8,}")
    out += ["Per node:", f"  {'node':>4} {'cpus':>10} {'lookups':>12} {'private':>12} {'global':>12}"]
    for r in rec["per_node"]:
        cpus = ",".join(map(str, r["cpus"]))
        out.append(f"  {r['node']:>4} {cpus:>10} {r['lookups']:>12,} {r['private']:>12,} {r['global']:>12,}")
    rc = rec["refcount"]
    out += ["", f"Refcount, {rc['source']}:"]
    if rec["totals"].get("private") == 0:     # the refcount is the private hash's: nothing to count
        out.append("  n/a: no private-hash lookup was traced")
    else:
        out.append(f"  get: {rc['get_percpu']:,} per-CPU, {rc['get_atomic']:,} shared atomic; "
                   f"put: {rc['put_percpu']:,} per-CPU, {rc['put_atomic']:,} shared atomic")
    shown_pids, folded_pids = {p["pid"] for p in shown}, {p["pid"] for p in folded}
    out += lockwait_lines(rec.get("contention"),
                            names={p["pid"]: p["futex_names"] for p in rec["processes"] if p.get("futex_names")})
    out += _attach_section(rec.get("hash_at_attach"), shown_pids, folded_pids, verbose,
                           {p["pid"]: p["comm"] for p in rec["processes"]})
    out += _resize_section(rec["resizes"], folded_pids, verbose)
    out += ["", *method_lines(m)]
    return "\n".join(out)
