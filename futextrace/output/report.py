"""`futextrace report`: load a saved recording, render it again, draw it, wrap it in HTML."""
from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from futextrace.record.aggregate import SCHEMA, SCHEMA_VERSION
from futextrace.errors import FileProblem
from futextrace.output.jsonio import read_bounded

# Keys render_text() needs; a file without them cannot be rendered.
REQUIRED = ("method", "totals", "duration_s", "processes", "per_cpu", "per_node", "refcount", "resizes")


def load_recording(path: str) -> dict:
    """The recording in `path`, or a FileProblem that says why it is not one."""
    def not_rec(why: str) -> FileProblem:
        return FileProblem(f"{path} is not a futextrace recording ({why})")
    data = read_bounded(path, "futextrace recording")
    try:
        rec = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise not_rec(f"not JSON: {str(e).splitlines()[0]}")
    if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
        got = rec.get("schema") if isinstance(rec, dict) else type(rec).__name__
        raise not_rec(f"schema is {got!r}, expected {SCHEMA!r}")
    if rec.get("schema_version") != SCHEMA_VERSION:
        raise not_rec(f"schema_version {rec.get('schema_version')!r}; this futextrace reads "
                      f"version {SCHEMA_VERSION}")
    missing = [k for k in REQUIRED if k not in rec]
    if missing:
        raise not_rec(f"missing {', '.join(missing)}")
    return rec


def write_html(path: str, title: str, text: str, images: list[Path]) -> None:
    """One self-contained page: the text report and every image inlined as base64."""
    figs = []
    for img in images:
        b64 = base64.b64encode(img.read_bytes()).decode()
        figs.append(f'<figure><img alt="{html.escape(img.stem)}" src="data:image/png;base64,{b64}">'
                    f"<figcaption>{html.escape(img.stem)}</figcaption></figure>")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}
pre{{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:12px}}
img{{max-width:100%}} figure{{margin:2em 0}}</style></head>
<body><h1>{html.escape(title)}</h1>
{''.join(figs)}
<h2>Text report</h2><pre>{html.escape(text)}</pre>
</body></html>
"""
    from futextrace.output.jsonio import write_file
    write_file(path, page)   # beside, then renamed: a failed write leaves the old page
