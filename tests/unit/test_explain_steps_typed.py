"""explain's steps are typed (analysis/steps.py): every kind and every reason the
analysis can give has its sentence in output/explain_text.py, so a new reason cannot
slip through as a wrong or missing line."""
from __future__ import annotations

from typing import get_args

import pytest

from futextrace.analysis import explain as analysis
from futextrace.analysis.steps import NoResizeReason, PrctlReason, StepKind
from futextrace.output.text import explain_text


def test_every_kind_has_a_sentence():
    assert set(explain_text.STEP_TEXT) == set(get_args(StepKind))


def test_every_no_resize_reason_has_a_sentence():
    assert set(explain_text.NO_RESIZE_WHY) == set(get_args(NoResizeReason))


def test_every_prctl_reason_has_a_sentence_and_the_analysis_gives_only_those():
    assert set(explain_text.PRCTL_WHY) == set(get_args(PrctlReason))
    assert set(analysis.PRCTL_REASONS.values()) | {"global_set", "other"} == set(get_args(PrctlReason))


def test_an_unknown_kind_is_an_error_not_a_wrong_line():
    with pytest.raises(KeyError):
        explain_text.STEP_TEXT["not_a_kind"]
