"""The bucket-lock waits of a recording: the map reader's dump of them
(loading/maps.py, loading/lockwaits.py) turned into the recording's
`contention` section (analysis/lockwaits.py)."""
from __future__ import annotations

from futextrace.analysis.lockwaits import section
from futextrace.procs import targets
from futextrace.recording import Contention


def lockwaits_section(raw: dict, duration_s: float, comms: dict[int, str]) -> Contention:
    rows = raw.get("lock_waits", [])
    names = dict(comms)
    for tgid in {r["tgid"] for r in rows} - set(names):
        names[tgid] = targets.comm_label(tgid)
    return section(rows, raw.get("lock_counters", {}), duration_s,
                   raw.get("contention_status", "not recorded"), names)
