"""buckets.png: each busy hash's buckets in index order, every bar stacked by the
futexes in that bucket (the busiest futexes coloured, the rest grey), and under
it the distinct futexes per bucket: one tall single-colour bar is a hot futex,
a bar of several colours or a count above 1 is futexes colliding."""
from __future__ import annotations

from pathlib import Path

from futextrace.analysis.whatif import HOT_SHARE
from futextrace.kernel.jhash import private_hash
from futextrace.output.plots import lockwaits
from futextrace.output.text.estimates import approx
from futextrace.output.plots.figure import pyplot
from futextrace.output.plots.common import (MAX_PANELS, add_footnote, fold_threshold, footnote_text,
                                            pid_names, save, who)
from futextrace.recording import HashSummary, Process, Recording

TOP_FUTEXES = 6          # futexes given a colour of their own, per panel
LOG_SPAN = 100           # log y once the busiest used bucket has over 100x the quietest
OTHER = "0.72"           # grey: every other lookup


def bucket_index(key: str, per_node: int) -> int:
    """`"bucket"` (private) or `"node:bucket"` (global) as one x position."""
    node, _, bucket = key.rpartition(":")
    return (int(node) * per_node if node else 0) + int(bucket)


def _per_node(rec: Recording, h: HashSummary) -> int:
    if h["kind"] == "private":
        return h["buckets"]
    nodes = ((rec.get("kernel") or {}).get("global_hash") or {}).get("nodes") or 1
    return max(1, h["buckets"] // nodes)


def _futex_lookups(proc: Process) -> dict[int, int]:
    listed = (proc.get("futex_list") or {}).get("listed") or []
    return {int(f["uaddr"], 16): f["lookups"] for f in listed}


def _members(rec: Recording, proc: Process, h: HashSummary, futexes: dict[int, int]) -> dict[int, list[int]]:
    """x position → listed futex addresses in that bucket. A private futex's bucket
    is computed (it depends on the address alone); a global one's is known only
    for the hottest buckets, whose addresses the recording lists."""
    per_node = _per_node(rec, h)
    used = {bucket_index(k, per_node) for k in h.get("bucket_counts", {})}
    out: dict[int, list[int]] = {}
    if h["kind"] == "private":
        for addr in futexes:
            b = private_hash(addr) & (h["buckets"] - 1)
            if b in used:
                out.setdefault(b, []).append(addr)
        return out
    for hot in h.get("hottest") or []:
        b = (hot.get("node") or 0) * per_node + hot["bucket"] if hot.get("node") is not None else hot["bucket"]
        out[b] = [int(a, 16) for a in hot.get("addresses") or [] if int(a, 16) in futexes]
    return out


def stacks(rec: Recording, proc: Process, h: HashSummary) -> tuple[dict[int, int], dict[int, dict[int, float]], bool]:
    """(lookups per x position, {x: {futex: lookups}}, estimated). A futex's
    lookups are the process's, over all its hashes; where a bucket's listed
    futexes add up to more than the bucket counted, they are scaled down to fit
    (an estimate of this hash's share)."""
    per_node = _per_node(rec, h)
    counts: dict[int, int] = {}
    for k, v in h.get("bucket_counts", {}).items():   # summed: a key may come in two spellings
        x = bucket_index(k, per_node)
        counts[x] = counts.get(x, 0) + v
    futexes = _futex_lookups(proc)
    split, estimated = {}, False
    for b, addrs in _members(rec, proc, h, futexes).items():
        listed = sum(futexes[a] for a in addrs)
        scale = min(1.0, counts.get(b, 0) / listed) if listed else 0.0
        estimated |= scale < 1.0
        split[b] = {a: futexes[a] * scale for a in addrs}
    return counts, split, estimated


def _panels(rec: Recording, names: dict) -> tuple[list[tuple[Process, HashSummary]], list[str]]:
    """(process, hash) pairs that get a panel, busiest first; the rest as footnote items."""
    pairs = sorted(((p, h) for p in rec.get("processes") or [] for h in p.get("hashes") or []),
                   key=lambda ph: -ph[1].get("lookups", 0))
    floor = fold_threshold(rec)
    drawn, folded = [], []
    for p, h in pairs:
        if "bucket_counts" in h and h.get("lookups", 0) >= floor and len(drawn) < MAX_PANELS:
            drawn.append((p, h))
        elif h.get("lookups", 0):
            why = "" if "bucket_counts" in h else ", buckets unknown"
            folded.append(f"{who(names, p['pid'])} {_kind(h)}: {h['lookups']:,}{why}")
    return drawn, folded


def _kind(h: HashSummary) -> str:
    return "private hash" if h["kind"] == "private" else {
        "global": "global hash", "global_numa": "global hash (NUMA)",
        "global_shared": "global hash (shared futexes)"}.get(h["kind"], f"{h['kind']} hash")


def _futexes_phrase(h: HashSummary) -> str:
    """Distinct futexes and collisions, as bounds where the recording says they are."""
    est = h.get("estimates") or {}
    d, c = est.get("distinct_futexes"), est.get("collisions")
    if d or c:
        d_txt = approx(d) if d else f"{h.get('distinct_futexes', 0):,}"
        c_txt = approx(c) if c else f"{h.get('collisions', 0):,}"
        why = d.get("method", "per-futex list incomplete") if d else "per-futex list incomplete"
        return f"{d_txt} distinct futexes, {c_txt} beyond one per bucket (estimates: {why})"
    return f"{h.get('distinct_futexes', 0):,} distinct futexes, {h.get('collisions', 0):,} beyond one per bucket"


def _title(names: dict, p: Process, h: HashSummary, used: int) -> str:
    im = h.get("imbalance") or {}
    head = (f"{who(names, p['pid'])}: {_kind(h)}, {h['buckets']:,} buckets, {h['lookups']:,} lookups, "
            f"{used:,} buckets used")
    if h["lookups"] >= h["buckets"] and im.get("max_over_mean") is not None:
        # With fewer lookups than buckets the spread says nothing: no ratio then.
        head += f", busiest {im['max_over_mean']:.1f}x the mean"
    return head


def _colours(split: dict[int, dict[int, float]], lookups: int) -> dict[int, tuple[str, float]]:
    """The hot futexes (explain's rule: at least HOT_SHARE of the lookups), busiest
    first, at most TOP_FUTEXES: futex → (colour, share of the hash's lookups)."""
    total: dict[int, float] = {}
    for members in split.values():
        for a, n in members.items():
            total[a] = total.get(a, 0) + n
    hot = sorted((a for a in total if total[a] >= HOT_SHARE * lookups and total[a] > 0),
                 key=lambda a: (-total[a], a))[:TOP_FUTEXES]
    palette = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink")
    return {a: (palette[i], total[a] / max(1, lookups)) for i, a in enumerate(hot)}


def _draw_stacks(ax, counts: dict[int, int], split: dict, colours: dict, log: bool) -> None:
    """Coloured futexes at the bottom of each bar, the rest of its lookups grey above."""
    xs = sorted(counts)
    base = {x: 0.0 for x in xs}
    labelled = set()
    for addr, (colour, share) in colours.items():
        seg = [(x, split[x][addr]) for x in xs if addr in split.get(x, {}) and split[x][addr] > 0]
        if seg:
            ax.bar([x for x, _ in seg], [n for _, n in seg], bottom=[base[x] for x, _ in seg], width=1.0,
                   color=colour, edgecolor="none", label=None if addr in labelled else f"futex {addr:#x}: {share:.1%}")
            labelled.add(addr)
            for x, n in seg:
                base[x] += n
    rest = [(x, counts[x] - base[x]) for x in xs if counts[x] - base[x] > 0]
    if rest:
        ax.bar([x for x, _ in rest], [n for _, n in rest], bottom=[base[x] for x, _ in rest], width=1.0,
               color=OTHER, edgecolor="none",
               label="other futexes" if colours else f"no futex has {HOT_SHARE:.0%} of lookups")
    if log:
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.8)
    else:
        ax.set_ylim(bottom=0)


