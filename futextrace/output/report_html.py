"""The HTML report: one self-contained page (images inlined as base64, no scripts,
no external resources) to attach to a bug report. A header with the facts a
reader asks first, the caveats in wrapped text, the pictures with captions that
say what they show, HTML tables, and the text report at the end."""
from __future__ import annotations

import base64
import html
from pathlib import Path

from futextrace.output.text.estimates import approx
from futextrace.output.text.names_text import first_call_site, name_text
from futextrace.output.plots.common import pid_names
from futextrace.recording import Recording

MAX_ROWS = 40     # process and resize tables: the busiest / first rows

STYLE = """
body{font-family:system-ui,sans-serif;max-width:1150px;margin:1.5em auto;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;vertical-align:top}
th{background:#f2f2f2} td.l,th.l{text-align:left}
table.facts td,table.facts th{text-align:left}
.caveat{background:#fff8e1;border-left:4px solid #e0a800;padding:.4em 1em;margin:.6em 0;overflow-wrap:anywhere}
.caveat ul{margin:.2em 0}
figure{margin:1.5em 0} img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.95em;color:#333;margin-top:.3em}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f6f6;padding:1em;font-size:12px}
"""


def _e(v) -> str:
    return html.escape(str(v))


def _n(v) -> str:
    return f"{v:,}" if isinstance(v, int) else ("n/a" if v is None else _e(v))


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _table(head: list[str] | None, rows: list[list], left: int = 0, cls: str = "") -> str:
    """An HTML table (no header row without `head`); the first `left` columns are
    left-aligned (names, text). Cells are HTML already."""
    def cell(tag, i, v):
        return f"<{tag}{' class=l' if i < left else ''}>{v}</{tag}>"
    out = [f"<table{f' class={cls}' if cls else ''}>"]
    if head:
        out.append("<tr>" + "".join(cell("th", i, _e(h)) for i, h in enumerate(head)) + "</tr>")
    out += ["<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for r in rows]
    return "\n".join(out) + "</table>"


def _what_was_traced(rec: Recording) -> str:
    cmd = rec.get("command") or {}
    if cmd.get("argv"):
        status = cmd.get("exit_status")
        return (f"command <code>{_e(' '.join(cmd['argv']))}</code> (PID {_e(cmd.get('pid'))}"
                + (f", exit status {_n(status)}" if status is not None else "") + ")")
    targets = (rec.get("hash_at_attach") or {}).get("targets") or []
    if targets:
        return "PIDs " + ", ".join(_e(t) for t in targets)
    return "the whole system"


def header(rec: Recording) -> str:
    """Host, kernel, method, what was traced, start, duration and totals."""
    t = rec.get("totals") or {}
    k = rec.get("kernel") or {}
    m = rec.get("method") or {}
    cpus = k.get("online_cpus") or []
    nodes = k.get("nodes") or []
    facts = [
        ("host", _e(rec.get("host") or "not in this recording (made by an older futextrace)")),
        ("kernel", f"{_e(k.get('release', '?'))}, {len(cpus)} CPUs, {len(nodes) or '?'} NUMA node(s)"),
        ("method", f"{_e(m.get('name', '?'))}: {_e(m.get('why', ''))}"),
        ("traced", _what_was_traced(rec)),
        ("started", _e(rec.get("started_at", "?"))),
        ("duration", f"{rec.get('duration_s', 0):.2f} s"),
        ("lookups", f"{_n(t.get('lookups'))} ({t.get('lookups_per_s', 0):,.0f}/s): private hash "
                    f"{_n(t.get('private'))}, global hash {_n(t.get('global'))}, not attributed to a bucket "
                    f"{_n(t.get('unattributed'))}"),
        ("processes, resizes", f"{_count(len(rec.get('processes') or []), 'process', 'processes')} with "
                               f"lookups, {_count(len(rec.get('resizes') or []), 'resize', 'resizes')}"),
        ("futextrace", _e(rec.get("tool_version", "?"))),
    ]
    return _table(None, [[f"<b>{_e(a)}</b>", b] for a, b in facts], left=2, cls="facts")


def caveats(rec: Recording) -> str:
    """What the method cannot see and what the counts lack, as wrapped text."""
    m = rec.get("method") or {}
    t = rec.get("totals") or {}
    blind = m.get("blind_spots") or []
    items = [f"This method ({_e(m.get('name', '?'))}) cannot see:<ul>"
             + "".join(f"<li>{_e(s)}</li>" for s in blind) + "</ul>"] if blind else []
    if m.get("probes_fallback"):
        items.append(f"Preferred attach point refused: {_e(m['probes_fallback'])}.")
    fl = t.get("futex_list") or {}
    if fl and not fl.get("complete", True) and "futexes_unlisted" in fl:
        items.append(f"The per-futex list was full at {_n(fl.get('capacity'))} futexes; "
                     f"{_n(fl['futexes_unlisted'])} more were counted per bucket by the "
                     f"{_e(fl['seen_filter']['method'])}: distinct futexes and collisions are estimates; "
                     "bucket, process and CPU counts are exact.")
    elif fl and not fl.get("complete", True):
        items.append(f"The per-futex list holds {_n(fl.get('lookups_listed'))} lookups of "
                     f"{_n(t.get('lookups'))}: distinct futexes and collisions are bounds (estimates); "
                     "bucket, process and CPU counts are exact.")
    for key, what in (("lost_events", "events lost (ring buffer full)"),
                      ("missed_runs", "probe runs skipped by the kernel: their lookups are not counted")):
        if t.get(key):
            items.append(f"{_n(t[key])} {what}.")
    if rec.get("error"):
        items.append(f"The recording ended with an error: {_e(rec['error'])}.")
    return "".join(f'<div class="caveat">{i}</div>' for i in items)


def process_table(rec: Recording) -> str:
    names = pid_names(rec)
    rows = []
    for p in (rec.get("processes") or [])[:MAX_ROWS]:
        for h in p.get("hashes") or []:
            im = h.get("imbalance") or {}
            est = (h.get("estimates") or {}).get("distinct_futexes")
            futexes = _e(approx(est)) if est else _n(h.get("distinct_futexes"))
            ratio = (f"{im['max_over_mean']:.2f}" if im.get("max_over_mean") is not None
                     and h.get("lookups", 0) >= h.get("buckets", 1) else "n/a")
            rows.append([_e(p["pid"]), _e(names.get(p["pid"], p.get("comm", "?"))), _e(h["kind"]),
                         _n(h.get("buckets")), _n(h.get("lookups")), _n(im.get("used")), futexes, ratio])
    more = len(rec.get("processes") or []) - MAX_ROWS
    return (_table(["PID", "name", "hash", "buckets", "lookups", "buckets used", "distinct futexes",
                    "busiest / mean"], rows, left=3)
            + (f"<p>…and {more} more processes (all in the text report below).</p>" if more > 0 else ""))


NAMED_PER_BUCKET = 4   # futexes named per bucket in the colliding-futexes table


def colliding_table(rec: Recording) -> str:
    """The hottest buckets that hold more than one futex, each futex named with
    the call site of its first lookup (processes[].futex_names)."""
    names = pid_names(rec)
    rows = []
    for p in rec.get("processes") or []:
        named = p.get("futex_names")
        if not named:
            continue
        for h in p.get("hashes") or []:
            for b in h.get("hottest") or []:
                if b.get("futexes", 0) < 2:
                    continue
                shown = [f"<code>{_e(a)}</code> {_e(name_text(named[a]) + first_call_site(named[a]))}"
                         if a in named else f"<code>{_e(a)}</code>" for a in b["addresses"][:NAMED_PER_BUCKET]]
                more = b["futexes"] - len(shown)
                rows.append([f"{_e(names.get(p['pid'], p.get('comm', '?')))} ({p['pid']})",
                             "<br>".join(shown) + (f"<br>…and {more} more" if more > 0 else ""),
                             f"{_n(b['bucket'])} of {_n(h.get('buckets'))}", _n(b.get("lookups"))])
    if not rows:
        return "<p>No named futexes share a bucket in this recording.</p>"
    return _table(["process", "futexes (name ← call site of the first lookup)", "bucket", "lookups"],
                  rows[:MAX_ROWS], left=2)


def resize_table(rec: Recording) -> str:
    names = pid_names(rec)
    rows = []
    for r in (rec.get("resizes") or [])[:MAX_ROWS]:
        res = "ok" if r.get("result") == 0 else _n(r.get("result"))
        if r.get("result_inferred"):
            res += " (inferred)"
        pend = "pending" if r.get("pending_s") is None else f"{r['pending_s'] * 1000:.3f} ms"
        rows.append([f"{r['t']:.3f}", f"{_e(names.get(r['pid'], r.get('comm')))} ({r['pid']})",
                     _e(r.get("trigger")), _n(r.get("requested")), res, _n(r.get("old_buckets")),
                     _n(r.get("new_buckets")), pend])
    if not rows:
        return "<p>No resize during the recording.</p>"
    return _table(["t (s)", "process", "trigger", "requested", "result", "old buckets", "new buckets",
                   "request to pivot"], rows, left=3)


def cpu_table(rec: Recording) -> str:
    rows = [[_n(r.get("node")), _n(len(r.get("cpus") or [])), _n(r.get("lookups")), _n(r.get("private")),
             _n(r.get("global")), _n(r.get("atomic"))] for r in rec.get("per_node") or []]
    return _table(["node", "CPUs", "lookups", "private", "global", "atomic (of private)"], rows)


def figures(images: list[Path], captions: dict[str, str]) -> str:
    out = []
    for img in images:
        b64 = base64.b64encode(Path(img).read_bytes()).decode()
        cap = captions.get(Path(img).name, Path(img).stem)
        out.append(f'<figure><img alt="{_e(cap)}" src="data:image/png;base64,{b64}">'
                   f"<figcaption>{_e(cap)}</figcaption></figure>")
    return "\n".join(out)


def page(rec: Recording, title: str, text: str, images: list[Path], captions: dict[str, str]) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{STYLE}</style></head>
<body><h1>{_e(title)}</h1>
{header(rec)}
{caveats(rec)}
<h2>Pictures</h2>
{figures(images, captions) or "<p>No pictures.</p>"}
<h2>Processes and their hashes</h2>
{process_table(rec)}
<h2>Colliding futexes, named</h2>
{colliding_table(rec)}
<h2>Resizes</h2>
{resize_table(rec)}
<h2>Per NUMA node</h2>
{cpu_table(rec)}
<h2>Text report</h2>
<pre>{_e(text)}</pre>
</body></html>
"""
