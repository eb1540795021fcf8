"""`futextrace diff` in words: analysis/compare.py's pairs as one table per
process pair. "-" is a figure a recording does not have; "±?" a figure whose
noise the recording does not know (it is never guessed)."""
from __future__ import annotations

from futextrace.analysis.lockwaits import CAUSES

MATCH_WORDS = {"pid": "matched by pid", "comm": "matched by command name; the pids differ",
               "only_a": "only in A", "only_b": "only in B"}
CAUSE_WORDS = {"collision": "from collisions", "same_futex": "on one futex", "unknown": "futex unknown"}
# (figure, label, kind of number); the kind picks the format of value and difference.
PROCESS_ROWS = ([("lookups_per_s", "lookups/s", "rate"), ("wait_ms_per_s", "lock waits ms/s", "ms")]
                + [(f"{c}_wait_ms_per_s", f"  {CAUSE_WORDS[c]}", "ms") for c in CAUSES]
                + [("atomic_share", "atomic refcount share", "share"),
                   ("throughput_ops_per_s", "benchmark ops/s", "rate")])
HASH_ROWS = [("lookups_per_s", "lookups/s", "rate"), ("busiest_share", "busiest bucket share", "share"),
             ("collisions", "collisions", "count")]
LEGEND = ("-: the recording does not have this figure; ±x%: its noise as the recording knows it (stdev over "
          "its -i intervals, the benchmark's stddev, an estimate's error); ±?: noise not known (record with "
          "-i SECONDS for per-interval spread)")
WIDTHS = (26, 22, 22, 14)


def number(v, kind: str, signed: bool = False) -> str:
    if v is None:
        return "-"
    sign = "+" if signed else ""
    if kind == "share":
        return f"{v * 100:{sign}.1f}" + (" pp" if signed else "%")
    if kind == "ms" and v and abs(v) < 1:
        # Three significant digits: MariaDB's 0.00041 and 0.00084 ms/s both read "0.000"
        # with three decimals, beside a ratio of ×2.04.
        return f"{v:{sign}.3g}"
    if kind == "ms":
        return f"{v:{sign}.3f}"
    if kind == "rate" and abs(v) < 100:
        return f"{v:{sign}.3g}"   # a rate under 100/s: its digits, not 0
    return f"{v:{sign},.0f}"


def noise_text(noise: dict | None, kind: str) -> str:
    if noise is None:
        return "±?"
    if noise["source"] == "bounds":
        return f"[{noise['low']:,}..{noise['high']:,}]"
    pct = noise.get("stdev_pct", noise.get("error_pct"))
    if pct is not None:
        return f"±{pct:.1f}%"
    return f"±{number(noise['stdev'], kind)}"   # a spread around a mean of 0


def _side(value, noise, kind: str) -> str:
    return "-" if value is None else f"{number(value, kind)} {noise_text(noise, kind)}"


def _row(label: str, f: dict, kind: str) -> str:
    ratio = "-" if f["ratio"] is None else f"×{f['ratio']:.3g}"
    cells = [label, _side(f["a"], f["noise_a"], kind), _side(f["b"], f["noise_b"], kind),
             number(f["diff"], kind, signed=True)]
    return "  " + "".join(c.ljust(w) for c, w in zip(cells, WIDTHS)) + ratio


def _hash_name(h: dict | None) -> str:
    if h is None:
        return "none"
    return f"{h['buckets']:,} buckets, {h['mode'] or 'mode unknown'}" if h["buckets"] is not None else "size unknown"


def _who(p: dict | None) -> str:
    return f"PID {p['pid']} {p['comm'] or '?'}"


def _pair_lines(pair: dict) -> list[str]:
    if pair["match"] in ("only_a", "only_b"):
        return ["", f"{_who(pair['a'] or pair['b'])}: {MATCH_WORDS[pair['match']]}"]
    head = _who(pair["a"]) if pair["match"] == "pid" else f"{_who(pair['a'])} ↔ {_who(pair['b'])}"
    out = ["", f"{head} ({MATCH_WORDS[pair['match']]})",
           "  " + "".join(c.ljust(w) for c, w in zip(("", "A", "B", "B−A"), WIDTHS)) + "B/A"]
    out += [_row(label, pair["figures"][name], kind) for name, label, kind in PROCESS_ROWS]
    for h in pair["hashes"]:
        nth = f" #{h['rank'] + 1}" if h["rank"] else ""
        out.append(f"  {h['kind']} hash{nth}: A {_hash_name(h['a'])}; B {_hash_name(h['b'])}")
        out += [_row("  " + label, h["figures"][name], kind) for name, label, kind in HASH_ROWS]
    return out


def _run_line(name: str, run: dict) -> str:
    d = run["duration_s"]
    parts = [f"{d:.2f} s" if d is not None else "duration unknown", f"from {run['started_at'] or '?'}",
             f"{run['method'] or '?'} method",
             f"{run['intervals']} intervals" if run["intervals"] else "no -i intervals",
             "lock waits measured" if run["lock_waits_measured"] else "lock waits not measured"]
    if run["benchmark"]:
        parts.append("with a benchmark result")
    return f"{name}: {run['file'] or '?'}: " + ", ".join(parts)


def render(cmp: dict) -> str:
    """The comparison as text: one header line per recording, the legend, one table per pair."""
    out = [_run_line("A", cmp["a"]), _run_line("B", cmp["b"]), LEGEND]
    if not cmp["processes"]:
        out.append("no process made futex lookups in either recording")
    for pair in cmp["processes"]:
        out += _pair_lines(pair)
    return "\n".join(out)
