"""The `contention` section as text: bucket-lock waits per process and the
buckets that waited most (analysis/lockwaits.py builds the section)."""
from __future__ import annotations

from futextrace.output.text.names_text import wait_call_sites, with_name
from futextrace.output.text.words import blind_spot_lines, count_noun
from futextrace.recording import Contention


def _ms(ns: int) -> str:
    """A wait time in a unit that keeps it visible: 0.4 us, not 0.000 ms."""
    if ns >= 1_000_000:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e3:.1f} us" if ns else "0 ms"


def _us(ns: int) -> str:
    return f"{ns / 1e3:.1f} us"


def _ms_per_s(v: float | None) -> str:
    """A wait rate: ms/s from 1 ms/s up, us/s below (2.57 us/s, not 0.00257 ms/s)."""
    if not v:
        return "0 ms/s"
    return f"{v:.3g} ms/s" if v >= 1 else f"{v * 1e3:.3g} us/s"


NOT_VISIBLE = ("  n/a: no private-hash lookup was traced, and only private-hash bucket locks are "
               "(the global hash's, used by shared futexes and processes without a private hash, "
               "are not traced)")


def _waited_from(buckets: list[dict], named: dict | None, most: int = 6) -> list[str]:
    """Where the waits on the futexes shown came from (their call sites), one line a futex."""
    shown = [f["uaddr"] for b in buckets for f in b["futexes"][:4] if f["uaddr"]]
    rows = [(a, wait_call_sites(named[a])) for a in dict.fromkeys(shown) if named and a in named]
    rows = [(a, sites) for a, sites in rows if sites][:most]
    if not rows:
        return []
    return ["    waited on from:"] + [f"      {with_name(a, named)} ← {' | '.join(sites)}" for a, sites in rows]


def lockwait_lines(c: Contention | None, top: int = 5, names: dict[int, dict] | None = None) -> list[str]:
    """`names`: pid -> its futex_names, shown beside each waiting futex's address."""
    if not c:
        return []
    head = ["", f"Bucket-lock waits: {c['status']}"]
    if not c["status"].startswith("attached"):
        return head
    if c.get("private_lookups") == 0 and not c["waits"]:
        return head + [NOT_VISIBLE]
    bc = c["by_cause"]
    out = head + [f"  {count_noun(c['waits'], 'wait')}, {_ms(c['wait_ns'])} in {c['window_s']:.2f} s "
                  f"({_ms_per_s(c['wait_ms_per_s'])}); collision {count_noun(bc['collision']['waits'], 'wait')} "
                  f"{_ms(bc['collision']['wait_ns'])}, same futex {count_noun(bc['same_futex']['waits'], 'wait')} "
                  f"{_ms(bc['same_futex']['wait_ns'])}"
                  + (f", futex unknown {bc['unknown']['waits']:,}" if bc["unknown"]["waits"] else "")]
    if c.get("waits_lost"):
        out.append(f"  {c['waits_lost']:,} waits not stored (lock_waits map full)")
    for p in c["processes"]:
        pc = p["by_cause"]
        out.append(f"  PID {p['pid']} ({p['comm'] or '?'}): {count_noun(p['waits'], 'wait')}, {_ms(p['wait_ns'])} "
                   f"({_ms_per_s(p['wait_ms_per_s'])}): collision {_ms(pc['collision']['wait_ns'])}, "
                   f"same futex {_ms(pc['same_futex']['wait_ns'])}")
        out.append(f"    {'bucket':>10} {'waits':>9} {'total':>12} {'max':>10}  cause       futexes")
        for b in p["buckets"][:top]:
            named = (names or {}).get(p["pid"])
            futexes = ", ".join(f"{with_name(f['uaddr'], named) if f['uaddr'] else 'unknown'} ({f['waits']:,})"
                                for f in b["futexes"][:4])
            out.append(f"    {b['bucket']:>5}/{b['buckets']:<4} {b['waits']:>9,} {_ms(b['wait_ns']):>12} "
                       f"{_us(b['max_ns']):>10}  {b['cause'].replace('_', ' '):<11} {futexes}")
        out += _waited_from(p["buckets"][:top], (names or {}).get(p["pid"]))
        rest = p["buckets"][top:]
        if rest:   # the rows above then add up to the process's line, with this one
            out.append(f"    ... {count_noun(len(rest), 'more bucket')} with "
                       f"{count_noun(sum(b['waits'] for b in rest), 'wait')}, "
                       f"{_ms(sum(b['wait_ns'] for b in rest))} (all in the JSON)")
    out += blind_spot_lines(c.get("blind_spots", []), "  ")
    return out
