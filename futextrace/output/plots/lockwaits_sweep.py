"""Bucket-lock wait time on a sweep plot: a second y axis beside throughput."""
from __future__ import annotations

KEY = "lock wait ms/s"


def add_lock_wait_axis(ax, points: list[dict]) -> None:
    """Lock wait ms/s per bucket count (log2 x, as the throughput line), on a
    right-hand axis; nothing when the sweep was not traced (no figures)."""
    pts = [p for p in points if p["requested"] > 0 and isinstance((p.get("trace") or {}).get(KEY), float)]
    if not pts:
        return
    twin = ax.twinx()
    twin.plot([p["requested"] for p in pts], [p["trace"][KEY] for p in pts], marker="s", ms=4, lw=1.4,
              ls="--", color="tab:red", label="bucket-lock wait (ms/s)")
    twin.plot([p["requested"] for p in pts], [p["trace"].get("collision ms/s", 0) for p in pts],
              marker="x", ms=4, lw=1.0, ls=":", color="tab:orange", label="of it: collisions (ms/s)")
    twin.set_ylabel("bucket-lock wait, ms per second")
    twin.set_ylim(bottom=0)
    twin.legend(loc="lower right", fontsize="small")
