"""What a hash read at attach says about the history before the recording
(analysis/history.py, output/text/history_text.py), and grouping of repeated explain lines. No BPF, no root.
Thread counts below are worked out by hand from the kernel's formula
max(16, min(roundup_pow_of_two(4 × min(threads, CPUs)), global size))."""
from futextrace.analysis import explain as E
from futextrace.output.text import explain_text as T
from futextrace.output.text.history_text import at_attach_text

K8 = {"online_cpus": 8, "global_size": 512}


def auto(buckets, threads=40, **kw):
    return {"kind": "private", "mode": "auto", "buckets": buckets, "threads": threads, **kw}


def test_automatic_size_names_the_threads_it_needed():
    # 64 = 4 × 16: min(T, 8) can reach at most 8 → 32. With 8 CPUs, 32 needs 5..8 threads (4×5=20 → 32).
    text = at_attach_text(auto(32), K8)
    assert "at least 5 threads while 8 CPUs were online" in text


def test_minimum_size_needs_one_thread():
    assert "at least 1 thread while 8 CPUs were online" in at_attach_text(auto(16), K8)


def test_size_no_thread_count_gives_says_so():
    # 8 CPUs: at most 4 × 8 = 32 buckets. 128 means more CPUs once (or another global size).
    text = at_attach_text(auto(128), K8)
    assert "no thread count gives 128 with today's 8 online CPUs" in text and "hot-unplugged" in text


def test_threads_exited_since():
    assert "it has 2 now: threads exited since" in at_attach_text(auto(32, threads=2), K8)


def test_custom_and_global_and_none():
    assert "set with prctl(SET_SLOTS, 256) before the recording began" in at_attach_text(
        {"kind": "private", "mode": "custom", "buckets": 256, "threads": 3}, K8)
    assert "global for good" in at_attach_text({"kind": "global", "mode": "custom", "buckets": 0,
                                                "threads": 3}, K8)
    assert "no private hash at attach (1 thread)" in at_attach_text(
        {"kind": "none", "mode": None, "buckets": 0, "threads": 1}, K8)


def _no_resize(t, threads, reason="custom", before=64):
    return {"t": t, "kind": "no_resize", "reason": reason, "buckets_before": before, "clone_flags": 0x3D0F00,
            "threads": threads, "why": f"why {reason}", "text": f"one {t}"}


def test_runs_of_same_outcome_are_one_line():
    steps = ([{"t": 0.0, "kind": "at_attach", "reason": "at_attach", "buckets_before": None, "text": "a"}]
             + [_no_resize(1.0 + i / 100, 3 + i) for i in range(64)]
             + [_no_resize(2.0, 67, reason="big_enough")])
    lines = T.lines_text(steps, E.group_steps(steps))
    assert [line["count"] for line in lines] == [1, 64, 1]
    assert lines[1]["text"].startswith("64 × thread created from +1.000 s to +1.630 s with 3–66 threads")
    assert lines[1]["first"] == 1 and lines[2]["text"] == "one 2.0"


def test_render_groups_unless_verbose():
    steps = [_no_resize(1.0 + i, 3 + i) for i in range(5)]
    expl = {"clone_rule": "vm", "online_cpus": 2, "global_size": 512, "processes": [
        {"pid": 1, "comm": "w", "steps": steps, "lines": T.lines_text(steps, E.group_steps(steps)), "recommendation": None,
         "final": {"text": "64 buckets (custom)"}}]}
    assert T.render(expl).count("\n  - ") == 1
    assert T.render(expl, verbose=True).count("\n  - ") == 5
    assert "learned live" in T.render(expl) and "7.1" not in T.render(expl)
