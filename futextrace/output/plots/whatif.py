"""whatif.png: explain's what-if table as curves, for the busiest process with a
per-futex list: futexes sharing a bucket and the busiest bucket's share of the
lookups against 16 … 131072 buckets, the current size and the smallest size
that keeps every hot futex in a bucket of its own marked."""
from __future__ import annotations

import textwrap
from pathlib import Path

from futextrace.analysis import whatif
from futextrace.output.plots.figure import pyplot
from futextrace.output.plots.common import FOOTNOTE_CHARS, pid_names, pow2_label, save, who
from futextrace.output.text.whatif_text import worded_table
from futextrace.recording import Process, Recording


def _subject(rec: Recording) -> tuple[Process, dict, int] | None:
    """(process, its what-if table, its current private buckets or 0) for the
    busiest process that has a per-futex list."""
    bucket_bytes = (rec.get("kernel") or {}).get("futex_hash_bucket_size")
    for p in rec.get("processes") or []:
        table = worded_table(whatif.table(p.get("futex_list") or {}, bucket_bytes))
        if table:
            private = [h for h in p.get("hashes") or [] if h.get("kind") == "private"]
            current = max(private, key=lambda h: h.get("lookups", 0))["buckets"] if private else 0
            return p, table, current
    return None


def plot_whatif(rec: Recording, path: Path) -> Path:
    return save(figure_whatif(rec), path)


def figure_whatif(rec: Recording):
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator, PercentFormatter
    plt = pyplot()
    fig, (shared, busiest) = plt.subplots(2, 1, figsize=(10, 6), dpi=110, sharex=True, layout="constrained")
    subject = _subject(rec)
    if subject is None:
        fig.suptitle("What-if sizing: no per-futex list in this recording", fontweight="bold")
        for ax in (shared, busiest):
            ax.set_axis_off()
        return fig
    p, table, current = subject
    xs = [r["buckets"] for r in table["rows"]]
    shared.plot(xs, [r["futexes_sharing"] for r in table["rows"]], "o-", color="tab:blue", ms=4,
                label="collisions (futexes beyond one per bucket)")
    shared.plot(xs, [r["hot_sharing"] for r in table["rows"]], "s--", color="tab:red", ms=4,
                label=f"hot futexes sharing a bucket ({table['hot']} hot)")
    busiest.plot(xs, [100 * r["busiest_share"] for r in table["rows"]], "o-", color="tab:purple", ms=4,
                 label="busiest bucket's share of the lookups")
    best = table["smallest_without_hot_sharing"]
    for ax in (shared, busiest):
        if current:
            ax.axvline(current, color="0.3", ls="-", lw=1.5, label=f"current: {current} buckets")
        if best:
            ax.axvline(best, color="tab:green", ls="--", lw=1.8,
                       label=f"smallest with no hot futex sharing: {best}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    shared.set_ylim(bottom=0)
    shared.set_ylabel("futexes")
    busiest.set_ylim(0, 105)
    busiest.yaxis.set_major_formatter(PercentFormatter())
    busiest.set_ylabel("busiest bucket")
    busiest.set_xscale("log", base=2)
    busiest.xaxis.set_major_locator(FixedLocator(xs))
    busiest.xaxis.set_minor_locator(NullLocator())
    busiest.xaxis.set_major_formatter(FuncFormatter(pow2_label))
    busiest.set_xlabel("private hash buckets (PR_FUTEX_HASH_SET_SLOTS)")
    names = pid_names(rec)
    details = [h.get("futex_detail") or {} for h in p.get("hashes", [])]
    unlisted = sum(d.get("futexes_unlisted", 0) for d in details)
    missed = sum(d.get("lookups_missed", 0) for d in details)      # recordings before the first-seen filter
    fig.suptitle(f"What-if sizing for {who(names, p['pid'])}: {table['futexes']:,} futexes"
                 + (f" listed, {unlisted:,} more beyond the list" if unlisted else ""), fontweight="bold")
    partial = list(table["notes"])
    if unlisted:
        partial.append(f"{unlisted:,} futexes beyond the per-futex list are not in these curves")
    if missed:
        partial.append("futexes whose lookups the per-futex list missed are not in these curves")
    notes = [("Partial: " if partial else "") + "; ".join(partial)] if partial else []
    if table["lookups"] < p.get("lookups", 0):
        notes.append(f"the busiest-bucket share weighs each futex by the lookups the list holds for it "
                     f"({table['lookups']:,} of {p.get('lookups', 0):,}: its first lookup and its stays in "
                     "the lookup cache), a lower bound per futex")
    if not table["hot"]:
        notes.append(f"no hot futex ({table['hot_rule']}): no size stands out")
    if notes:
        text = ". ".join(n[:1].upper() + n[1:] for n in notes) + "."
        fig.supxlabel("\n".join(textwrap.wrap(text, FOOTNOTE_CHARS)),
                      fontsize=8, x=0.01, ha="left", color="0.25")
    return fig
