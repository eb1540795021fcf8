#!/usr/bin/env python3
"""Fetch Debian kernel packages and pull their vmlinux BTF out of vmlinuz.

    scripts/extract-btf.py 6.18.15 7.2.6 ...      # writes $FUTEXTRACE_CACHE/btf/<release>.btf
    scripts/extract-btf.py --digest 6.18.15 ...   # also tests/data/btf/debian-<ver>.json

A kernel already unpacked by the VM harness (kernels/<release>/) is reused;
otherwise packages come through a private apt state under $FUTEXTRACE_CACHE/btf/apt
(the system's apt setup is untouched) and are unpacked under btf/pkg/. vmlinuz is a bzImage whose payload is a
compressed vmlinux (zstd on Debian; xz/gzip handled too), like the kernel's
scripts/extract-vmlinux: find the magic, decompress, read the ELF .BTF section.
Debian's System.map is a placeholder, so digests of these kernels carry no symbols.
"""
from __future__ import annotations

import glob
import gzip
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "vm"))   # vmkernels: the VM harness's private apt
from vmkernels import debian_mirror  # noqa: E402  (the system apt mirror, read at run time)
from btf_digest import digest  # noqa: E402  (scripts/btf_digest.py, beside this file)
from futextrace.kernel.btf import Btf, elf_section  # noqa: E402

ROOT_CACHE = Path(os.environ.get("FUTEXTRACE_CACHE", "/var/cache/futextrace"))
CACHE = ROOT_CACHE / "btf"          # ours; kernels/ belongs to the VM harness
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def apt_opts() -> list[str]:
    d = CACHE / "apt"
    for sub in ("lists/partial", "cache/archives/partial"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    src = d / "sources.list"
    if not src.exists():
        src.write_text("".join(f"deb [signed-by={KEYRING}] {debian_mirror()} {s} main\n"
                               for s in ("trixie-backports", "sid")))
    return [f"-o=Dir::Etc::SourceList={src}", "-o=Dir::Etc::SourceParts=/dev/null",
            f"-o=Dir::State::Lists={d}/lists", f"-o=Dir::Cache={d}/cache",
            "-o=Dir::State::status=/dev/null"]


def fetch(version: str) -> Path:
    """Unpack the package holding vmlinuz for `version` (e.g. 6.18.15); return the vmlinuz path."""
    release = f"{version}+deb13-amd64"
    harness = ROOT_CACHE / "kernels" / release
    kdir = CACHE / "pkg" / release
    for pattern in (f"{harness}/**/vmlinuz*", f"{kdir}/**/vmlinuz*"):
        found = glob.glob(pattern, recursive=True)
        if found:
            return Path(found[0])
    debs = CACHE / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    opts = apt_opts()
    if not any((CACHE / "apt/lists").glob("*Packages*")):
        subprocess.run(["apt-get", *opts, "update", "-q"], check=True, stdout=subprocess.DEVNULL)
    # 6.16-6.18: linux-image holds vmlinuz; 6.19+: linux-binary does.
    for pkg in (f"linux-binary-{version}+deb13-amd64", f"linux-image-{version}+deb13-amd64"):
        r = subprocess.run(["apt-get", *opts, "download", pkg], cwd=debs,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if r.returncode == 0:
            deb = sorted(debs.glob(f"{pkg}_*.deb"))[-1]
            subprocess.run(["dpkg-deb", "-x", str(deb), str(kdir)], check=True)
            found = glob.glob(f"{kdir}/**/vmlinuz*", recursive=True)
            if found:
                return Path(found[0])
    raise SystemExit(f"no Debian package with a vmlinuz for {version}")


def extract_vmlinux(vmlinuz: bytes) -> bytes:
    """Try each compressed payload candidate until one decompresses to an ELF."""
    magics = [(b"\x28\xb5\x2f\xfd", "zstd"), (b"\xfd7zXZ\x00", "xz"), (b"\x1f\x8b\x08", "gzip")]
    for magic, kind in magics:
        pos = vmlinuz.find(magic)
        while pos >= 0:
            blob = vmlinuz[pos:]
            try:
                if kind == "zstd":
                    # The zstd CLI stops at trailing garbage with an error but keeps the output.
                    out = subprocess.run(["zstd", "-dc"], input=blob, capture_output=True).stdout
                elif kind == "xz":
                    out = lzma.LZMADecompressor().decompress(blob)
                else:
                    out = gzip.decompress(blob)
            except (OSError, lzma.LZMAError, EOFError):
                out = b""
            if out[:4] == b"\x7fELF":
                return out
            pos = vmlinuz.find(magic, pos + 1)
    raise SystemExit("no compressed vmlinux found in vmlinuz")


def btf_for(version: str) -> Path:
    btf_path = CACHE / f"{version}+deb13-amd64.btf"
    if not btf_path.exists():
        vmlinuz = fetch(version)
        btf = elf_section(extract_vmlinux(vmlinuz.read_bytes()), ".BTF")
        tmp = btf_path.with_suffix(".tmp")
        tmp.write_bytes(btf)
        tmp.replace(btf_path)
    return btf_path


def main(argv: list[str]) -> int:
    want_digest = "--digest" in argv
    versions = [a for a in argv if not a.startswith("-")]
    if not versions:
        print(__doc__)
        return 2
    for v in versions:
        p = btf_for(v)
        btf = Btf.from_file(p)
        print(f"{v}: {p} ({len(btf)} types)")
        if want_digest:
            d = digest(btf, None, {"release": f"{v}+deb13-amd64", "source": "debian vmlinuz"})
            dest = ROOT / "tests/data/btf" / f"debian-{v}.json"
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(json.dumps(d, separators=(",", ":")) + "\n")
            print(f"  digest: {dest} ({dest.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
