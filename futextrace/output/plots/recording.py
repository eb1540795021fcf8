"""Pictures of one recording (matplotlib, Agg): the buckets of each busy hash,
lookups per CPU, the hash size over time, lookups/s per process over time, the
what-if sizing curves. Each function writes one PNG and returns its path; the
modules buckets, cpus, resizes, rates, whatif beside it draw them."""
from __future__ import annotations

from pathlib import Path

from futextrace.output.plots.buckets import plot_buckets
from futextrace.output.plots.cpus import plot_cpus
from futextrace.output.plots.heatmap import plot_heatmap
from futextrace.output.plots.rates import plot_rates
from futextrace.output.plots.resizes import plot_resizes
from futextrace.output.plots.whatif import plot_whatif
from futextrace.recording import Recording

__all__ = ["plot_buckets", "plot_cpus", "plot_heatmap", "plot_rates", "plot_resizes", "plot_whatif", "plot_recording"]

# file name → (function, caption for the HTML report)
PICTURES = {
    "buckets.png": (plot_buckets, "Lookups per bucket of each busy hash, in bucket order. Each bar is "
                    "stacked by futex: the busiest futexes coloured, every other lookup grey. One tall "
                    "bar of one colour is a hot futex (more buckets will not help); a bar of several "
                    "colours, or a red mark underneath, is futexes sharing a bucket (more buckets may). "
                    "Where the recording measured bucket-lock waits, a third strip shows the wait time "
                    "per bucket, red where colliding futexes waited, blue where one futex did: "
                    "what the sharing actually cost."),
    "cpus.png": (plot_cpus, "Lookups per CPU: private hash (blue) and global hash (orange) stacked, "
                 "with the private lookups made while a resize was pending (atomic refcount) hatched."),
    "resizes.png": (plot_resizes, "Each process's private hash size over time, from the hash at attach "
                    "through every resize: open triangles where a resize was requested, filled ones "
                    "where the new hash took over (the pivot), red crosses where a request was refused."),
    "rates.png": (plot_rates, "Lookups per second of the busiest processes over the recording (from the "
                  "per-interval rates of record -i), with resize requests (dotted) and pivots (dashed)."),
    "bucket-time.png": (plot_heatmap, "Lookups per bucket over time for the busiest process (record -i): one "
                        "column per interval, one row per bucket of its busiest hash, darker for more lookups per "
                        "second, "
                        "white for none. A dark row is a hot bucket; dashed lines are resizes taking effect."),
    "whatif.png": (plot_whatif, "What-if sizing for the busiest process with a per-futex list: futexes "
                   "sharing a bucket, hot futexes sharing one, and the busiest bucket's share of the lookups "
                   "for every private hash size, with the current size and the smallest size that keeps every "
                   "hot futex in a bucket of its own. Exact for the listed addresses; futexes not listed are "
                   "not in it."),
}


def plot_recording(rec: Recording, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    return [draw(rec, out_dir / name) for name, (draw, _) in PICTURES.items()]


def caption(path: Path) -> str:
    return PICTURES.get(Path(path).name, (None, Path(path).stem))[1]
