"""Which attach method to use: the one order of preference, for `record`
(which picks one) and `doctor` (which recommends one from what it proved).

kprobes come first: they see the bucket the kernel itself returned and the
refcount calls. The tracepoint method comes next: it sees only the syscall and
recomputes the bucket, with blind spots it names. fentry is not a method of
`record` at all: futex_hash returns a struct by value on 7.2+, which fexit
cannot attach to, so futextrace has no fentry programs; `--method fentry` is
refused with a line that says so (doctor still proves whether fentry loads).
"""
from __future__ import annotations

from pathlib import Path

from futextrace.errors import EnvironmentProblem, UsageError

KPROBE_PMU = Path("/sys/bus/event_source/devices/kprobe")
PREFERENCE = ("kprobe", "tracepoint")
# doctor's probes that prove each method: the tracepoint method hooks sys_enter as
# a tp_btf program, or as a raw tracepoint where the kernel refuses tp_btf.
PROVEN_BY = {"kprobe": ("kprobe",), "tracepoint": ("tp_btf", "raw_tracepoint")}


def kprobe_precondition(model) -> str | None:
    """Why the kprobe method cannot work here, or None. Cheap checks only:
    loading the real programs is the proof (see Recorder.start)."""
    if not KPROBE_PMU.is_dir():
        return f"kernel built without CONFIG_KPROBES (no {KPROBE_PMU})"
    if not model.probeable("futex_hash"):
        return "futex_hash has no symbol (inlined): nothing to probe"
    return None


def refuse_unserved(requested: str) -> None:
    """Refuse a method futextrace has no programs for, before anything loads."""
    if requested == "fentry":
        raise UsageError("--method fentry: futextrace has no fentry programs (fexit cannot attach to "
                         "futex_hash, which returns a struct by value on 7.2+); use --method kprobe or auto")


def choose_method(model, requested: str) -> tuple[str, str]:
    """(method, why) for `record --method requested`. `auto` follows PREFERENCE.
    `futextrace doctor` shows the full proof."""
    refuse_unserved(requested)
    if requested == "tracepoint":
        return "tracepoint", "asked for with --method"
    if requested == "kprobe":
        why = kprobe_precondition(model)
        if why:
            raise EnvironmentProblem(f"method kprobe is not available here: {why} "
                                     "(run `futextrace doctor`, or use --method auto)")
        return "kprobe", "asked for with --method"
    why = kprobe_precondition(model)
    if why:
        return "tracepoint", f"kprobes not usable: {why}"
    return "kprobe", "kprobes available: they see the kernel's own bucket and refcount calls"


def recommended(works: set[str]) -> str | None:
    """The method `record --method auto` should end up with, given the names of
    the probes doctor proved working (MethodStatus.name)."""
    for method in PREFERENCE:
        if any(probe in works for probe in PROVEN_BY[method]):
            return method
    return None
