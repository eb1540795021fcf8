"""Constants shared with the BPF side, read from bpf/futextrace.h itself.

Struct layouts come to Python through BCC's ctypes (generated from the same
header when the program is compiled); the enums are parsed here so code that
never loads BPF (report, unit tests) uses the very same numbers.
"""
from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from pathlib import Path


def bpf_dir() -> Path:
    # A source checkout (editable install) has bpf/ beside the package; an
    # installed wheel carries it as the package futextrace.bpf.
    repo = Path(__file__).resolve().parents[2] / "bpf"
    if (repo / "futextrace.h").is_file():
        return repo
    return Path(str(resources.files("futextrace.bpf")))


def header_text() -> str:
    return (bpf_dir() / "futextrace.h").read_text()


@lru_cache(maxsize=None)
def enum(name: str) -> dict[str, int]:
    """Members of `enum <name>` in futextrace.h, with C's implicit numbering."""
    text = re.sub(r"/\*.*?\*/", "", header_text(), flags=re.S)
    m = re.search(r"enum\s+%s\s*\{(.*?)\};" % re.escape(name), text, flags=re.S)
    if not m:
        raise KeyError(f"enum {name} not in futextrace.h")
    values, nxt = {}, 0
    for item in m.group(1).split(","):
        item = item.strip()
        if not item:
            continue
        if "=" in item:
            key, val = (s.strip() for s in item.split("=", 1))
            nxt = int(val, 0)
        else:
            key = item
        values[key] = nxt
        nxt += 1
    return values


@lru_cache(maxsize=None)
def define(name: str) -> int:
    """The integer value of `#define <name> <value>` in futextrace.h."""
    m = re.search(r"^#define\s+%s\s+\(?\s*(-?(?:0x[0-9a-fA-F]+|\d+))\s*\)?\s*$" % re.escape(name),
                  header_text(), flags=re.M)
    if not m:
        raise KeyError(f"#define {name} not in futextrace.h")
    return int(m.group(1), 0)


def names(name: str) -> dict[int, str]:
    return {v: k for k, v in enum(name).items()}


KIND = enum("ft_kind")
COUNTER = enum("ft_counter")
EVENT = enum("ft_event_type")
