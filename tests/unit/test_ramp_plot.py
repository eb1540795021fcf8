"""`bench --ramp`: the picture (asserted on what the figure holds), the warning
when the ramp ends before the first sample, and --resize-at on the automatic
run only. No BPF: synthetic runs, and one_run replaced where it would trace."""
import pytest

pytest.importorskip("matplotlib")

from futextrace.bench import ramp, runner  # noqa: E402
from futextrace.output.text import bench_text  # noqa: E402
from tests.helpers.pictures import assert_no_overlap  # noqa: E402
from tests.helpers.ramp_samples import _doc, _run


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
