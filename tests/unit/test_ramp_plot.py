"""`bench --ramp`: the picture (asserted on what the figure holds), the warning
when the ramp ends before the first sample, and --resize-at on the automatic
run only. No BPF: synthetic runs, and one_run replaced where it would trace."""
import pytest

pytest.importorskip("matplotlib")

from futextrace.bench import ramp, runner  # noqa: E402
from futextrace.output.text import bench_text  # noqa: E402
from tests.unit.test_plots_pictures import assert_no_overlap  # noqa: E402


def _run(requested: int, resizes: list[dict], step: float = 0.05, first_threads: int = 1) -> dict:
    points = [{"t": 0.05 + step * i, "ops_per_s": 1.0e6 + 5e4 * (i % 3), "threads": min(8, first_threads + i),
               "slots": 16 if requested < 0 and i < 10 else (requested if requested > 0 else 64),
               "atomic_share": 0.4 if i == 10 else 0.0} for i in range(20)]
    return {"buckets_requested": requested, "points": points, "t_start": 0.01, "resizes": resizes,
            "result": {"threads": 8, "total_ops": 1, "runtime": 1, "pid": 1},
            "cost": {"atomic": {"source": "inferred", "total_s": 0.01, "longest_s": 0.01, "lookups": 5}},
            "mid_run_resize": None}


def _doc(first_threads: int = 1) -> dict:
    rs = [{"t": 0.02, "pivot_t": 0.02, "result": 0, "old_buckets": 0, "new_buckets": 16, "trigger": "clone"},
          {"t": 0.55, "pivot_t": 0.56, "result": 0, "old_buckets": 16, "new_buckets": 64, "trigger": "prctl"}]
    return {"options": {"step_ms": 50, "interval_ms": 50, "threads": 8, "futexes": 64, "runtime": 1.0,
                        "set_at_start": 64},
            "runs": [_run(-1, rs, first_threads=first_threads), _run(64, [], first_threads=first_threads)]}


def _figure(doc, tmp_path, monkeypatch):
    """plot_ramp's figure, caught before it is saved and closed."""
    from futextrace.output.plots import ramp as ramp_plot
    caught = {}

    def keep(fig, out, **kw):
        caught["fig"] = fig
        fig.canvas.draw()
        return out
    monkeypatch.setattr(ramp_plot, "save_figure", keep)
    ramp_plot.plot_ramp(doc, str(tmp_path / "r.png"))
    return caught["fig"]


def test_ramp_picture(tmp_path, monkeypatch):
    fig = _figure(_doc(), tmp_path, monkeypatch)
    try:
        assert_no_overlap(fig)
        top, threads, slots, atomic = fig.axes
        for ax in (top, threads, atomic):
            assert ax.get_ylim()[0] == 0
        assert "M ops/s" in top.get_ylabel() and "%" in atomic.get_ylabel() and "inferred" in atomic.get_ylabel()
        for ax in (threads, slots):
            assert [line.get_drawstyle() for line in ax.get_lines() if len(line.get_xdata()) > 2] \
                == ["steps-post", "steps-post"]
        assert [int(t) for t in slots.get_yticks()] == [16, 64]
        legend = [t.get_text() for t in top.get_legend().get_texts()]
        assert any("16→64 (prctl) at 0.550 s" in t for t in legend)
        assert not any(t.get_rotation() for t in fig.findobj(lambda a: hasattr(a, "get_rotation")
                                                              and hasattr(a, "get_text") and a.get_text()
                                                              and a not in (ax.yaxis.label for ax in fig.axes)))
        assert fig._supxlabel is None
    finally:
        fig.clf()


def test_warning_when_the_ramp_ends_before_the_first_sample(tmp_path, monkeypatch):
    doc = _doc(first_threads=8)
    lines = ramp.summary(doc["runs"])
    assert lines[0].startswith("warning: all 8 threads had started by the first sample")
    fig = _figure(doc, tmp_path, monkeypatch)
    assert "warning: all 8 threads" in fig._supxlabel.get_text()
    assert bench_text.ramp_warning(_doc()["runs"][0]) is None


def test_resize_at_goes_to_the_automatic_run_only(monkeypatch):
    seen = []

    def fake_one_run(o, r, record_options):
        seen.append((o.buckets, r.resize_at))
        return {**_run(o.buckets, []), "result": {"threads": 8, "slots": 64, "total_ops": 1, "runtime": 1}}
    monkeypatch.setattr(ramp, "one_run", fake_one_run)
    ramp.run(runner.WorkloadOptions(threads=8, futexes=64, runtime=1.0), ramp.RampOptions(resize_at="300:128"))
    assert seen == [(runner.AUTO, "300:128"), (64, None)]
