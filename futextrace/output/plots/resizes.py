"""resizes.png: private-hash buckets over time per process, as a step line from
the hash at attach through each pivot (when a new hash took over). A request is
an open triangle above the line, its pivot a filled one below it, a refused
request a red cross at the size asked. Without any resize, the hash each process
had at attach is still drawn."""
from __future__ import annotations

import math
from pathlib import Path

from matplotlib.transforms import offset_copy

from futextrace.output.plots.figure import pyplot
from futextrace.output.plots.common import (add_footnote, footnote_text, pid_names, pow2_label, save,
                                            who)
from futextrace.recording import Recording, Resize

LABEL_PT = 8           # font size of the trigger labels
MAX_LINES = 8          # processes drawn; the rest are named in the footnote
MAX_LABELS = 12        # more resizes than this: no trigger labels (the markers stay)
MARK_OFFSET_PT = 7     # request markers this far above the line, pivots this far below


def place_labels(ax, labels: list[tuple]) -> None:
    """Trigger labels next to their markers, each moved up until it overlaps no
    label placed before (a prctl and the clone right after it share a point)."""
    ax.figure.canvas.draw()     # final limits and scales: data → pixels is exact
    renderer = ax.figure.canvas.get_renderer()
    placed = []
    for t, buckets, text, colour in sorted(labels, key=lambda lab: (lab[0], lab[1])):
        dy = 6
        while True:
            a = ax.annotate(text, (t, buckets), textcoords="offset points", xytext=(4, dy),
                            fontsize=LABEL_PT, color=colour)
            box = a.get_window_extent(renderer)
            if not any(box.overlaps(b) for b in placed):
                placed.append(box)
                break
            a.remove()
            dy += LABEL_PT + 2


def _start(rec: Recording, pid: int, rs: list[Resize]) -> int | None:
    """Buckets at t = 0: the hash at attach, else what the first resize replaced."""
    state = ((rec.get("hash_at_attach") or {}).get("processes") or {}).get(str(pid))
    if state is not None and state.get("buckets") is not None:
        return state["buckets"]
    if rs:
        return rs[0].get("old_buckets") or 0
    return None


def _first_seen(rec: Recording) -> dict[int, tuple[float, int]]:
    seen: dict[int, tuple[float, int]] = {}
    for s in rec.get("hash_states") or []:
        if s.get("pid") is not None and s["pid"] not in seen and s.get("buckets") is not None:
            seen[s["pid"]] = (s.get("t") or 0.0, s["buckets"])
    return seen


def _lines(rec: Recording) -> dict[int, tuple[list[float], list[int], list[Resize]]]:
    """pid → (xs, ys, resizes) for every process with a known hash."""
    by_pid: dict[int, list[Resize]] = {}
    for r in rec.get("resizes") or []:
        by_pid.setdefault(r["pid"], []).append(r)
    attach = ((rec.get("hash_at_attach") or {}).get("processes") or {})
    seen = _first_seen(rec)
    pids = set(by_pid) | {int(k) for k, s in attach.items() if s.get("kind") in ("private", "global")} | set(seen)
    end = rec.get("duration_s") or 0.0
    out = {}
    for pid in pids:
        rs = sorted(by_pid.get(pid, []), key=lambda r: r["pivot_t"] if r.get("pivot_t") is not None else r["t"])
        start = _start(rec, pid, rs)
        # not known at attach: the line starts where the process was first seen, not at 0
        at_attach = str(pid) in attach
        first = min(([seen[pid][0]] if pid in seen else []) + [r["t"] for r in rs[:1]], default=0.0)
        x0 = 0.0 if at_attach else first
        xs, ys = ([x0], [start]) if start is not None else ([seen[pid][0]], [seen[pid][1]])
        for r in rs:
            if r.get("result") == 0 and r.get("pivot_t") is not None and r.get("new_buckets") is not None:
                xs.append(r["pivot_t"])
                ys.append(r["new_buckets"])
        xs.append(max(end, xs[-1]))
        ys.append(ys[-1])
        out[pid] = (xs, ys, rs)
    return out


