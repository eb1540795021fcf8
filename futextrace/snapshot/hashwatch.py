"""`snapshot` where the kernel refuses the task iterator: futex calls are
traced for a moment (HASH_SEEN events, as `record` sees them), so a process
that makes no futex call while watched is "not seen"."""
from __future__ import annotations

from futextrace.procs import targets
from futextrace.procs.hashread import WATCH, header
from futextrace.procs.hashrows import describe
from futextrace.record.recorder import RecordOptions, record_pids
from futextrace.recording import Recording


def latest_states(rec: Recording) -> dict[int, dict]:
    """pid -> its last hash state in the recording."""
    out: dict[int, dict] = {}
    for s in sorted(rec.get("hash_states", []), key=lambda s: s["t"]):
        out[s["pid"]] = s
    return out


def read_by_watching(pids: list[int], duration: float, model, refused: str) -> dict:
    """Trace futex calls for `duration` s: a process's hash shows when it makes one."""
    rec = record_pids(RecordOptions(pids=list(pids), duration=duration, method="auto"), model)
    states = latest_states(rec)
    comms = {p["pid"]: p["comm"] for p in rec.get("processes", [])}
    rows = []
    for pid in list(pids) or sorted(states):
        s = states.get(pid)
        row = {"pid": pid, "comm": (s or {}).get("comm") or comms.get(pid, ""), "threads": None,
               **describe(s), "refcount": None, "pending": None}
        if s is None and not targets.alive(pid):
            row["text"] = "exited while watching, before a futex call was seen"
        rows.append(row)
    why = f"watched futex calls for {rec['duration_s']:.1f} s: the task iterator is unavailable ({refused})"
    # A PID that exits ends the watch early (record_pids); it is a row, not an error.
    return {**header(model, WATCH, why), "duration_s": rec["duration_s"], "processes": rows,
            "note": (rec.get("target_exited") or {}).get("note")}
