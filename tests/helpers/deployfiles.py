"""Reading the deployment files the way their consumers do, for the tests beside this file:
a systemd unit (sections, repeated keys, backslash continuations), a Containerfile
(instructions with continuations) and the .dockerignore patterns."""
from __future__ import annotations

import fnmatch
import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
UNIT = DEPLOY / "systemd" / "futextrace.service"
DAEMONSET = DEPLOY / "kubernetes" / "daemonset.yaml"
CONTAINERFILE = DEPLOY / "Containerfile"
DOCKERIGNORE = REPO / ".dockerignore"
# Where the unit expects the checkout (`scripts/bootstrap.sh` run in it).
INSTALL_DIR = "/opt/futextrace"


def logical_lines(text: str, comment: str = "#") -> list[str]:
    """Lines with comments dropped and backslash continuations joined."""
    out, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith(comment) or line.startswith(";")):
            continue
        if line.startswith(comment) and pending:
            continue                      # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        out.append((pending + line).strip())
        pending = ""
    if pending:
        out.append(pending.strip())
    return out


def unit_entries(path: Path = UNIT) -> dict[str, list[tuple[str, str]]]:
    """{section: [(key, value), ...]} in file order (systemd allows repeated keys)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in logical_lines(path.read_text()):
        m = re.fullmatch(r"\[(\w+)\]", line)
        if m:
            current = sections.setdefault(m.group(1), [])
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, f"{path}: not KEY=VALUE in a section: {line!r}"
        current.append((key.strip(), value.strip()))
    return sections


def unit_value(key: str, section: str = "Service", path: Path = UNIT) -> str:
    values = [v for k, v in unit_entries(path)[section] if k == key]
    assert len(values) == 1, f"{key}= appears {len(values)} times in [{section}]"
    return values[0]


def unit_environment(path: Path = UNIT) -> dict[str, str]:
    """The unit's Environment= assignments."""
    pairs = [shlex.split(v) for k, v in unit_entries(path)["Service"] if k == "Environment"]
    return dict(a.split("=", 1) for words in pairs for a in words)


def unit_capabilities(path: Path = UNIT) -> list[str]:
    """The unit's capability set: CapabilityBoundingSet, which must equal AmbientCapabilities."""
    bounding = unit_value("CapabilityBoundingSet", path=path).split()
    ambient = unit_value("AmbientCapabilities", path=path).split()
    assert sorted(bounding) == sorted(ambient), (bounding, ambient)
    return bounding


def containerfile_instructions(path: Path = CONTAINERFILE) -> list[tuple[str, str]]:
    """[(INSTRUCTION, arguments), ...] in file order."""
    out = []
    for line in logical_lines(path.read_text()):
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def dockerignore_excludes(relpath: str, path: Path = DOCKERIGNORE) -> bool:
    """Whether the build context leaves `relpath` out (docker's rules: the last matching
    pattern wins, `!` re-includes, a pattern that matches a directory covers what is in it)."""
    excluded = False
    parts = relpath.split("/")
    for line in path.read_text().splitlines():
        pat = line.strip()
        if not pat or pat.startswith("#"):
            continue
        negate = pat.startswith("!")
        pat = pat.lstrip("!").strip("/")
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        anywhere = pat.removeprefix("**/") if pat.startswith("**/") else None
        if any(fnmatch.fnmatchcase(p, pat) or (anywhere and fnmatch.fnmatchcase(p.rsplit("/", 1)[-1], anywhere))
               for p in prefixes):
            excluded = not negate
    return excluded
