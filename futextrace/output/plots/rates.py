"""rates.png: lookups per second per process over the recording, from the
per-interval rates (`record -i`), with each resize request and pivot marked."""
from __future__ import annotations

from pathlib import Path

from futextrace.output.plots.figure import pyplot
from futextrace.output.plots.common import (MAX_PANELS, add_footnote, footnote_text, pid_names, save,
                                            who)
from futextrace.recording import Recording


def _series(rec: Recording) -> dict[int, tuple[list[float], list[float]]]:
    """pid → (interval ends, lookups/s): 0 in an interval where it made none."""
    intervals = rec.get("intervals") or []
    pids = {p["pid"] for iv in intervals for p in iv.get("processes") or []}
    out = {pid: ([], []) for pid in pids}
    for iv in intervals:
        rates = {p["pid"]: p.get("lookups_per_s", 0.0) for p in iv.get("processes") or []}
        for pid in pids:
            out[pid][0].append(iv["t"])
            out[pid][1].append(rates.get(pid, 0.0))
    return out


def plot_rates(rec: Recording, path: Path) -> Path:
    return save(figure_rates(rec), path)


def figure_rates(rec: Recording):
    plt = pyplot()
    names = pid_names(rec)
    series = _series(rec)
    fig, ax = plt.subplots(figsize=(10, 4.6), dpi=110, layout="constrained")
    ax.set_title("Futex hash lookups per second, per process", fontweight="bold")
    if not series:
        ax.text(0.5, 0.5, "no per-interval rates in this recording (record with -i SECONDS for a time axis)",
                ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    order = sorted(series, key=lambda pid: (-sum(series[pid][1]), pid))
    drawn, folded = order[:MAX_PANELS], order[MAX_PANELS:]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    top = 0.0
    first = rec["intervals"][0]
    start = max(0.0, first["t"] - (first.get("interval_s") or 0.0))
    for i, pid in enumerate(drawn):
        xs, ys = series[pid]
        top = max([top, *ys])
        # each rate holds over its interval, which ends at its t: the first one starts at `start`
        ax.step([start, *xs], [ys[0], *ys], where="pre", color=colours[i % len(colours)], lw=1.6, label=who(names, pid))
    marked = set()
    for r in rec.get("resizes") or []:
        if r.get("pid") not in drawn or r.get("result") != 0:
            continue
        c = colours[drawn.index(r["pid"]) % len(colours)]
        ax.axvline(r["t"], color=c, ls=":", lw=1, label=None if "req" in marked else "resize requested")
        marked.add("req")
        if r.get("pivot_t") is not None:
            ax.axvline(r["pivot_t"], color=c, ls="--", lw=1, label=None if "piv" in marked else "new hash in use")
            marked.add("piv")
    ax.set_ylim(0, max(top, 1) * 1.1)
    ax.set_xlim(0, max(rec.get("duration_s") or 0, max(series[drawn[0]][0])) * 1.01)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylabel("lookups/s (per interval)")
    ax.set_xlabel("time since recording started (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    add_footnote(fig, footnote_text(f"Not drawn (beyond the {MAX_PANELS} busiest):",
                                    [who(names, pid) for pid in folded]))
    return fig
