"""Hand-made ring-buffer events (struct ft_event as record/session.py
decodes it) for the unit tests of the timeline, explain and the live view."""
from futextrace.kernel.layout import EVENT


def event(typ: str, t: float, tid: int = 100, nr_threads: int = 2, **fields) -> dict:
    """An event of type `typ` (FTE_*) at `t` s from process 100, no hash
    unless `fields` give one."""
    e = {"type": EVENT[typ], "t": t, "tgid": 100, "tid": tid, "comm": "w", "hash": 0, "hash_mask": 0,
         "hash_new": 0, "hash_new_mask": 0, "arg0": 0, "arg1": 0, "ret": 0, "nr_threads": nr_threads,
         "custom": 0}
    e.update(fields)
    return e
