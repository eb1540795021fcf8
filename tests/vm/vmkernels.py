"""Fetch Debian kernels and boot them under QEMU with virtme-ng (test harness support).

The build machines have no kprobes and refuse fentry, so kernel-specific probe
paths are tested in guests booted from real Debian kernel packages. Packages
come from the system's own Debian mirror through a *private* apt state under
the cache; the system's apt configuration is never changed.

    python tests/vm/vmkernels.py fetch 7.3 6.18   # prints the kernel image paths
    python tests/vm/vmkernels.py list             # what the index offers
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
SUITES = ("trixie-backports", "sid")
LISTS_MAX_AGE_S = 12 * 3600
# 6.16-6.18: linux-image-<abi> holds the kernel and modules. 6.19+: linux-image-<abi>
# is a meta package, the kernel is in linux-binary-<abi>, the modules in linux-modules-<abi>.
_ABI = re.compile(r"^linux-(image|binary|modules)-((\d+)\.(\d+)\.(\d+)\+deb\d+-amd64)$")


class KernelFetchError(Exception):
    pass


def cache_root() -> Path:
    return Path(os.environ.get("FUTEXTRACE_CACHE", "/var/cache/futextrace"))


def kernels_dir() -> Path:
    """Unpacked kernels, one directory per release (kernels/<release> is scripts/extract-btf.py's)."""
    return cache_root() / "kernels" / "vm"


def private_apt() -> "PrivateApt":
    return PrivateApt(cache_root() / "kernels" / "apt")


# --- the system's Debian mirror -------------------------------------------------

def _deb822_entries(text: str):
    for para in re.split(r"\n\s*\n", text):
        fields = {}
        for line in para.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            k, v = line.split(":", 1)
            fields[k.strip().lower()] = v.split()
        if "deb" in fields.get("types", []) and fields.get("enabled", ["yes"])[0] != "no":
            for uri in fields.get("uris", []):
                for suite in fields.get("suites", []):
                    yield uri, suite


def _one_line_entries(text: str):
    for line in text.splitlines():
        line = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(line) >= 3 and line[0] == "deb":
            yield line[1], line[2]


def debian_mirror() -> str:
    """The URI the system itself uses for the main Debian archive (not -security)."""
    sources = []
    d = Path("/etc/apt/sources.list.d")
    for f in sorted(d.glob("*.sources")) if d.is_dir() else []:
        sources += list(_deb822_entries(f.read_text(errors="replace")))
    for f in [Path("/etc/apt/sources.list")] + (sorted(d.glob("*.list")) if d.is_dir() else []):
        if f.is_file():
            sources += list(_one_line_entries(f.read_text(errors="replace")))
    for uri, suite in sources:
        # The main archive carries the plain codename suite; the security archive does not.
        if "-" not in suite and "security" not in uri:
            return uri.rstrip("/")
    raise KernelFetchError("no Debian mirror found in /etc/apt/sources.list{,.d}")


# --- private apt state -----------------------------------------------------------

class PrivateApt:
    """apt-get/apt-cache with sources, lists and caches all under `root`."""

    def __init__(self, root: Path):
        self.root = root
        self.sources = root / "sources.list"
        self.lists = root / "lists"
        self.cache = root / "cache"

    def opts(self) -> list[str]:
        return ["-o", f"Dir::Etc::SourceList={self.sources}", "-o", "Dir::Etc::SourceParts=/dev/null",
                "-o", f"Dir::State::Lists={self.lists}", "-o", f"Dir::Cache={self.cache}",
                # The private dirs belong to root; the _apt sandbox user could not write them.
                "-o", "APT::Sandbox::User=root"]

    def _run(self, tool: str, *args: str, cwd: Path | None = None) -> str:
        p = subprocess.run([tool, *self.opts(), *args], cwd=cwd, text=True,
                           capture_output=True)
        if p.returncode != 0:
            raise KernelFetchError(f"{tool} {' '.join(args)} failed: {p.stderr.strip()[-800:]}")
        return p.stdout

    def update(self, force: bool = False) -> None:
        mirror = debian_mirror()
        want = "".join(f"deb [signed-by={KEYRING}] {mirror} {s} main\n" for s in SUITES)
        for d in (self.lists / "partial", self.cache / "archives" / "partial"):
            d.mkdir(parents=True, exist_ok=True)
        stamp = self.root / "updated"
        fresh = stamp.exists() and time.time() - stamp.stat().st_mtime < LISTS_MAX_AGE_S
        if not force and fresh and self.sources.exists() and self.sources.read_text() == want:
            return
        self.sources.write_text(want)
        self._run("apt-get", "-q", "update")
        stamp.touch()

    def package_names(self, prefix: str) -> list[str]:
        return self._run("apt-cache", "pkgnames", prefix).split()

    def download(self, pkg: str, dest: Path) -> Path:
        dest.mkdir(parents=True, exist_ok=True)
        self._run("apt-get", "-q", "download", pkg, cwd=dest)
        debs = sorted(dest.glob(f"{pkg}_*.deb"), key=lambda p: p.stat().st_mtime)
        if not debs:
            raise KernelFetchError(f"apt-get download {pkg} left no .deb in {dest}")
        return debs[-1]


# --- kernels ---------------------------------------------------------------------

@dataclass(frozen=True)
class Kernel:
    release: str        # e.g. 7.3.4+deb13-amd64 (= uname -r in the guest)
    root: Path          # unpacked packages

    @property
    def series(self) -> str:
        return ".".join(self.release.split(".")[:2])

    @property
    def vmlinuz(self) -> Path:
        for p in (self.root / "boot" / f"vmlinuz-{self.release}",
                  self.root / "usr/lib/modules" / self.release / "vmlinuz"):
            if p.is_file():
                return p
        raise KernelFetchError(f"no vmlinuz for {self.release} in {self.root}")

    @property
    def complete(self) -> bool:
        return (self.root / ".complete").exists()


def _version_key(release: str) -> tuple:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)\+deb(\d+)", release)
    return tuple(int(x) for x in m.groups()) if m else (0,)


