"""Every picture of a recording, for synthetic recordings with 1, 5 and 40
processes, no resize, one and several, at 2 and 128 CPUs: asserted on what the
figure holds (texts, artists, limits), never on pixels."""

import pytest

pytest.importorskip("matplotlib")

from futextrace.output.plots.figure import pyplot  # noqa: E402
from futextrace.output.plots.buckets import figure_buckets  # noqa: E402
from futextrace.output.plots.common import FOLD_MIN, FOLD_SHARE, MAX_PANELS  # noqa: E402
from futextrace.output.plots.cpus import figure_cpus  # noqa: E402
from futextrace.output.plots.heatmap import figure_heatmap  # noqa: E402
from futextrace.output.plots.rates import figure_rates  # noqa: E402
from futextrace.output.plots.resizes import figure_resizes  # noqa: E402
from futextrace.output.plots.whatif import figure_whatif  # noqa: E402
from tests.helpers import synthetic  # noqa: E402
from tests.helpers.pictures import _texts, assert_no_overlap

SHAPES = [(1, 2, 0), (5, 2, 1), (40, 128, 3), (5, 128, 0), (40, 2, 1)]
ID = "{}proc-{}cpu-{}resize".format


def _close(fig):
    pyplot().close(fig)


def _bar_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_title(loc="left")]


@pytest.mark.parametrize("procs, cpus, resizes", SHAPES, ids=[ID(*s) for s in SHAPES])
def test_buckets(procs, cpus, resizes):
    rec = synthetic.recording(procs, cpus, resizes)
    fig = figure_buckets(rec)
    try:
        assert_no_overlap(fig)
        floor = max(FOLD_MIN, FOLD_SHARE * rec["totals"]["lookups"])
        panels = _bar_axes(fig)
        assert 1 <= len(panels) <= MAX_PANELS
        for ax in panels:
            lookups = int(ax.get_title(loc="left").split(" lookups")[0].rsplit(", ", 1)[1].replace(",", ""))
            assert lookups >= floor
            assert ax.get_yscale() == "log" or ax.get_ylim()[0] == 0
        drawn = {ax.get_title(loc="left").split(":")[0] for ax in panels}
        hidden = [p for p in rec["processes"] if f"{p['comm']} ({p['pid']})" not in drawn]
        if hidden:   # folded processes are named in the footnote
            assert fig._supxlabel is not None and "Not drawn" in fig._supxlabel.get_text()
    finally:
        _close(fig)


def test_buckets_hot_futex_is_coloured_and_global_hash_folded():
    """The hot futex's bar is coloured at the bucket the tests' own jhash2 puts
    it in; the global hash with 2 lookups gets no panel and no max/mean."""
    rec = synthetic.recording(1, 2, 0)
    fig = figure_buckets(rec)
    try:
        ax = _bar_axes(fig)[0]
        hot_bucket = synthetic.ref.private_bucket(synthetic.HOT_ADDR, synthetic.BUSY_BUCKETS - 1)
        coloured = [p for p in ax.patches if len(set(p.get_facecolor()[:3])) > 1]
        assert coloured, "no futex coloured"
        assert {round(p.get_x() + p.get_width() / 2) for p in coloured} == {hot_bucket}
        assert sum(p.get_height() for p in coloured) == pytest.approx(50_000)
        stacked = {}
        for p in ax.patches:
            x = round(p.get_x() + p.get_width() / 2)
            stacked[x] = stacked.get(x, 0) + p.get_height()
        expected = {int(k): v for k, v in rec["processes"][0]["hashes"][0]["bucket_counts"].items()}
        assert stacked == pytest.approx(expected)
        assert ax.get_yscale() == "log"      # 50,100 against ~100: more than 100x
        texts = " ".join(t for t, _ in _texts(fig))
        assert "global hash: 2" in texts and "max/mean" not in texts and "CV" not in texts
    finally:
        _close(fig)


def test_buckets_says_estimate_where_the_recording_does():
    rec = synthetic.recording(1, 2, 0)
    h = rec["processes"][0]["hashes"][0]
    h["estimates"] = {"distinct_futexes": {"low": 201, "high": 900}, "collisions": {"low": 150, "high": 849}}
    fig = figure_buckets(rec)
    try:
        label = " ".join(ax.get_xlabel() for ax in fig.axes)
        assert "201..900 distinct futexes" in label and "estimate" in label
    finally:
        _close(fig)


def test_buckets_without_futex_list_still_draws():
    rec = synthetic.recording(1, 2, 0)
    del rec["processes"][0]["futex_list"]
    fig = figure_buckets(rec)
    try:
        assert_no_overlap(fig)
        assert "not in this recording" in " ".join(ax.get_xlabel() for ax in fig.axes)
    finally:
        _close(fig)


