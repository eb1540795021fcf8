"""Checks of the pictures: no text overlaps another (tests/unit/test_plots_pictures.py, test_ramp_plot.py)."""
import itertools


def _texts(fig):
    """Every visible, non-empty text in the figure with its box on the canvas; of
    the tick labels only those matplotlib draws (inside the view limits)."""
    from matplotlib.axis import Tick
    from matplotlib.text import Text
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ticks = [t for t in fig.findobj(Tick)]
    tick_labels = {id(lab) for t in ticks for lab in (t.label1, t.label2)}
    shown = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            span = (hi - lo) * 1e-9
            shown += [lab for t in axis.get_major_ticks() + axis.get_minor_ticks()
                      if lo - span <= t.get_loc() <= hi + span for lab in (t.label1, t.label2)]
    others = [t for t in fig.findobj(Text) if id(t) not in tick_labels]
    out, seen = [], set()
    for t in others + shown:
        if id(t) in seen or not (t.get_visible() and t.get_text().strip()):
            continue
        seen.add(id(t))
        if t.axes is not None and not t.axes.get_visible():
            continue
        box = t.get_window_extent(r)
        if box.width > 0 and box.height > 0:
            out.append((t.get_text(), box))
    return out


def assert_no_overlap(fig):
    texts = _texts(fig)
    assert texts
    clash = [(a, b) for (a, ba), (b, bb) in itertools.combinations(texts, 2) if ba.overlaps(bb)]
    assert not clash, clash[:5]
