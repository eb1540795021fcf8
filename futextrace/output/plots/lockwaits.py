"""buckets.png's third strip: measured bucket-lock wait time per bucket, under the
lookups and the futexes of the same buckets, coloured by cause (collision: two or
more futexes waited on that bucket's lock; same futex: one did). Drawn only when
the recording measured lock waits (its `contention` section says attached)."""
from __future__ import annotations

from futextrace.analysis.lockwaits import measured
from futextrace.recording import HashSummary, Process, Recording

CAUSE_COLOURS = {"collision": "tab:red", "same_futex": "tab:blue", "unknown": "0.55"}
CAUSE_NAMES = {"collision": "collision", "same_futex": "one futex", "unknown": "futex unknown"}


def wanted(rec: Recording) -> bool:
    return measured(rec)


def waits_by_bucket(rec: Recording, pid: int, buckets: int) -> tuple[dict[int, tuple[float, str]], int]:
    """({bucket: (wait ms, cause)} for this process's hash of `buckets` buckets,
    buckets that waited but are not in the recording's top list)."""
    proc = next((q for q in (rec.get("contention") or {}).get("processes", []) if q["pid"] == pid), None)
    if proc is None:
        return {}, 0
    rows = {b["bucket"]: (b["wait_ns"] / 1e6, b["cause"]) for b in proc.get("buckets", [])
            if b.get("buckets") == buckets}
    return rows, max(0, proc.get("buckets_waited", 0) - len(proc.get("buckets", [])))


def draw(rec: Recording, p: Process, h: HashSummary, ax, n_buckets: int) -> None:
    """Wait ms per bucket as bars, or a line saying why there are none."""
    ax.set_xlim(-0.5, n_buckets - 0.5)
    ax.tick_params(labelsize=8)
    if h["kind"] != "private":
        return _say(ax, "bucket-lock waits: the global hash's locks are not traced")
    rows, untold = waits_by_bucket(rec, p["pid"], h["buckets"])
    if not rows:
        return _say(ax, f"no bucket-lock waits measured in these {h['buckets']:,} buckets")
    for cause, colour in CAUSE_COLOURS.items():
        xs = [b for b, (_, c) in rows.items() if c == cause]
        if xs:
            ax.bar(xs, [rows[b][0] for b in xs], width=1.0, color=colour, edgecolor="none",
                   label=CAUSE_NAMES[cause])
    ax.set_ylim(0, max(ms for ms, _ in rows.values()) * 1.15)
    ax.set_ylabel("lock wait ms", fontsize=8)
    ax.locator_params(axis="y", nbins=3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0, frameon=False)
    more = f"; {untold:,} more bucket{'s' if untold > 1 else ''} waited less" if untold else ""
    ax.set_xlabel(f"bucket-lock wait time per bucket over the recording{more}", fontsize=8)


def _say(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=8, transform=ax.transAxes)
    ax.set_yticks([])
    ax.tick_params(labelbottom=False, bottom=False)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
