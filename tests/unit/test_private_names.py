"""No futextrace module reaches into another's private names: a leading
underscore means "this module only". Found by parsing each file here (not with
scripts/import-cycles.py): `from futextrace.x import _name`, relative forms
included, and `x._name` where x is a futextrace module the file imported."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted((root / "futextrace").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _absolute(node: ast.ImportFrom, name: str, is_pkg: bool) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id] + parts[::-1] if isinstance(node, ast.Name) else None


def _bindings(tree: ast.Module, name: str, path: Path, mods: dict[str, Path], found: list[str]) -> dict[str, str]:
    """Local name -> futextrace module, for every import in the file; private
    names taken by `from … import` go to `found`."""
    bound: dict[str, str] = {}
    for st in ast.walk(tree):
        if isinstance(st, ast.Import):
            for a in st.names:
                if a.name.split(".")[0] == "futextrace":
                    bound[a.asname or "futextrace"] = a.name if a.asname else "futextrace"
        elif isinstance(st, ast.ImportFrom):
            mod = _absolute(st, name, path.name == "__init__.py")
            if mod.split(".")[0] != "futextrace":
                continue
            for a in st.names:
                if f"{mod}.{a.name}" in mods:
                    bound[a.asname or a.name] = f"{mod}.{a.name}"
                elif _private(a.name) and mod != name:
                    found.append(f"{name} line {st.lineno}: from {mod} import {a.name}")
    return bound


def private_uses(root: Path = ROOT) -> list[str]:
    mods = _modules(root)
    found: list[str] = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        bound = _bindings(tree, name, path, mods, found)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            chain = _dotted(node.value)
            if not chain or chain[0] not in bound:
                continue
            owner: str | None = bound[chain[0]]
            for part in chain[1:]:
                owner = f"{owner}.{part}" if f"{owner}.{part}" in mods else None
                if owner is None:
                    break
            if owner and owner != name:
                found.append(f"{name} line {node.lineno}: {'.'.join(chain)}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names():
    assert private_uses() == []


def _write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_each_form_of_reaching_in_is_found(tmp_path):
    _write(tmp_path, "futextrace/__init__.py", "")
    _write(tmp_path, "futextrace/sub/__init__.py", "")
    _write(tmp_path, "futextrace/sub/low.py", "def _hidden():\n    pass\n\n\ndef shown():\n    _hidden()\n")
    _write(tmp_path, "futextrace/a.py", "from futextrace.sub.low import _hidden\n")
    _write(tmp_path, "futextrace/sub/b.py", "from . import low\n\n\ndef f():\n    return low._hidden()\n")
    _write(tmp_path, "futextrace/sub/c.py", "from .low import _hidden as h\n")
    _write(tmp_path, "futextrace/d.py", "import futextrace.sub.low as lo\nimport futextrace\n\n\n"
           "def f():\n    return lo._hidden, futextrace.sub.low._hidden\n")
    assert sorted(private_uses(tmp_path)) == [
        "futextrace.a line 1: from futextrace.sub.low import _hidden",
        "futextrace.d line 6: futextrace.sub.low._hidden",
        "futextrace.d line 6: lo._hidden",
        "futextrace.sub.b line 5: low._hidden",
        "futextrace.sub.c line 1: from futextrace.sub.low import _hidden",
    ]


def test_own_privates_dunders_and_other_packages_pass(tmp_path):
    _write(tmp_path, "futextrace/__init__.py", "__version__ = '1'\n")
    _write(tmp_path, "futextrace/low.py", "import os\n\n\ndef _mine():\n    return os._exit, _mine\n")
    _write(tmp_path, "futextrace/high.py", "from futextrace import __version__, low\n\n\n"
           "def f(obj):\n    return low.shown, obj._field, low.__name__\n")
    assert private_uses(tmp_path) == []
