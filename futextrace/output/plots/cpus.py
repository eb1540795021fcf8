"""cpus.png: lookups per CPU as absolute stacked bars (private hash, global hash),
with the private lookups made while the refcount was atomic hatched inside the
private part. CPUs are laid out node by node; beyond GROUP_BY_NODE CPUs each node
gets a labelled group and only some CPUs are numbered, so 128 CPUs stay readable."""
from __future__ import annotations

from pathlib import Path

from futextrace.output.plots.figure import pyplot
from futextrace.output.plots.common import save
from futextrace.recording import CpuRow, Recording

GROUP_BY_NODE = 32      # more CPUs than this: gaps and labels between nodes
GAP = 2                 # bar widths between two nodes' groups
MAX_CPU_TICKS = 32      # number at most this many CPUs on the axis


def _positions(rows: list[CpuRow]) -> tuple[list[float], list[tuple[int, float, float]]]:
    """x of each row (rows sorted by node, then CPU) and (node, first x, last x) per node."""
    xs, groups, x, prev = [], [], 0.0, None
    grouped = len(rows) > GROUP_BY_NODE
    for r in rows:
        if prev is not None and r.get("node") != prev:
            x += GAP if grouped else 0
        if not groups or groups[-1][0] != r.get("node"):
            groups.append((r.get("node"), x, x))
        groups[-1] = (groups[-1][0], groups[-1][1], x)
        xs.append(x)
        prev = r.get("node")
        x += 1
    return xs, groups


def _ticks(ax, rows: list[CpuRow], xs: list[float]) -> None:
    step = 1
    while len(rows) / step > MAX_CPU_TICKS:
        step *= 2
    picked = [i for i, r in enumerate(rows) if r["cpu"] % step == 0]
    ax.set_xticks([xs[i] for i in picked], [str(rows[i]["cpu"]) for i in picked], fontsize=8,
                  rotation=0 if len(picked) <= 24 else 90)


def plot_cpus(rec: Recording, path: Path) -> Path:
    return save(figure_cpus(rec), path)


def figure_cpus(rec: Recording):
    plt = pyplot()
    rows = sorted(rec.get("per_cpu") or [], key=lambda r: (r.get("node") or 0, r["cpu"]))
    fig, ax = plt.subplots(figsize=(10 if len(rows) > 16 else 7, 4.6), dpi=110, layout="constrained")
    ax.set_title("Futex hash lookups per CPU", fontweight="bold")
    if not rows:
        ax.text(0.5, 0.5, "no per-CPU counts in this recording", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    xs, groups = _positions(rows)
    private = [r.get("private", 0) for r in rows]
    glob = [r.get("global", 0) for r in rows]
    atomic = [min(r.get("atomic", 0), r.get("private", 0)) for r in rows]
    ax.bar(xs, private, width=0.85, color="tab:blue", label="private hash")
    ax.bar(xs, glob, bottom=private, width=0.85, color="tab:orange", label="global hash")
    if any(atomic):
        ax.bar(xs, atomic, width=0.85, color="none", edgecolor="black", hatch="///", lw=0,
               label="of private: refcount atomic (resize pending)")
    ax.set_ylim(bottom=0, top=max(max(p + g for p, g in zip(private, glob)), 1) * 1.12)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylabel("lookups")
    _ticks(ax, rows, xs)
    ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
    nodes = len(groups)
    if len(rows) > GROUP_BY_NODE and nodes > 1:
        for node, lo, hi in groups:
            ax.annotate(f"node {node}", ((lo + hi) / 2, 1.0), xycoords=("data", "axes fraction"),
                        xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=8)
            ax.axvspan(lo - 0.5, hi + 0.5, color="0.5", alpha=0.06 if node % 2 else 0.0, lw=0)
        ax.set_title("Futex hash lookups per CPU, grouped by NUMA node", fontweight="bold", pad=16)
    ax.set_xlabel("CPU" + ("" if nodes > 1 else f" (all on node {groups[0][0]})"))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return fig
