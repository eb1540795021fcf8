"""`futextrace diff --plot FILE`: the main figures of two recordings as
side-by-side bars, one panel per figure, one pair of bars (A, B) per process
pair. A figure a recording does not have gets no bar and a "-" where it would
stand, never a bar of 0; error bars only where the recording knows the noise."""
from __future__ import annotations

from pathlib import Path

from futextrace.output.plots.figure import plot_path, pyplot, save_figure

MAX_PAIRS = 6
COLOURS = {"a": "tab:blue", "b": "tab:orange"}
# (where, figure, title, scale): where is "process" or "hash" (the pair's busiest hash).
PANELS = [("process", "lookups_per_s", "lookups/s", 1.0),
          ("process", "wait_ms_per_s", "bucket-lock waits, ms/s", 1.0),
          ("hash", "busiest_share", "busiest bucket's share, %", 100.0),
          ("hash", "collisions", "collisions (futexes beyond one per bucket)", 1.0),
          ("process", "atomic_share", "atomic refcount share, %", 100.0),
          ("process", "throughput_ops_per_s", "benchmark ops/s", 1.0)]


def _pair_name(pair: dict) -> str:
    a, b = pair["a"], pair["b"]
    if a and b and a["pid"] != b["pid"]:
        return f"{a['comm']}\n{a['pid']} ↔ {b['pid']}"
    p = a or b
    return f"{p['comm']}\n{p['pid']}" + ("" if a and b else f"\n(only in {'A' if a else 'B'})")


def _figure(pair: dict, where: str, name: str) -> dict | None:
    if where == "process":
        return pair["figures"][name]
    return pair["hashes"][0]["figures"][name] if pair["hashes"] else None


def _error(value, noise: dict | None) -> float:
    """One standard deviation where the recording knows it, else 0 (no bar)."""
    if value is None or not noise or noise["source"] == "bounds":
        return 0.0
    if noise.get("stdev_pct") is None and noise.get("error_pct") is None:
        return noise.get("stdev") or 0.0
    return abs(value) * (noise.get("stdev_pct") or noise.get("error_pct") or 0.0) / 100


def _panel(ax, pairs: list[dict], where: str, name: str, title: str, scale: float) -> None:
    ax.set_title(title, fontsize=9)
    for k, which in enumerate(("a", "b")):
        for i, pair in enumerate(pairs):
            f = _figure(pair, where, name)
            v = None if f is None else f[which]
            x = i + (k - 0.5) * 0.38
            if v is None:   # unknown: a mark, not a bar of 0
                ax.text(x, 0, f"-\n{which.upper()}: unknown", ha="center", va="bottom", fontsize=7,
                        color=COLOURS[which])
                continue
            ax.bar(x, v * scale, width=0.36, color=COLOURS[which], label=which.upper() if i == 0 else None,
                   yerr=_error(v, f[f"noise_{which}"]) * scale or None, capsize=3)
    ax.set_xticks(range(len(pairs)), [_pair_name(p) for p in pairs], fontsize=7)
    ax.set_xlim(-0.6, len(pairs) - 0.4)   # room for an unknown's mark, which autoscaling ignores
    ax.tick_params(axis="y", labelsize=7)
    ax.set_ylim(bottom=0)


def plot_diff(cmp: dict, path: str) -> Path:
    """One picture of the comparison (analysis/compare.py's data) at `path` (.png or .svg)."""
    out = plot_path(path)
    plt = pyplot()
    pairs = cmp["processes"][:MAX_PAIRS]
    fig, axes = plt.subplots(2, 3, figsize=(12, 7), dpi=110, layout="constrained")
    for ax, (where, name, title, scale) in zip(axes.flat, PANELS):
        _panel(ax, pairs, where, name, title, scale)
    axes.flat[0].legend(fontsize=8, loc="upper right")
    rest = len(cmp["processes"]) - len(pairs)
    fig.suptitle(f"A: {cmp['a']['file'] or '?'}   B: {cmp['b']['file'] or '?'}"
                 + (f"   ({rest} more process pairs in the text)" if rest > 0 else "")
                 + "\nerror bars: the noise each recording knows (per-interval stdev, benchmark stddev, "
                 "estimate error); '-': figure not in that recording", fontsize=9)
    return save_figure(fig, out)
