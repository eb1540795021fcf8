"""Pictures of one recording (matplotlib, Agg): bucket distribution, per-CPU heat map,
resize timeline. Each function writes one PNG and returns its path."""
from __future__ import annotations

from pathlib import Path

from futextrace.output.plots import _pyplot, save_figure

MAX_PANELS = 6   # hashes drawn in the bucket figure; the busiest ones


def _save(fig, path: Path) -> Path:
    return save_figure(fig, path, bbox_inches="tight")


def _hashes(rec: dict) -> list[tuple[dict, dict]]:
    """(process, hash) pairs whose buckets are known, busiest first."""
    pairs = [(p, h) for p in rec["processes"] for h in p["hashes"] if "bucket_counts" in h]
    return sorted(pairs, key=lambda ph: -ph[1]["lookups"])[:MAX_PANELS]


def plot_buckets(rec: dict, path: Path) -> Path:
    """Lookups per bucket, buckets sorted busiest first, zeros included: a flat
    bar means an even spread, a cliff means a few hot buckets."""
    plt = _pyplot()
    pairs = _hashes(rec)
    n = max(1, len(pairs))
    fig, axes = plt.subplots(n, 1, figsize=(9, 3.2 * n + 0.6), dpi=110, squeeze=False)
    fig.suptitle("Futex hash: lookups per bucket (buckets sorted by lookups)", fontweight="bold")
    if not pairs:
        axes[0][0].text(0.5, 0.5, "no lookups with a known bucket in this recording",
                        ha="center", va="center", transform=axes[0][0].transAxes)
        axes[0][0].set_axis_off()
    for ax, (p, h) in zip((a[0] for a in axes), pairs):
        counts = sorted(h["bucket_counts"].values(), reverse=True)
        counts += [0] * max(0, h["buckets"] - len(counts))
        im = h["imbalance"]
        ax.bar(range(len(counts)), counts, width=1.0, color="tab:blue", edgecolor="none")
        ax.axhline(im["mean"], color="tab:red", ls="--", lw=1, label=f"mean {im['mean']:,.0f}")
        kind = "private hash" if h["kind"] == "private" else f"global hash ({h['kind']})"
        ax.set_title(f"PID {p['pid']} ({p['comm']}), {kind}, {h['buckets']} buckets: "
                     f"{im['used']} used, max/mean {im['max_over_mean']:.1f}, CV {im['cv']:.2f}",
                     fontsize=10)
        ax.set_xlabel(f"bucket rank (0 = busiest; {h['distinct_futexes']} distinct futexes, "
                      f"{h['collisions']} share a bucket)")
        ax.set_ylabel("lookups")
        ax.set_xlim(-0.5, len(counts) - 0.5)
        zeros = h["buckets"] - im["used"]
        ax.legend(loc="upper right", fontsize=9,
                  title=f"{zeros} buckets with 0 lookups" if zeros else None, title_fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def plot_heatmap(rec: dict, path: Path) -> Path:
    """CPU × {private, global, atomic} lookups, colour = share of the column's total,
    each cell labelled with its count; rows labelled with their NUMA node."""
    plt = _pyplot()
    rows = rec["per_cpu"]
    cols = ["private", "global", "atomic"]
    data = [[r.get(c, 0) for c in cols] for r in rows] or [[0, 0, 0]]
    totals = [sum(col) or 1 for col in zip(*data)]
    share = [[v / t for v, t in zip(row, totals)] for row in data]
    fig, ax = plt.subplots(figsize=(6.5, 1.2 + 0.45 * max(2, len(data))), dpi=110)
    img = ax.imshow(share, aspect="auto", cmap="viridis", vmin=0, vmax=1)
    for i, row in enumerate(data):
        for j, v in enumerate(row):
            ax.text(j, i, f"{v:,}", ha="center", va="center", fontsize=9,
                    color="black" if share[i][j] > 0.6 else "white")
    ax.set_xticks(range(3), ["private hash\nlookups", "global hash\nlookups",
                             "atomic-refcount\nlookups (of private)"])
    ax.set_yticks(range(len(rows)), [f"CPU {r['cpu']} (node {r['node']})" for r in rows])
    ax.set_title("Lookups per CPU (colour: share of the column's total)", fontweight="bold")
    fig.colorbar(img, ax=ax, label="share of column total")
    fig.tight_layout()
    return _save(fig, path)


LABEL_PT = 8    # font size of the trigger labels


def _place_labels(ax, labels: list[tuple]) -> None:
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


def plot_resizes(rec: dict, path: Path) -> Path:
    """Buckets over time per process: a step line through the pivots (when a new hash
    took over), open circles where a resize was requested, red crosses where refused."""
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    by_pid: dict[int, list[dict]] = {}
    for r in rec["resizes"]:
        by_pid.setdefault(r["pid"], []).append(r)
    end = rec["duration_s"]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labelled = set()
    labels = []   # (t, buckets, text, colour): placed once the axes' scales are known

    def once(name):  # one legend entry per marker kind
        if name in labelled:
            return None
        labelled.add(name)
        return name

    for i, (pid, rs) in enumerate(sorted(by_pid.items())):
        c = colours[i % len(colours)]
        xs, ys = [0.0], [rs[0]["old_buckets"] or 0]
        for r in sorted(rs, key=lambda r: r["pivot_t"] if r["pivot_t"] is not None else r["t"]):
            if r["result"] == 0 and r["pivot_t"] is not None and r["new_buckets"]:
                xs.append(r["pivot_t"])
                ys.append(r["new_buckets"])
        xs.append(max(end, xs[-1]))
        ys.append(ys[-1])
        ax.step(xs, ys, where="post", color=c, lw=2, label=f"PID {pid} ({rs[0]['comm']})")
        for r in rs:
            # A refused prctl keeps new_buckets == old_buckets: draw it at what was asked.
            asked = (r["new_buckets"] if r["result"] == 0 else r["requested"]) or r["requested"] or 0
            if r["result"] == 0:
                ax.plot(r["t"], asked, "o", mfc="none", mec=c, ms=9, label=once("requested"))
                if r["pivot_t"] is not None:
                    ax.plot(r["pivot_t"], asked, "|", color="black", ms=14, mew=2,
                            label=once("pivot (new hash in use)"))
            else:
                ax.plot(r["t"], asked, "x", color="tab:red", ms=9, mew=2,
                        label=once("request refused"))
            labels.append((r["t"], asked, r["trigger"], c))
    if not by_pid:
        ax.text(0.5, 0.5, "no resizes in this recording", ha="center", va="center",
                transform=ax.transAxes)
    else:
        ax.set_yscale("symlog", base=2, linthresh=1)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlim(0, max(end, 1e-6) * 1.02)
    if by_pid:
        _place_labels(ax, labels)
        ax.legend(fontsize=9, loc="best")
    ax.set_xlabel("time since recording started (s)")
    ax.set_ylabel("private hash buckets (0 = global hash)")
    ax.set_title("Futex private hash resizes", fontweight="bold")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def plot_recording(rec: dict, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    return [plot_buckets(rec, out_dir / "buckets.png"),
            plot_heatmap(rec, out_dir / "cpu-heatmap.png"),
            plot_resizes(rec, out_dir / "resizes.png")]