def _pow2_axis(ax, values: list[int]) -> None:
    """symlog base 2 (0 = the global hash), ticks only at sizes the kernel uses."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    nonzero = [v for v in values if v > 0]
    lo = int(math.log2(min(nonzero))) if nonzero else 1
    hi = int(math.ceil(math.log2(max(nonzero)))) if nonzero else 1
    step = max(1, math.ceil((hi - lo + 1) / 10))
    ticks = [0] + [1 << k for k in range(lo, hi + 1, step)]
    ax.set_yscale("symlog", base=2, linthresh=1, linscale=0.5)
    ax.set_ylim(-0.3, (1 << hi) * 2.2)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "0 (global)" if v == 0 else pow2_label(v)))


def _markers(ax, rs: list[Resize], colour: str, once, labels: list) -> None:
    fig = ax.figure
    above = offset_copy(ax.transData, fig=fig, y=MARK_OFFSET_PT, units="points")
    below = offset_copy(ax.transData, fig=fig, y=-MARK_OFFSET_PT, units="points")
    for r in rs:
        asked = (r.get("new_buckets") if r.get("result") == 0 else r.get("requested")) or r.get("requested") or 0
        if r.get("result") == 0:
            ax.plot(r["t"], asked, "v", mfc="white", mec=colour, mew=1.5, ms=8, transform=above,
                    label=once("resize requested (open, above)"))
            if r.get("pivot_t") is not None:
                ax.plot(r["pivot_t"], asked, "^", color=colour, mec="black", mew=0.6, ms=8, transform=below,
                        label=once("new hash in use: pivot (filled, below)"))
        else:
            ax.plot(r["t"], asked, "x", color="tab:red", ms=9, mew=2,
                    label=once("request refused"))
        labels.append((r["t"], asked, r.get("trigger") or "?", colour))


def plot_resizes(rec: Recording, path: Path) -> Path:
    return save(figure_resizes(rec), path)


def _unchanged_groups(lines: dict, pids: list[int], names: dict) -> list[tuple[int, str]]:
    """Processes whose hash never changed, one group per size: (buckets, label)."""
    by_size: dict[int, list[int]] = {}
    for pid in pids:
        by_size.setdefault(lines[pid][1][0], []).append(pid)
    out = []
    for size, group in sorted(by_size.items()):
        shown = ", ".join(who(names, p) for p in group[:2])
        more = f" and {len(group) - 2} more" if len(group) > 2 else ""
        # two lines: a long legend entry would squeeze the axes
        out.append((size, f"{shown}{more}:\n{'global hash' if size == 0 else f'{size} buckets'}, unchanged"))
    return out


def figure_resizes(rec: Recording):
    plt = pyplot()
    names = pid_names(rec)
    lookups = {p["pid"]: p.get("lookups", 0) for p in rec.get("processes") or []}
    lines = _lines(rec)
    changed = sorted((p for p in lines if lines[p][2] or len(set(lines[p][1])) > 1),
                     key=lambda pid: (-len(lines[pid][2]), -lookups.get(pid, 0), pid))
    drawn, folded = changed[:MAX_LINES], changed[MAX_LINES:]
    steady = sorted((p for p in lines if p not in changed), key=lambda pid: (-lookups.get(pid, 0), pid))
    fig, ax = plt.subplots(figsize=(10, 4.8), dpi=110, layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labelled, labels = set(), []

    def once(name):  # one legend entry per marker kind
        if name in labelled:
            return None
        labelled.add(name)
        return name

    for i, pid in enumerate(drawn):
        xs, ys, rs = lines[pid]
        c = colours[i % len(colours)]
        ax.step(xs, ys, where="post", color=c, lw=2, label=who(names, pid))
        _markers(ax, rs, c, once, labels)
    end = rec.get("duration_s") or 0.0
    for size, label in _unchanged_groups(lines, steady, names):
        # one line per size: processes that kept the same hash would hide one another
        ax.step([0.0, max(end, 1e-6)], [size, size], where="post", color="0.45", lw=1.5, ls="--",
                label=label)
    n_resizes = sum(len(lines[p][2]) for p in drawn)
    ax.set_xlim(0, max(end, 1e-6) * 1.02)
    if not lines:
        ax.text(0.5, 0.5, "no process with a known private hash, and no resizes, in this recording",
                ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
    else:
        _pow2_axis(ax, [y for pid in drawn + steady for y in lines[pid][1]]
                   + [r.get("requested") or 0 for pid in drawn for r in lines[pid][2]])
        if n_resizes <= MAX_LABELS:
            place_labels(ax, labels)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    ax.set_xlabel("time since recording started (s)")
    ax.set_ylabel("private hash buckets")
    ax.set_title("Futex private hash size over time" + ("" if n_resizes else
                 ": no resize during the recording (the hash at attach)"), fontweight="bold")
    ax.grid(alpha=0.3)
    add_footnote(fig, footnote_text(f"Resized, not drawn (beyond the {MAX_LINES} with most resizes):",
                                    [who(names, pid) for pid in folded]))
    return fig
