"""Output files: checked before tracing starts, so a bad path fails fast."""
from __future__ import annotations

import json
import sys

from futextrace.errors import FileProblem


def open_output(path: str):
    if path == "-":
        return sys.stdout
    try:
        return open(path, "w")
    except OSError as e:
        raise FileProblem(f"cannot write {path}: {e.strerror}")


def write_json(f, data: dict) -> None:
    json.dump(data, f, indent=1, sort_keys=False)
    f.write("\n")
    if f is not sys.stdout:
        f.close()
