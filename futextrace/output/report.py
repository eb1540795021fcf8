"""`futextrace report`: load a saved recording, render it again, draw it, wrap it in HTML."""
from __future__ import annotations

import json
from pathlib import Path

from futextrace.errors import FileProblem
from futextrace.output.jsonio import read_bounded, write_file
from futextrace.output.report_html import page
from futextrace.recording import SCHEMA, SCHEMA_VERSION, Recording

# Keys render_text() needs; a file without them cannot be rendered.
REQUIRED = ("method", "totals", "duration_s", "processes", "per_cpu", "per_node", "refcount", "resizes")


def _parse(path: str, what: str):
    data = read_bounded(path, what)
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FileProblem(f"{path} is not a {what} (not JSON: {str(e).splitlines()[0]})")


def check_recording(rec, path: str) -> Recording:
    """`rec` if it is a recording this futextrace reads, else a FileProblem that says why."""
    def not_rec(why: str) -> FileProblem:
        return FileProblem(f"{path} is not a futextrace recording ({why})")
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


def load_recording(path: str) -> Recording:
    """The recording in `path`, or a FileProblem that says why it is not one."""
    return check_recording(_parse(path, "futextrace recording"), path)


def load_carried(path: str) -> tuple[Recording, dict | None]:
    """The recording in `path`, bare or carried by `bench --json` (then with the
    benchmark's result) or `explain --json`; a FileProblem otherwise."""
    doc = _parse(path, "futextrace recording")
    if isinstance(doc, dict) and doc.get("schema") == "futextrace-bench":
        if not isinstance(doc.get("recording"), dict):
            raise FileProblem(f"{path} is not a futextrace recording (a bench run without tracing)")
        return check_recording(doc["recording"], path), doc.get("result")
    if isinstance(doc, dict) and "schema" not in doc and "explanation" in doc and "recording" in doc:
        return check_recording(doc["recording"], path), None
    return check_recording(doc, path), None


def write_html(path: str, rec: Recording, title: str, text: str, images: list[Path]) -> None:
    """One self-contained page (output/report_html.py): header, caveats, the
    pictures inlined as base64 with captions, tables, the text report."""
    from futextrace.output.plots.recording import PICTURES   # matplotlib: only for pictures
    captions = {name: caption for name, (_, caption) in PICTURES.items()}
    write_file(path, page(rec, title, text, images, captions))   # beside, then renamed: a failed write leaves the old page
