"""explain's "why 16" (issue 27, item 9b): on a small machine the automatic size
is 16 whatever the thread count; the text says at which thread and CPU count the
next size would come. Expected values from the kernel's formula worked by hand
(kernel/futex/core.c futex_hash_allocate_default)."""
import json
from pathlib import Path

from futextrace.analysis.explain import _State, size_limit
from futextrace.output.text.explain_text import explained, render, why_size

SAMPLE = Path(__file__).parent.parent / "data" / "recording-tp-auto.json"


def sample() -> dict:
    return json.loads(SAMPLE.read_text())


def test_why_16_on_two_cpus_names_the_next_size():
    st = _State()
    st.buckets = 16
    text = why_size(size_limit(st, {"online_cpus": 2, "global_size": 512}))
    # The kernel's formula by hand: 4 * min(t, 2) <= 8 -> 16 for every t; 32 needs 4 * m > 16: m >= 5.
    assert text.startswith("with 2 online CPUs the automatic size stops at 16 whatever the thread count")
    assert "the next size, 32, needs min(threads, online CPUs) ≥ 5" in text
    assert "at least 5 online CPUs" in text
    st.buckets = 32
    assert why_size(size_limit(st, {"online_cpus": 16, "global_size": 512})).startswith(
        "the next size, 64, needs min(threads, online CPUs) ≥ 9")
    st.custom = True
    assert why_size(size_limit(st, {"online_cpus": 2, "global_size": 512})) is None


def test_explain_text_says_why_16():
    rec = sample()
    expl = explained(rec)
    p = next(p for p in expl["processes"] if p["pid"] == 15505)
    assert p["final"]["buckets"] == 16
    assert "  why 16: with 2 online CPUs the automatic size stops at 16 whatever the thread count" in render(expl)
