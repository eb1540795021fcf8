"""docs/architecture.md's map matches the tree.

The rule, stated in that file under its package table:
- every package under futextrace/ (a folder with __init__.py) has one row in "The
  Python side" table, first cell `pkg/` (`output/plots/` for a nested one), and that
  row's modules cell names every .py and .c file of the package except __init__.py,
  and no file that is not there;
- every module at futextrace/'s top level is named (`name.py`) in that section's text
  (not in the table, where `recording.py` is output/plots/'s);
- every .h and .c file under bpf/ has a row (first cell `bpf/name`) in "The kernel
  side" table, and the table has no row for a file that is not there.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "futextrace"
BPF = ROOT / "bpf"
SOURCE = (".py", ".c")


def section(text: str, title: str) -> str:
    """The text of the `## title` section, up to the next `## `."""
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def table_rows(text: str) -> dict[str, list[str]]:
    """First cell (backticks removed) -> the row's cells, for each table row."""
    rows = {}
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    return rows


def named_files(cell: str) -> set[str]:
    return set(re.findall(r"`([\w.]+\.(?:py|c))`", cell))


def packages() -> dict[str, set[str]]:
    """`pkg/` (relative to futextrace/) -> its .py and .c files but __init__.py."""
    out = {}
    for init in sorted(PACKAGE.rglob("__init__.py")):
        folder = init.parent
        if folder == PACKAGE:
            continue
        files = {p.name for p in folder.iterdir() if p.is_file() and p.suffix in SOURCE} - {"__init__.py"}
        out[folder.relative_to(PACKAGE).as_posix() + "/"] = files
    return out


def python_side_problems(doc: str) -> list[str]:
    text = section(doc, "The Python side")
    rows = table_rows(text)
    problems = []
    tree = packages()
    for pkg, files in tree.items():
        if pkg not in rows:
            problems.append(f"package futextrace/{pkg} has no row in docs/architecture.md's package table")
            continue
        listed = named_files(rows[pkg][1])
        problems += [f"futextrace/{pkg}{f} is not named in the `{pkg}` row" for f in sorted(files - listed)]
        problems += [f"the `{pkg}` row names {f}, which futextrace/{pkg} does not have"
                     for f in sorted(listed - files)]
    problems += [f"the package table has a row `{r}` and futextrace/ has no such package"
                 for r in rows if r not in tree]
    prose = "\n".join(line for line in text.splitlines() if not line.startswith("|"))   # a row's `x.py` is its package's
    top = {p.name for p in PACKAGE.glob("*.py")} - {"__init__.py"}
    problems += [f"futextrace/{m} (a top-level module) is not named in \"The Python side\"'s text"
                 for m in sorted(top) if f"`{m}`" not in prose]
    return problems


def kernel_side_problems(doc: str) -> list[str]:
    rows = table_rows(section(doc, "The kernel side"))
    files = {f"bpf/{p.name}" for p in BPF.iterdir() if p.suffix in (".h", ".c")}
    return ([f"{f} has no row in docs/architecture.md's kernel side table" for f in sorted(files - set(rows))]
            + [f"the kernel side table has a row `{r}` and there is no such file"
               for r in sorted(set(rows) - files)])


def test_every_package_and_module_is_in_the_map():
    problems = python_side_problems(DOC.read_text())
    assert problems == [], "\n".join(problems)


def test_every_bpf_file_is_in_the_kernel_side_table():
    problems = kernel_side_problems(DOC.read_text())
    assert problems == [], "\n".join(problems)


def test_the_check_names_what_is_missing():
    """A package without a row, a module its row does not name, a stale name, a
    top-level module never named and a bpf file without a row are each reported."""
    doc = DOC.read_text()
    doc = doc.replace("| `export/` |", "| `exported/` |", 1)                 # export/ loses its row
    doc = doc.replace("`figure.py`, ", "`figure.py`, `gone.py`, ", 1)          # a stale name...
    doc = doc.replace("`ramp.py` `bench --ramp --plot`", "", 1)
    doc = doc.replace(", `ramp.py` |", " |", 1)                               # ...and ramp.py unnamed
    doc = doc.replace("`recording.py` types", "recording.py types", 1)
    doc = doc.replace("| `bpf/tiers.h` |", "| tiers |", 1)
    found = python_side_problems(doc) + kernel_side_problems(doc)
    assert "package futextrace/export/ has no row in docs/architecture.md's package table" in found
    assert "the package table has a row `exported/` and futextrace/ has no such package" in found
    assert "futextrace/output/plots/ramp.py is not named in the `output/plots/` row" in found
    assert "the `output/plots/` row names gone.py, which futextrace/output/plots/ does not have" in found
    assert "futextrace/recording.py (a top-level module) is not named in \"The Python side\"'s text" in found
    assert "bpf/tiers.h has no row in docs/architecture.md's kernel side table" in found
    assert len(found) == 6, found
