"""How an estimate reads, in every output: "≈ N (±x%)"."""
from __future__ import annotations

from futextrace.recording import Estimate


def approx(est: Estimate) -> str:
    """An estimate as "≈ N (±x%)" (recordings made before the first-seen
    filter hold bounds instead: "low..high")."""
    if "value" not in est:
        return f"{est['low']}..{est['high']}"
    pct = est["error_pct"]
    return f"≈ {est['value']:,} (±{pct:.2g}%)" if pct >= 0.01 else f"≈ {est['value']:,} (±<0.01%)"