@pytest.mark.parametrize("cpus, nodes", [(2, 1), (128, 1), (128, 4)])
def test_cpus_absolute_stacked_and_readable(cpus, nodes):
    rec = synthetic.recording(5, cpus, 0, nodes=nodes)
    fig = figure_cpus(rec)
    try:
        assert_no_overlap(fig)
        ax = fig.axes[0]
        assert ax.get_ylim()[0] == 0
        private, glob = ax.containers[0], ax.containers[1]
        assert [round(b.get_height()) for b in private] == [r["private"] for r in rec["per_cpu"]]
        assert [round(b.get_height()) for b in glob] == [r["global"] for r in rec["per_cpu"]]
        assert fig.get_size_inches()[1] < 6            # not one row per CPU
        assert len(ax.get_xticks()) <= 32
        if nodes > 1:
            labels = [t.get_text() for t in ax.texts]
            assert [f"node {n}" in labels for n in range(nodes)] == [True] * nodes
    finally:
        _close(fig)


@pytest.mark.parametrize("procs, resizes", [(1, 0), (5, 1), (40, 3)])
def test_resizes(procs, resizes):
    rec = synthetic.recording(procs, 2, resizes)
    fig = figure_resizes(rec)
    try:
        assert_no_overlap(fig)
        ax = fig.axes[0]
        ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
        assert ticks and all(t == 0 or (int(t) == t and int(t) & (int(t) - 1) == 0) for t in ticks)
        lines = [line for line in ax.get_lines() if line.get_drawstyle() == "steps-post"]
        assert lines, "the hash at attach is drawn even without a resize"
        busiest = rec["processes"][0]
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any(t.startswith(f"{busiest['comm']} ({busiest['pid']})") for t in legend)  # not a thread's name
        assert not any("futex-hash" in t for t in legend)
        if resizes:
            req = [line for line in ax.get_lines() if line.get_marker() == "v"]
            piv = [line for line in ax.get_lines() if line.get_marker() == "^"]
            assert len(req) == resizes and len(piv) == resizes
        else:
            assert "no resize" in ax.get_title()
            assert synthetic.BUSY_BUCKETS in [line.get_ydata()[0] for line in lines]
    finally:
        _close(fig)


@pytest.mark.parametrize("procs, resizes", [(1, 0), (40, 3)])
def test_rates(procs, resizes):
    rec = synthetic.recording(procs, 2, resizes)
    fig = figure_rates(rec)
    try:
        assert_no_overlap(fig)
        ax = fig.axes[0]
        assert ax.get_ylim()[0] == 0
        steps = [line for line in ax.get_lines() if line.get_drawstyle() == "steps-pre"]
        assert len(steps) == min(procs, MAX_PANELS)
        busiest = rec["processes"][0]
        line = next(s for s in steps if s.get_label() == f"{busiest['comm']} ({busiest['pid']})")
        assert line.get_ydata()[-1] == pytest.approx(busiest["lookups"] / rec["duration_s"])
        marks = [v for v in ax.get_lines() if v.get_linestyle() in (":", "--")]
        assert len(marks) == 2 * resizes          # a request and a pivot per successful resize
    finally:
        _close(fig)
    rec["intervals"] = []
    fig = figure_rates(rec)
    try:
        assert "record with -i" in " ".join(t for t, _ in _texts(fig))
    finally:
        _close(fig)


def test_whatif_curve_marks_current_and_recommended():
    """The recommended size is the smallest where the hot futex shares no bucket,
    worked out here with the tests' own jhash2."""
    rec = synthetic.recording(1, 2, 0)
    fig = figure_whatif(rec)
    try:
        assert_no_overlap(fig)
        listed = rec["processes"][0]["futex_list"]["listed"]
        addrs = [int(f["uaddr"], 16) for f in listed]

        def hot_alone(size):
            b = synthetic.ref.private_bucket(synthetic.HOT_ADDR, size - 1)
            return sum(1 for a in addrs if synthetic.ref.private_bucket(a, size - 1) == b) == 1
        best = next(1 << s for s in range(4, 18) if hot_alone(1 << s))
        shared = fig.axes[0]
        vlines = {line.get_label() for line in shared.get_lines()}
        assert f"current: {synthetic.BUSY_BUCKETS} buckets" in vlines
        assert f"smallest with no hot futex sharing: {best}" in vlines
        assert shared.get_ylim()[0] == 0 and fig.axes[1].get_ylim()[0] == 0
    finally:
        _close(fig)


