"""The steps of `explain`, typed as the recording is (futextrace/recording.py): each
kind and each reason is a Literal here, so the text (output/explain_text.py) has one
sentence per value, and a test fails when a value has none."""
from __future__ import annotations

from typing import Literal, Optional, TypedDict

StepKind = Literal["at_attach", "first_seen", "pivot", "resize", "no_resize", "prctl"]
# Why a thread's creation did not resize the hash (analysis/explain.py _no_resize).
NoResizeReason = Literal["flags_do_not_trigger", "global_chosen", "custom", "big_enough",
                         "unknown_size", "unexplained"]
# A PR_FUTEX_HASH SET_SLOTS request's outcome (analysis/explain.py _prctl).
PrctlReason = Literal["custom_set", "global_set", "einval", "ebusy", "enomem", "unresolved", "other"]
# The other kinds have one reason each.
Reason = Literal[NoResizeReason, PrctlReason, "resized", "first_seen", "pending_took_over", "at_attach"]


class Step(TypedDict, total=False):
    t: float
    kind: StepKind
    reason: Reason
    trigger: str                     # "clone" | "prctl"
    tid: Optional[int]
    clone_flags: Optional[int]
    threads: int                     # no_resize: threads before the clone
    requested: int                   # prctl
    result: Optional[int]            # prctl: 0 or an errno, None when not seen
    formula: Optional[dict]
    buckets_before: Optional[int]
    buckets_after: Optional[int]
    pending_buckets: Optional[int]
    pending_s: Optional[float]
    pivot_t: Optional[float]
    facts: dict                      # what the step's sentence needs, by kind
