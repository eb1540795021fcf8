"""The ramp picture: ops/s over time per run, allocation and pivot markers,
and underneath the share of each interval spent with refcounts atomic."""
from __future__ import annotations

from pathlib import Path

from futextrace.output.plots import _pyplot, plot_path, save_figure

COLORS = ("tab:blue", "tab:orange")


def _markers(ax, run: dict, color: str) -> None:
    for r in run["resizes"]:
        if r["result"] != 0:
            continue
        ax.axvline(r["t"], color=color, ls=":", lw=1)
        if r["pivot_t"] is not None and r["pivot_t"] != r["t"]:
            ax.axvline(r["pivot_t"], color=color, ls="--", lw=1)
        ax.annotate(f"{r['old_buckets'] or '-'}→{r['new_buckets']}", (r["t"], 1), xycoords=("data", "axes fraction"),
                    fontsize=7, color=color, rotation=90, va="top", ha="right")


def plot_ramp(doc: dict, path: str) -> Path:
    out = plot_path(path)
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), dpi=120, sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    for run, color in zip(doc["runs"], COLORS):
        xs = [p["t"] for p in run["points"]]
        label = "automatic" if run["buckets_requested"] < 0 else f"{run['buckets_requested']} set at start"
        top.plot(xs, [p["ops_per_s"] / 1e6 for p in run["points"]], color=color, lw=1.6, label=label)
        bottom.step(xs, [p.get("atomic_share", 0.0) for p in run["points"]], where="pre", color=color, lw=1.4)
        _markers(top, run, color)
    o = doc["options"]
    top.set_ylabel("M ops/s (per interval)")
    top.set_title(f"Throughput through a resize: a thread every {o['step_ms']} ms up to {o['threads']}, "
                  f"{o['futexes']} futexes each (dotted: allocation, dashed: pivot)", fontsize=9)
    top.legend(fontsize=8, loc="lower right")
    top.grid(alpha=0.3)
    bottom.set_ylabel("atomic share")
    bottom.set_ylim(-0.05, 1.05)
    bottom.set_xlabel("seconds since the recording started")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, out)
