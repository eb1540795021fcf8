"""The words for setting a futex hash size from outside (`set`, `run`, `record --slots`):
what was asked, the kernel's answers, and what each refusal means to do."""
from __future__ import annotations

import errno
import os

WHY = {
    errno.EINVAL: "{asked} is not a size the kernel takes: a power of two, at least 2 (or --global)",
    errno.EBUSY: ("the process went to the global hash, which is for good: a private hash cannot "
                  "come back in it; restart it with `futextrace run --slots N -- COMMAND`"),
    errno.ENOMEM: "the kernel has no memory for {asked} (64 bytes a bucket)",
}


def asked_words(slots: int) -> str:
    return "the global hash" if slots == 0 else f"{slots:,} buckets"


def slots_words(slots: int | None) -> str:
    if slots is None:
        return "unknown"
    return "0 (the global hash, or no private hash yet)" if slots == 0 else f"{slots:,} buckets"


def answer_json(answer, slots: int, comm: str, pid: int) -> dict:
    """The kernel's answers as the recording and `--json` keep them (docs/json-schema.md)."""
    err = -answer.result if answer.result is not None and answer.result < 0 else None
    return {"pid": pid, "tid": answer.tid, "comm": comm,
            "requested_slots": slots, "before_slots": answer.before,
            "result": None if answer.result is None else ("ok" if err is None else errno.errorcode.get(err, str(err))),
            "after_slots": answer.after, "call_through": answer.found_in, "note": answer.note or None}


def refusal(answer, slots: int) -> str | None:
    """One line for a size the kernel refused; None where it took it."""
    if answer.result is None or answer.result >= 0:
        return None
    err = -answer.result
    name = errno.errorcode.get(err, str(err))
    why = WHY.get(err, os.strerror(err)).format(asked=asked_words(slots))
    return f"the kernel refused {asked_words(slots)} ({name}): {why}"


def result_line(answer, slots: int, comm: str, pid: int, when: str) -> str:
    head = f"{comm} ({pid}), thread {answer.tid}"
    if answer.result is None:
        return f"{head}: {answer.note or 'the call was not completed'}; hash now {slots_words(answer.before)}"
    if answer.result < 0:
        return f"{head}: {refusal(answer, slots)}; the hash stays {slots_words(answer.before)}"
    after = ("the global hash, for good (a later size is refused with EBUSY)" if answer.after == 0
             else f"{slots_words(answer.after)} (custom: the kernel no longer resizes it)")
    return f"{head}: futex hash {slots_words(answer.before)} -> {after}, {when}"
