"""bucket-time.png: a bucket × time heat map (after Gregg's latency heat maps) of
the busiest process's main hash: one column per interval (`record -i`), one row
per bucket, colour = lookups/s in that bucket over the interval (log scale,
white for none). A hot bucket is a bright row; a resize changes the rows in use."""
from __future__ import annotations

from pathlib import Path

from futextrace.output.plots.figure import pyplot
from futextrace.output.plots.buckets import bucket_index
from futextrace.output.plots.common import pid_names, save, who
from futextrace.recording import Interval, Recording


def _busiest(intervals: list[Interval]) -> int | None:
    totals: dict[int, int] = {}
    for iv in intervals:
        for p in iv.get("processes") or []:
            if p.get("bucket_counts"):
                totals[p["pid"]] = totals.get(p["pid"], 0) + p.get("lookups", 0)
    return max(totals, key=totals.get) if totals else None


def _hash_size(name: str | None) -> int:
    """`private N` → N; anything else: unknown (0)."""
    parts = (name or "").split()
    return int(parts[1]) if len(parts) == 2 and parts[0] == "private" and parts[1].isdigit() else 0


def _matrix(intervals: list[Interval], pid: int) -> tuple[list[float], list[list[float]], int]:
    """(x edges, rows × columns of lookups/s, bucket rows)."""
    cols, edges = [], []
    for iv in intervals:
        p = next((p for p in iv.get("processes") or [] if p["pid"] == pid), None)
        span = iv.get("interval_s") or 1.0
        start = iv["t"] - span
        if not edges:
            edges.append(max(0.0, start))
        edges.append(iv["t"])
        size = _hash_size(p.get("hash")) if p else 0
        per_node = size or 1 << 30
        col: dict[int, int] = {}
        for k, n in ((p or {}).get("bucket_counts") or {}).items():   # summed: "0" and "0:0" alike
            # per second: a slow poll stretches an interval, and columns must compare
            col[bucket_index(k, per_node)] = col.get(bucket_index(k, per_node), 0) + n / span
        cols.append(col)
    rows = max([max(c, default=-1) + 1 for c in cols]
               + [_hash_size(p.get("hash")) for iv in intervals for p in iv.get("processes") or []
                  if p["pid"] == pid] + [1])
    grid = [[c.get(b, float("nan")) for c in cols] for b in range(rows)]
    return edges, grid, rows


def plot_heatmap(rec: Recording, path: Path) -> Path:
    return save(figure_heatmap(rec), path)


def figure_heatmap(rec: Recording):
    from matplotlib.colors import LogNorm
    plt = pyplot()
    intervals = rec.get("intervals") or []
    pid = _busiest(intervals)
    fig, ax = plt.subplots(figsize=(10, 4.8), dpi=110, layout="constrained")
    if pid is None:
        ax.set_title("Lookups per bucket over time", fontweight="bold")
        ax.text(0.5, 0.5, "no per-interval bucket counts in this recording\n"
                "(record with -i SECONDS; older recordings do not keep them)",
                ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    edges, grid, rows = _matrix(intervals, pid)
    values = [v for row in grid for v in row if v == v and v > 0]
    cmap = plt.get_cmap("inferno_r").with_extremes(bad="white")
    mesh = ax.pcolormesh(edges, range(rows + 1), grid, cmap=cmap, shading="flat",
                         norm=LogNorm(vmin=max(1, min(values, default=1)), vmax=max(values, default=1) * 1.0001))
    fig.colorbar(mesh, ax=ax, label="lookups/s in the bucket over the interval")
    for r in rec.get("resizes") or []:
        if r.get("pid") == pid and r.get("result") == 0 and r.get("pivot_t") is not None:
            ax.axvline(r["pivot_t"], color="tab:blue", ls="--", lw=1.2)
    ax.set_ylim(0, rows)
    ax.set_xlim(edges[0], edges[-1])
    ax.set_ylabel("bucket index")
    ax.set_xlabel("time since recording started (s)" + ("; dashed: a new hash in use" if any(
        r.get("pid") == pid and r.get("pivot_t") is not None for r in rec.get("resizes") or []) else ""))
    ax.set_title(f"Lookups per bucket over time: {who(pid_names(rec), pid)}, its busiest hash per interval",
                 fontweight="bold")
    return fig
