"""The ramp picture, one column of panels sharing the time axis: ops/s per
interval (from 0), threads started and the workload's own GET_SLOTS as step
lines, and the share of each interval spent with the refcount atomic (a
replacement pending). Every resize is a vertical line named in the legend."""
from __future__ import annotations

from pathlib import Path

from futextrace.output.plots.common import pow2_label
from futextrace.output.plots.figure import pyplot, plot_path, save_figure
from futextrace.output.text.bench_text import ramp_warning

COLORS = ("tab:blue", "tab:orange")
STYLES = {"request": ":", "pivot": "--"}


def _label(run: dict) -> str:
    b = run["buckets_requested"]
    return "automatic" if b < 0 else f"{b} set at start"


def _resize_lines(axes, run: dict, color: str) -> None:
    """A dotted line at each request, a dashed one at its pivot, on every panel;
    one legend entry per resize (on the top panel)."""
    for r in run["resizes"]:
        if r.get("result") != 0:
            continue
        old = r.get("old_buckets") or "global"
        what = f"{_label(run)}: {old}→{r['new_buckets']} ({r.get('trigger')})"
        pivot = r.get("pivot_t")
        same = pivot is not None and abs(pivot - r["t"]) < 1e-4
        for i, ax in enumerate(axes):
            ax.axvline(r["t"], color=color, ls=STYLES["request"] if not same else "-", lw=1, alpha=0.8,
                       label=(f"{what} at {r['t']:.3f} s" + (", in use at once" if same else "")) if i == 0 else None)
            if pivot is not None and not same:
                ax.axvline(pivot, color=color, ls=STYLES["pivot"], lw=1, alpha=0.8,
                           label=f"{what} in use at {pivot:.3f} s" if i == 0 else None)


def _atomic_label(doc: dict) -> str:
    sources = {r["cost"]["atomic"].get("source") for r in doc["runs"]}
    return "atomic refc.\n% of interval" + ("\n(inferred)" if "inferred" in sources else "")


def _slots_axis(ax, values: list[int]) -> None:
    """log2, ticked only at the sizes the runs had (0, the global hash, on a symlog axis)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    used = sorted(set(values))
    if not used:
        return
    if used[0] == 0:
        ax.set_yscale("symlog", base=2, linthresh=1, linscale=0.3)
    else:
        ax.set_yscale("log", base=2)
    top = max(used[-1], 1)
    ax.set_ylim(-0.2 if used[0] == 0 else used[0] / 1.6, top * 1.6)
    ax.yaxis.set_major_locator(FixedLocator(used if len(used) <= 5 else used[::len(used) // 5 + 1]))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "global" if v == 0 else pow2_label(v)))


def plot_ramp(doc: dict, path: str) -> Path:
    out = plot_path(path)
    plt = pyplot()
    fig, (top, threads, slots, atomic) = plt.subplots(
        4, 1, figsize=(10, 8.5), dpi=120, sharex=True, layout="constrained",
        gridspec_kw={"height_ratios": [3, 1, 1, 1]})
    peak = 0.0
    for run, color in zip(doc["runs"], COLORS):
        pts = run["points"]
        xs = [p["t"] for p in pts]
        ops = [p["ops_per_s"] / 1e6 for p in pts]
        peak = max([peak, *ops])
        top.step(xs, ops, where="pre", color=color, lw=1.6, label=f"{_label(run)}: M ops/s")
        threads.step(xs, [p["threads"] for p in pts], where="post", color=color, lw=1.5)
        slots.step(xs, [p["slots"] for p in pts], where="post", color=color, lw=1.5)
        atomic.step(xs, [100 * p.get("atomic_share", 0.0) for p in pts], where="pre", color=color, lw=1.4)
        _resize_lines((top, threads, slots, atomic), run, color)
    o = doc["options"]
    top.set_ylim(0, max(peak, 1e-3) * 1.1)
    top.set_ylabel("M ops/s per interval")
    top.set_title(f"Throughput through a resize: a thread every {o['step_ms']} ms up to {o['threads']}, "
                  f"{o['futexes']} futexes each, a sample every {o['interval_ms']} ms", fontsize=10)
    top.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False,
               title="runs; resizes (dotted: request, dashed: in use)", title_fontsize=7)
    threads.set_ylim(0, (o.get("threads") or 1) * 1.15)
    threads.set_ylabel("threads\nstarted")
    threads.locator_params(axis="y", integer=True, nbins=4)
    _slots_axis(slots, [p["slots"] for run in doc["runs"] for p in run["points"]])
    slots.set_ylabel("buckets\n(GET_SLOTS)")
    atomic.set_ylim(0, 105)
    atomic.set_ylabel(_atomic_label(doc))
    atomic.set_xlabel("seconds since the recording started")
    for ax in (top, threads, slots, atomic):
        ax.grid(alpha=0.3)
        ax.set_xlim(left=0)
    warnings = sorted({w for w in map(ramp_warning, doc["runs"]) if w})
    if warnings:
        fig.supxlabel("\n".join(warnings), fontsize=8, color="tab:red", x=0.01, ha="left")
    return save_figure(fig, out)
