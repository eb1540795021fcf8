"""Which attach method to use: the one order of preference, for `record`
(which picks one) and `doctor` (which recommends one from what it proved).

fentry comes first: fexit on futex_hash sees the bucket the kernel returned
and the refcount calls, as kprobes do, through a trampoline instead of a
trap (6.17-7.1, where futex_hash returns a pointer). kprobes come next (7.2+,
or wherever fentry is refused). The tracepoint method comes last: it sees only
the syscall and recomputes the bucket, with blind spots it names. Each is
decided by what the kernel does, never by its version: fentry by loading a
minimal fexit program (loading/fentry.py), kprobes by the kprobe PMU and
futex_hash's symbol; `record` still falls back when the real load fails.
"""
from __future__ import annotations

from pathlib import Path

from futextrace.errors import EnvironmentProblem
from futextrace.loading import fentry

KPROBE_PMU = Path("/sys/bus/event_source/devices/kprobe")
PREFERENCE = ("fentry", "kprobe", "tracepoint")
# doctor's probes that prove each method: the tracepoint method hooks sys_enter as
# a tp_btf program, or as a raw tracepoint where the kernel refuses tp_btf.
PROVEN_BY = {"fentry": ("fentry",), "kprobe": ("kprobe",), "tracepoint": ("tp_btf", "raw_tracepoint")}
WHY_PREFERRED = {
    "fentry": "fentry/fexit available: the kernel's own bucket and refcount calls, through trampolines",
    "kprobe": "kprobes available: they see the kernel's own bucket and refcount calls",
}


def kprobe_precondition(model) -> str | None:
    """Why the kprobe method cannot work here, or None. Cheap checks only:
    loading the real programs is the proof (see TraceSession.start)."""
    if not KPROBE_PMU.is_dir():
        return f"kernel built without CONFIG_KPROBES (no {KPROBE_PMU})"
    if not model.probeable("futex_hash"):
        return "futex_hash has no symbol (inlined): nothing to probe"
    return None


def fentry_precondition(model) -> str | None:
    """Why the fentry method cannot work here, or None: the layout, then a
    minimal fexit load on futex_hash (microseconds; no compile)."""
    return fentry.refusal(model)


PRECONDITION = {"fentry": fentry_precondition, "kprobe": kprobe_precondition}


def candidates(model, requested: str) -> list[tuple[str, str]]:
    """[(method, why)] to try in turn for `record --method requested`: the
    requested one alone, or for `auto` each usable method of PREFERENCE (the
    last always the tracepoint method), the reasons for skipping the others
    in its `why`. `futextrace doctor` shows the full proof."""
    if requested != "auto":
        check = PRECONDITION.get(requested)
        why = check(model) if check else None
        if why:
            raise EnvironmentProblem(f"method {requested} is not available here: {why} "
                                     "(run `futextrace doctor`, or use --method auto)")
        return [(requested, "asked for with --method")]
    out, skipped = [], []
    for method in PREFERENCE[:-1]:
        why = PRECONDITION[method](model)
        if why:
            skipped.append(f"{method} not usable: {why}")
        else:
            out.append((method, "; ".join([WHY_PREFERRED[method], *skipped])))
    out.append(("tracepoint", "; ".join(skipped) or "asked for"))
    return out


def choose_method(model, requested: str) -> tuple[str, str]:
    """(method, why): the first of `candidates`."""
    return candidates(model, requested)[0]


def recommended(works: set[str]) -> str | None:
    """The method `record --method auto` should end up with, given the names of
    the probes doctor proved working (MethodStatus.name)."""
    for method in PREFERENCE:
        if any(probe in works for probe in PROVEN_BY[method]):
            return method
    return None