def test_resizes_line_starts_where_a_process_not_known_at_attach_was_first_seen():
    rec = synthetic.recording(1, 2, 1)
    del rec["hash_at_attach"]["processes"]["1000"]
    fig = figure_resizes(rec)
    try:
        line = next(v for v in fig.axes[0].get_lines() if v.get_drawstyle() == "steps-post")
        assert line.get_xdata()[0] == rec["resizes"][0]["t"] > 0
    finally:
        _close(fig)


def test_bucket_time_heat_map():
    """One column per interval, one row per bucket; the hot futex's bucket (the
    tests' own jhash2) is the brightest row, its rate per second."""
    rec = synthetic.recording(5, 2, 1)
    fig = figure_heatmap(rec)
    try:
        assert_no_overlap(fig)
        ax = fig.axes[0]
        mesh = ax.collections[0]
        grid = mesh.get_array().reshape(synthetic.BUSY_BUCKETS, len(rec["intervals"]))
        hot = synthetic.ref.private_bucket(synthetic.HOT_ADDR, synthetic.BUSY_BUCKETS - 1)
        step = rec["intervals"][0]["interval_s"]
        in_hot = rec["processes"][0]["hashes"][0]["bucket_counts"][str(hot)]
        assert in_hot > 50_000 and grid[hot].max() == pytest.approx(int(in_hot * step / rec["duration_s"]) / step)
        assert grid.max() == grid[hot].max()
        assert ax.get_ylim() == (0, synthetic.BUSY_BUCKETS)
    finally:
        _close(fig)
    rec["intervals"] = []
    fig = figure_heatmap(rec)
    try:
        assert "record with -i" in " ".join(t for t, _ in _texts(fig))
    finally:
        _close(fig)


def _with_lock_waits(rec: dict) -> tuple[dict, int, int]:
    """The busiest process waited 2.5 ms on its hot futex's bucket (one futex)
    and 0.75 ms on another bucket where two futexes collided; bucket numbers
    from the tests' own jhash2."""
    hot = synthetic.ref.private_bucket(synthetic.HOT_ADDR, synthetic.BUSY_BUCKETS - 1)
    other = (hot + 5) % synthetic.BUSY_BUCKETS
    buckets = [{"bucket": hot, "buckets": synthetic.BUSY_BUCKETS, "waits": 40, "wait_ns": 2_500_000,
                "max_ns": 90_000, "cause": "same_futex", "futexes": []},
               {"bucket": other, "buckets": synthetic.BUSY_BUCKETS, "waits": 9, "wait_ns": 750_000,
                "max_ns": 20_000, "cause": "collision", "futexes": []}]
    pid = rec["processes"][0]["pid"]
    rec["contention"] = {"status": "attached (tp_btf)", "window_s": rec["duration_s"], "waits": 49,
                         "wait_ns": 3_250_000, "processes": [{"pid": pid, "comm": "worker-0", "waits": 49,
                                                              "wait_ns": 3_250_000, "buckets_waited": 3,
                                                              "buckets": buckets}]}
    return rec, hot, other


@pytest.mark.parametrize("procs", [1, 5])
def test_buckets_lock_waits_beside_lookups(procs):
    rec, hot, other = _with_lock_waits(synthetic.recording(procs, 2, 0))
    fig = figure_buckets(rec)
    try:
        assert_no_overlap(fig)
        strips = [ax for ax in fig.axes if ax.get_ylabel() == "lock wait ms"]
        assert len(strips) == 1
        bars = {round(p.get_x() + p.get_width() / 2): (p.get_height(), p.get_facecolor()[:3])
                for p in strips[0].patches}
        assert set(bars) == {hot, other}
        assert bars[hot][0] == pytest.approx(2.5) and bars[other][0] == pytest.approx(0.75)
        assert bars[hot][1] != bars[other][1]          # causes told apart by colour
        assert strips[0].get_ylim()[0] == 0
        assert "1 more bucket waited less" in strips[0].get_xlabel()
        texts = " ".join(t for t, _ in _texts(fig))
        if procs > 1:
            assert "no bucket-lock waits measured" in texts     # the others' panels say so
    finally:
        _close(fig)


def test_buckets_no_lock_strip_when_not_measured():
    rec = synthetic.recording(1, 2, 0)
    fig = figure_buckets(rec)
    try:
        assert not [ax for ax in fig.axes if ax.get_ylabel() == "lock wait ms"]
        assert "bucket-lock" not in " ".join(t for t, _ in _texts(fig))
    finally:
        _close(fig)
