"""The words for setting a futex hash size from outside (`set`, `run`, `record --slots`):
what was asked, the kernel's answers, and what each refusal means to do. They take
the answers as acting/inject.Answer.as_json() gives them (and a recording keeps them)."""
from __future__ import annotations

WHY = {
    "EINVAL": "{asked} is not a size the kernel takes: a power of two, at least 2 (or --global)",
    "EBUSY": ("the process went to the global hash, which is for good: a private hash cannot "
              "come back in it; restart it with `futextrace run --slots N -- COMMAND`"),
    "ENOMEM": "the kernel has no memory for {asked} (64 bytes a bucket)",
}


def asked_words(slots: int) -> str:
    return "the global hash" if slots == 0 else f"{slots:,} buckets"


def slots_words(slots: int | None) -> str:
    if slots is None:
        return "unknown"
    return "0 (the global hash, or no private hash yet)" if slots == 0 else f"{slots:,} buckets"


def refusal(doc: dict) -> str | None:
    """One line for a size the kernel refused; None where it took it (or was not asked)."""
    if doc["result"] in (None, "ok"):
        return None
    asked = asked_words(doc["requested_slots"])
    why = WHY.get(doc["result"], "see prctl(2), PR_FUTEX_HASH").format(asked=asked)
    return f"the kernel refused {asked} ({doc['result']}): {why}"


def result_line(doc: dict, when: str) -> str:
    head = f"{doc['comm']} ({doc['pid']}), thread {doc['tid']}"
    if doc["result"] is None:
        return f"{head}: {doc['note'] or 'the call was not completed'}; hash {slots_words(doc['before_slots'])}"
    if doc["result"] != "ok":
        return f"{head}: {refusal(doc)}; the hash stays {slots_words(doc['before_slots'])}"
    after = ("the global hash, for good (a later size is refused with EBUSY)" if doc["after_slots"] == 0
             else f"{slots_words(doc['after_slots'])} (custom: the kernel no longer resizes it)")
    return f"{head}: futex hash {slots_words(doc['before_slots'])} -> {after}, {when}"


def tree_summary(docs: list[dict], slots: int) -> str:
    """run --children: one line for the processes that took the size (each by its last
    image's name), then each refusal or incomplete call."""
    last = {d["pid"]: d for d in docs}            # a process that exec'd: its last image
    took = [d for d in last.values() if d["result"] == "ok"]
    names = ", ".join(f"{d['comm']} ({d['pid']})" for d in took)
    lines = [f"{asked_words(slots)} set in {len(took)} process{'es' if len(took) != 1 else ''}"
             + (f": {names}" if names else "")]
    lines += [result_line(d, "at its start") for d in last.values() if d["result"] != "ok"]
    return "\nfutextrace: ".join(lines)