def _draw_members(ax, h: HashSummary, split: dict, n_buckets: int) -> None:
    """Distinct listed futexes per bucket (a lower bound where the list is incomplete)."""
    xs = sorted(split)
    ys = [len([a for a, n in split[x].items() if n > 0]) for x in xs]
    ax.bar(xs, ys, width=1.0, color="0.35", edgecolor="none")
    shared = [x for x, y in zip(xs, ys) if y > 1]
    if shared:
        ax.bar(shared, [ys[xs.index(x)] for x in shared], width=1.0, color="tab:red", edgecolor="none")
    ax.set_ylim(0, max(ys + [1]) * 1.15)
    ax.set_xlim(-0.5, n_buckets - 0.5)
    ax.set_ylabel("futexes", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.locator_params(axis="y", nbins=3, integer=True)


def _panel(rec: Recording, names: dict, p: Process, h: HashSummary, ax, strip) -> None:
    counts, split, estimated = stacks(rec, p, h)
    colours = _colours(split, h["lookups"])
    used = [v for v in counts.values() if v > 0]
    log = bool(used) and max(used) > LOG_SPAN * min(used)
    _draw_stacks(ax, counts, split, colours, log)
    n_buckets = max(h["buckets"], max(counts, default=0) + 1)
    ax.set_xlim(-0.5, n_buckets - 0.5)
    ax.set_title(_title(names, p, h, sum(1 for v in counts.values() if v > 0)), fontsize=9, loc="left")
    ax.set_ylabel("lookups" + (" (log)" if log else ""), fontsize=9)
    ax.tick_params(labelbottom=False, labelsize=8)
    ax.grid(axis="y", alpha=0.3)
    if counts:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0,
                  title="estimate: split scaled" if estimated and colours else None, title_fontsize=7, frameon=False)
    if split:
        _draw_members(strip, h, split, n_buckets)
        known = "" if h["kind"] == "private" else "; futexes known for the hottest buckets only"
        strip.set_xlabel(f"bucket index ({_futexes_phrase(h)}; red: a bucket shared by listed futexes{known})",
                         fontsize=8)
    else:
        strip.set_axis_off()
        ax.tick_params(labelbottom=True)
        ax.set_xlabel(f"bucket index ({_futexes_phrase(h)}; which futex is in which bucket "
                      "is not in this recording)", fontsize=8)


