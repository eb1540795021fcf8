"""What resizes cost a process (analysis/atomic.py), in words."""
from __future__ import annotations

from futextrace.recording import ResizeCost


def installed_text(c: ResizeCost) -> str:
    """'32 buckets (installed), 64 pending since +0.552 s' and the like."""
    inst = c["installed"]
    if inst is None:
        text = "installed size not seen"
    elif inst["buckets"] == 0:
        text = "no private hash (global hash)"
    else:
        text = f"{inst['buckets']} buckets (installed{', custom' if inst['custom'] else ''})"
    p = c["pending"]
    if p:
        text += (f"; {p['buckets']} pending since +{p['since_t']:.3f} s "
                 f"({p['atomic_share']:.1%} of its refcount gets atomic)")
    return text


def atomic_text(c: ResizeCost) -> str | None:
    """One line on atomic refcount time, or None when there was none."""
    a = c["atomic"]
    if not a["windows"]:
        return None
    label = "" if a["source"] == "measured" else " (inferred)"
    still = " (one still open at the end)" if any(w["open"] for w in a["windows"]) else ""
    return (f"atomic refcounts{label}: {a['total_s'] * 1000:.2f} ms over {len(a['windows'])} "
            f"pending replacement(s){still}, longest {a['longest_s'] * 1000:.2f} ms; "
            f"{a['lookups']:,} lookups made in atomic mode ({a['share']:.1%} of its private lookups)")
