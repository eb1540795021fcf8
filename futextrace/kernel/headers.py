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
import tempfile
from dataclasses import dataclass
from pathlib import Path

from futextrace.errors import EnvironmentProblem

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


def _copy_into(src: Path, dest: Path) -> None:
    """Copy the tree `src` into `dest`, merging with what is there. A symlink is
    copied as a link to where it resolves from `src` (Debian's relative links such
    as scripts -> ../../lib/linux-kbuild-6.1/scripts would dangle in the cache),
    and replaces a link of the same name that an earlier tree brought."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in dirnames + filenames:
            s, d = Path(dirpath) / name, dest / rel / name
            if s.is_symlink():
                target = os.path.normpath(os.path.join(dirpath, os.readlink(s)))
                if d.is_symlink() or d.is_file():
                    d.unlink()
                os.symlink(target, d)
            elif name in filenames:
                shutil.copy2(s, d)
        # os.walk lists a symlinked directory among dirnames; it was linked above.
        dirnames[:] = [n for n in dirnames if not (Path(dirpath) / n).is_symlink()]


def _merge_debian_split() -> Path | None:
    """Merge /usr/src/linux-headers-X-common and -X-amd64 into the cache. The
    merge happens in a temporary directory beside the result and is renamed into
    place only once complete, so a half-written tree is never found usable."""
    for arch_dir in sorted(glob.glob("/usr/src/linux-headers-*-amd64"), reverse=True):
        common = re.sub(r"-amd64$", "-common", arch_dir)
        if not os.path.isdir(common):
            continue
        name = os.path.basename(arch_dir).removeprefix("linux-headers-")
        dest = CACHE / "headers" / name
        if _usable(dest):
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest.parent))
        try:
            _copy_into(Path(common), tmp)
            _copy_into(Path(arch_dir), tmp)
            if not _usable(tmp):
                return None
            tmp.chmod(0o755)   # mkdtemp makes it private; BCC runs as any user
            shutil.rmtree(dest, ignore_errors=True)
            tmp.rename(dest)
        except OSError as e:
            print(f"futextrace: merging {common} and {arch_dir} failed: {e}", file=sys.stderr)
            return None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dest
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
    # Names starting with "." are merges in progress (or left by a crash).
    for cand in sorted((CACHE / "headers").glob("[!.]*"), reverse=True):
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