def plot_buckets(rec: Recording, path: Path) -> Path:
    return save(figure_buckets(rec), path)


def figure_buckets(rec: Recording):
    """One panel per busy hash (see the module's docstring); hashes with few lookups
    are named in a footnote."""
    plt = pyplot()
    names = pid_names(rec)
    drawn, folded = _panels(rec, names)
    n = max(1, len(drawn))
    waits = lockwaits.wanted(rec)
    rows = [4, 1.3, 1.2] if waits else [4, 1.3]
    fig = plt.figure(figsize=(10, (3.8 if waits else 2.9) * n + 1.0), dpi=110, layout="constrained")
    fig.suptitle("Futex hash: lookups per bucket, in bucket order, stacked by futex"
                 + (", and bucket-lock waits" if waits else ""), fontweight="bold")
    grid = fig.add_gridspec(len(rows) * n, 1, height_ratios=rows * n)
    if not drawn:
        ax = fig.add_subplot(grid[:, 0])
        ax.text(0.5, 0.5, f"no hash with at least {fold_threshold(rec):,} lookups in a known bucket",
                ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    for i, (p, h) in enumerate(drawn):
        ax = fig.add_subplot(grid[len(rows) * i, 0])
        strip = fig.add_subplot(grid[len(rows) * i + 1, 0], sharex=ax)
        _panel(rec, names, p, h, ax, strip)
        if waits:
            lockwaits.draw(rec, p, h, fig.add_subplot(grid[len(rows) * i + 2, 0], sharex=ax),
                                 int(ax.get_xlim()[1] + 0.5))
    add_footnote(fig, footnote_text(f"Not drawn (under {fold_threshold(rec):,} lookups, or beyond the "
                                    f"{MAX_PANELS} busiest):", folded))
    return fig
