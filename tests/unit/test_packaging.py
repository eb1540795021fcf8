"""Every package of futextrace/ is in pyproject.toml's package list: an
installed futextrace without one fails at its first import."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_installed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "futextrace").rglob("__init__.py")}
    assert found - listed == set()
