"""Plots (matplotlib, Agg: no display needed): what every picture uses (pyplot, the
output path check, the save beside and rename), and `sweep --plot`'s figure."""
from __future__ import annotations

from pathlib import Path

from futextrace.errors import FileProblem, UsageError
from futextrace.output.jsonio import replace_with
from futextrace.output.plots.lockwaits_sweep import add_lock_wait_axis

PLOT_SUFFIXES = (".png", ".svg")
SCALE = 1e6   # ops/sec shown in millions
REFERENCE_STYLES = {"auto": ("tab:green", "--"), "global": ("tab:red", ":")}


def pyplot():
    import matplotlib
    matplotlib.use("Agg")   # headless hosts and CI: never try a GUI backend
    import matplotlib.pyplot as plt
    return plt


def plot_path(path: str) -> Path:
    """A `--plot FILE` argument, checked before any work is done."""
    out = Path(path)
    if out.suffix.lower() not in PLOT_SUFFIXES:
        raise UsageError(f"--plot: file must end in .png or .svg, got '{path}'")
    return out


def save_figure(fig, out: Path, **savefig_args) -> Path:
    """Write `fig` to `out` and free it; a write error is a FileProblem."""
    try:   # beside, then renamed: a failed write leaves the old picture
        replace_with(str(out), lambda f: fig.savefig(f, format=out.suffix[1:].lower() or None,
                                                     **savefig_args))
    except OSError as e:
        raise FileProblem(f"cannot write {out}: {e.strerror}") from None
    finally:
        fig.clf()
        pyplot().close(fig)
    return out


def plot_sweep(sweep: dict, path: str, title: str | None = None) -> Path:
    """ops/sec against bucket count (log2 x), error bars from the per-thread spread;
    the automatic size and the global hash as horizontal reference lines."""
    out = plot_path(path)
    plt = pyplot()
    points = sweep["points"]
    num = [p for p in points if p["requested"] > 0]
    fig, ax = plt.subplots(figsize=(9, 5.8), dpi=120)
    if num:
        xs = [p["requested"] for p in num]
        ys = [p["avg_ops_per_sec"] / SCALE for p in num]
        err, what = _error_bars(num, SCALE)
        ax.errorbar(xs, ys, yerr=err, marker="o", ms=5, lw=1.8, capsize=3,
                    color="tab:blue", label=f"private hash, SET_SLOTS (bars: {what})")
    for p in points:
        if p["requested"] <= 0:
            _reference_line(ax, p["buckets"], p, mark_x=bool(num))
    _axes(ax, points, sweep.get("options", {}), title)
    add_lock_wait_axis(ax, num)
    fig.tight_layout()
    return save_figure(fig, out)


def _reference_line(ax, name: str, p: dict, mark_x: bool) -> None:
    """The automatic size or the global hash: a horizontal line with its spread."""
    color, ls = REFERENCE_STYLES.get(name, ("gray", "-."))
    y = p["avg_ops_per_sec"] / SCALE
    runs = p.get("runs_ops_per_sec") or []
    if len(runs) > 1:   # same meaning as the points' bars: spread over repeated runs
        lo, hi = min(runs) / SCALE, max(runs) / SCALE
    else:
        band = p["avg_ops_per_sec"] * p["stddev_pct"] / 100 / SCALE
        lo, hi = y - band, y + band
    used = "" if p["slots"] is None else (
        f", {p['slots']} buckets" if p["slots"] > 0 else ", global")
    label = "global hash" if name == "global" else f"auto (kernel-sized{used})"
    ax.axhline(y, color=color, ls=ls, lw=1.6, label=f"{label}: {y:.2f} M")
    if hi > lo:
        ax.axhspan(lo, hi, color=color, alpha=0.08, lw=0)
    if name == "auto" and p["slots"] and mark_x:
        # mark where the automatic size sits on the x axis
        ax.plot([p["slots"]], [y], marker="D", ms=7, color=color, ls="none")


def _axes(ax, points: list[dict], opts: dict, title: str | None) -> None:
    """log2 bucket axis, labels, title from the sweep's options, legend below."""
    from matplotlib.ticker import FuncFormatter, LogLocator
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=2, numticks=40))
    ax.xaxis.set_major_formatter(FuncFormatter(_pow2_label))
    ax.xaxis.set_minor_locator(LogLocator(base=2, subs=[], numticks=40))
    ax.set_xlabel("hash buckets (PR_FUTEX_HASH_SET_SLOTS)")
    ax.set_ylabel("operations/sec per thread (millions)")
    ax.set_ylim(bottom=0, top=max(_all_y(points, SCALE), default=1) * 1.15)
    kind = "shared" if opts.get("shared") else "private"
    n = opts.get("threads")
    ax.set_title(title or f"futex hash throughput: {n} thread{'' if n == 1 else 's'} x "
                 f"{opts.get('futexes')} {kind} futexes, {opts.get('runtime'):g} s per run"
                 + (f", median of {opts['repeat']}" if opts.get("repeat", 1) > 1 else ""))
    ax.grid(True, which="major", alpha=0.3)
    # below the axes: error bars can reach any corner of the plot area
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=9,
              frameon=False)


def _error_bars(points, scale):
    """Spread over repeated runs when there are several (min..max around the median
    run), else perf's "+-": the relative standard error of the per-thread mean."""
    if all(len(p.get("runs_ops_per_sec", [])) > 1 for p in points):
        lo = [(p["avg_ops_per_sec"] - min(p["runs_ops_per_sec"])) / scale for p in points]
        hi = [(max(p["runs_ops_per_sec"]) - p["avg_ops_per_sec"]) / scale for p in points]
        return [lo, hi], f"min-max of {len(points[0]['runs_ops_per_sec'])} runs"
    return [p["avg_ops_per_sec"] * p["stddev_pct"] / 100 / scale for p in points], \
        "+- std. error over threads"


def _pow2_label(x, _pos):
    n = int(round(x))
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    return str(n)


def _all_y(points, scale):
    for p in points:
        yield p["avg_ops_per_sec"] * (1 + p["stddev_pct"] / 100) / scale
        yield max(p.get("runs_ops_per_sec") or [0]) / scale