def available(apt: PrivateApt) -> dict[str, dict[str, set[str]]]:
    """{release: {"image"|"binary"|"modules": {package names}}} from the private index."""
    out: dict[str, dict[str, set[str]]] = {}
    for prefix in ("linux-image-", "linux-binary-", "linux-modules-"):
        for name in apt.package_names(prefix):
            m = _ABI.match(name)
            if m:
                out.setdefault(m.group(2), {}).setdefault(m.group(1), set()).add(name)
    return out


def _packages_for(release: str, kinds: dict[str, set[str]]) -> list[str] | None:
    """The packages that together hold a bootable kernel and its modules, or None."""
    if "binary" in kinds or "modules" in kinds:
        if "binary" in kinds and "modules" in kinds:
            return [f"linux-binary-{release}", f"linux-modules-{release}"]
        return None         # 6.19/7.0/7.1 have no modules package: no 9p, cannot boot vng
    return [f"linux-image-{release}"] if "image" in kinds else None


def cached(series: str) -> Kernel | None:
    """The newest complete unpacked kernel of `series` in the cache (no network)."""
    found = [Kernel(p.name, p) for p in kernels_dir().glob(f"{series}.*+deb*-amd64")]
    found = [k for k in found if k.series == series and k.complete]
    return max(found, key=lambda k: _version_key(k.release)) if found else None


def _unpack(release: str, debs: list[Path]) -> Kernel:
    dest = kernels_dir() / release
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for deb in debs:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True)
    # virtme-ng looks for <root>/lib/modules or <root>/usr/lib/modules next to the image
    # and needs modules.dep there (Debian packages do not ship it).
    for base in (tmp, tmp / "usr"):
        if (base / "lib/modules" / release).is_dir() and not (base / "lib").is_symlink():
            # Its warnings about the modules.order/.builtin that 7.x packages lack are noise.
            subprocess.run(["depmod", "-a", "-b", str(base), release], check=True,
                           stderr=subprocess.DEVNULL)
    (tmp / ".complete").write_text(" ".join(d.name for d in debs) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return Kernel(release, dest)


def fetch(series: str, refresh: bool = False, log=print) -> Kernel:
    """Return the kernel of `series` (e.g. "7.3"), downloading the newest one if none is cached."""
    if not refresh and (k := cached(series)):
        return k
    apt = private_apt()
    apt.update()
    cands = []
    for release, kinds in available(apt).items():
        pkgs = _packages_for(release, kinds)
        if pkgs and release.startswith(series + "."):
            cands.append((_version_key(release), release, pkgs))
    if not cands:
        raise KernelFetchError(f"no complete -amd64 kernel of series {series} in {', '.join(SUITES)}")
    _, release, pkgs = max(cands)
    k = Kernel(release, kernels_dir() / release)
    if k.complete:
        return k
    log(f"fetching {release}: {' '.join(pkgs)}")
    # Our own download dir: the apt state is shared with scripts/extract-btf.py.
    debs = [apt.download(p, apt.root / "vm-debs") for p in pkgs]
    k = _unpack(release, debs)
    for deb in debs:        # the unpacked tree is what is used; keep the cache at one copy
        deb.unlink()
    return k


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("fetch", "list"):
        print("usage: python tests/vm/vmkernels.py fetch [--refresh] SERIES... | list",
              file=sys.stderr)
        return 2
    try:
        if argv[0] == "list":
            apt = private_apt()
            apt.update()
            for release, kinds in sorted(available(apt).items(), key=lambda x: _version_key(x[0])):
                pkgs = _packages_for(release, kinds)
                print(release, " ".join(pkgs) if pkgs else "(incomplete: no modules package)")
            return 0
        refresh = "--refresh" in argv
        for series in [a for a in argv[1:] if not a.startswith("--")]:
            print(fetch(series, refresh=refresh, log=lambda m: print(m, file=sys.stderr)).vmlinuz)
        return 0
    except (KernelFetchError, subprocess.CalledProcessError) as e:
        print(f"vmkernels: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
