"""The resize picture's trigger labels never overlap (a prctl and the clone
right after it share a point: issue 12)."""
import itertools

import pytest

pytest.importorskip("matplotlib")


def test_labels_at_one_point_do_not_overlap(tmp_path):
    from futextrace.output.plots.figure import pyplot
    from futextrace.output.plots.recording import plot_resizes
    from futextrace.output.plots.resizes import place_labels
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    ax.plot([0, 1], [0, 128])
    ax.set_yscale("symlog", base=2, linthresh=1)
    place_labels(ax, [(0.010, 128, "prctl", "C0"), (0.0101, 128, "clone", "C0"), (0.0102, 128, "clone", "C1")])
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(boxes) == 3
    assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
    plt.close(fig)
    rs = [{"t": 0.01, "pid": 1, "comm": "w", "trigger": trig, "result": 0, "requested": 128,
           "old_buckets": 0, "new_buckets": 128, "pivot_t": 0.01, "pending_s": 0.0} for trig in ("prctl", "clone")]
    assert plot_resizes({"resizes": rs, "duration_s": 1.0}, tmp_path / "r.png").exists()
