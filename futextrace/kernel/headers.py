"""Find (or prepare) a kernel header tree that BCC can compile against.

futextrace takes every futex/mm offset from BTF, so the headers only need to be
a tree BCC accepts; a mismatch with the running kernel is reported by `doctor`,
not fatal. Order: $BCC_KERNEL_SOURCE, /lib/modules/$(uname -r)/build, then a
merged copy of Debian's split linux-headers-*-common/-amd64 under the cache.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("FUTEXTRACE_CACHE", "/var/cache/futextrace"))


@dataclass
class HeaderTree:
    path: Path
    version: str          # kernel release the headers are for ("" if unknown)
    source: str           # how it was found
    matches_running: bool


def _release_of(tree: Path) -> str:
    utsrelease = tree / "include/generated/utsrelease.h"
    try:
        m = re.search(r'"([^"]+)"', utsrelease.read_text())
        return m.group(1) if m else ""
    except OSError:
        return ""


def _usable(tree: Path) -> bool:
    return (tree / "include/linux/kconfig.h").is_file() and (tree / "arch/x86/include").is_dir() \
        and (tree / "include/generated/autoconf.h").is_file()


def _merge_debian_split() -> Path | None:
    """Merge /usr/src/linux-headers-X-common and -X-amd64 into the cache."""
    for arch_dir in sorted(glob.glob("/usr/src/linux-headers-*-amd64"), reverse=True):
        common = re.sub(r"-amd64$", "-common", arch_dir)
        if not os.path.isdir(common):
            continue
        name = os.path.basename(arch_dir).removeprefix("linux-headers-")
        dest = CACHE / "headers" / name
        if _usable(dest):
            return dest
        try:
            tmp = dest.with_name(dest.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(common, tmp, symlinks=True)
            shutil.copytree(arch_dir, tmp, symlinks=True, dirs_exist_ok=True)
            shutil.rmtree(dest, ignore_errors=True)
            tmp.rename(dest)
        except OSError:
            return None
        return dest if _usable(dest) else None
    return None


def find_header_tree(prepare: bool = True) -> HeaderTree | None:
    running = os.uname().release
    env = os.environ.get("BCC_KERNEL_SOURCE")
    if env and _usable(Path(env)):
        rel = _release_of(Path(env))
        return HeaderTree(Path(env), rel, "$BCC_KERNEL_SOURCE", rel == running)
    build = Path("/lib/modules") / running / "build"
    if _usable(build):
        rel = _release_of(build)
        return HeaderTree(build, rel, str(build), rel in ("", running))
    merged = None
    for cand in sorted((CACHE / "headers").glob("*"), reverse=True):
        if _usable(cand):
            merged = cand
            break
    if merged is None and prepare:
        merged = _merge_debian_split()
    if merged is None:
        return None
    rel = _release_of(merged)
    return HeaderTree(merged, rel, "merged Debian linux-headers in " + str(merged.parent), rel == running)


def ensure_tracefs() -> None:
    """BCC reads tracepoint formats from tracefs, which some machines do not
    mount at boot. Mount it (root only) before bcc is imported."""
    if os.path.isdir("/sys/kernel/tracing/events") or os.path.isdir("/sys/kernel/debug/tracing/events"):
        return
    if os.geteuid() == 0:
        os.system("mount -t tracefs nodev /sys/kernel/tracing >/dev/null 2>&1")


def bcc_environment(prepare: bool = True) -> HeaderTree:
    """Point BCC at a header tree (sets BCC_KERNEL_SOURCE) or fail with advice."""
    from futextrace.errors import EnvironmentProblem
    ensure_tracefs()
    tree = find_header_tree(prepare=prepare)
    if tree is None:
        raise EnvironmentProblem(
            "no kernel header tree for BCC: run scripts/bootstrap.sh "
            "(installs linux-headers-amd64) or set BCC_KERNEL_SOURCE")
    if tree.source != str(Path("/lib/modules") / os.uname().release / "build"):
        os.environ["BCC_KERNEL_SOURCE"] = str(tree.path)
    return tree


if __name__ == "__main__":
    if "--prepare" in sys.argv:
        t = find_header_tree(prepare=True)
        if t is None:
            print("no header tree found", file=sys.stderr)
            sys.exit(1)
        print(t.path)
