"""What every picture of one recording shares: one name per pid, which processes
and hashes get a panel and which are folded into a footnote, and the footnote."""
from __future__ import annotations

import textwrap
from pathlib import Path

from futextrace.output.plots.figure import save_figure
from futextrace.recording import Recording

FOLD_SHARE = 0.02    # a hash or process with under 2% of the recording's lookups is folded...
FOLD_MIN = 20        # ...and so is one with under 20 lookups, whatever its share
MAX_PANELS = 6       # at most this many panels; the rest are folded too
FOOTNOTE_PT = 8
FOOTNOTE_CHARS = 130     # wrap width of footnotes (about the width of a 9 in figure at 8 pt)
FOOTNOTE_LINES = 4


def save(fig, path: Path) -> Path:
    return save_figure(fig, path, bbox_inches="tight")


def fold_threshold(rec: Recording) -> int:
    """Fewest lookups a hash or process needs for a panel of its own."""
    total = (rec.get("totals") or {}).get("lookups") or 0
    return max(FOLD_MIN, int(FOLD_SHARE * total + 0.999))


def pid_names(rec: Recording) -> dict[int, str]:
    """One name per pid for every picture: the process's name from `processes`
    (the thread group leader's), else from the hash at attach, else from the
    first resize or hash state seen (which may be a thread's name)."""
    names: dict[int, str] = {}
    sources = [rec.get("processes") or [],
               ((rec.get("hash_at_attach") or {}).get("processes") or {}).values(),
               rec.get("hash_states") or [], rec.get("resizes") or []]
    for source in sources:
        for item in source:
            pid, comm = item.get("pid"), item.get("comm")
            if pid is not None and comm and pid not in names:
                names[pid] = comm
    return names


def who(names: dict[int, str], pid: int) -> str:
    return f"{names.get(pid, '?')} ({pid})"


def footnote_text(lead: str, items: list[str]) -> str:
    """`lead` then the items, wrapped, at most FOOTNOTE_LINES lines ("…and N more")."""
    if not items:
        return ""
    lines = textwrap.wrap(lead + " " + ", ".join(items), FOOTNOTE_CHARS)
    if len(lines) <= FOOTNOTE_LINES:
        return "\n".join(lines)
    shown = []
    for item in items:
        trial = textwrap.wrap(lead + " " + ", ".join(shown + [item]) + f" …and {len(items)} more",
                              FOOTNOTE_CHARS)
        if len(trial) > FOOTNOTE_LINES:
            break
        shown.append(item)
    rest = len(items) - len(shown)
    return "\n".join(textwrap.wrap(lead + " " + ", ".join(shown) + f" …and {rest} more", FOOTNOTE_CHARS))


def add_footnote(fig, text: str) -> None:
    """Under the panels, left-aligned, inside the constrained layout (so it never
    overlaps an axis label)."""
    if text:
        fig.supxlabel(text, fontsize=FOOTNOTE_PT, x=0.01, ha="left", color="0.25")


def pow2_label(v: float, _pos=None) -> str:
    n = int(round(v))
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    return str(n)
