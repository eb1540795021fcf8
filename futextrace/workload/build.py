"""Compile the C workloads on first use into a cache keyed by source hash.

Why not ship binaries: the workload must match the machine's libc and kernel
headers, and a C compiler is already a requirement for BCC.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from futextrace.errors import EnvironmentProblem

DEFAULT_CACHE = "/var/cache/futextrace"
CFLAGS = ["-O2", "-pthread"]
LIBS = ["-lm"]


def cache_dir() -> Path:
    return Path(os.environ.get("FUTEXTRACE_CACHE", DEFAULT_CACHE)) / "bin"


def _source(name: str) -> bytes:
    return resources.files(__package__).joinpath(f"{name}.c").read_bytes()


def workload_path(name: str = "futexbench") -> Path:
    """Path of the compiled workload `name`, building it if the source changed."""
    src = _source(name)
    # Hash the flags too, so a flag change also forces a rebuild.
    digest = hashlib.sha256(src + " ".join(CFLAGS + LIBS).encode()).hexdigest()[:16]
    out = cache_dir() / f"{name}-{digest}"
    if out.is_file() and os.access(out, os.X_OK):
        return out
    _compile(name, src, out)
    return out


def _compile(name: str, src: bytes, out: Path) -> None:
    cc = os.environ.get("CC", "cc")
    if not shutil.which(cc):
        raise EnvironmentProblem(f"no C compiler '{cc}' to build the {name} workload; "
                                 "install gcc (apt-get install gcc) or set CC")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EnvironmentProblem(f"cannot create {out.parent} ({e.strerror}); "
                                 "set FUTEXTRACE_CACHE to a writable directory") from None
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        c_file = Path(tmp) / f"{name}.c"
        c_file.write_bytes(src)
        tmp_bin = Path(tmp) / name
        res = subprocess.run([cc, *CFLAGS, "-o", str(tmp_bin), str(c_file), *LIBS],
                             capture_output=True, text=True)
        if res.returncode != 0:
            lines = res.stderr.strip().splitlines() or ["no output"]
            first = next((ln for ln in lines if "error" in ln), lines[-1])
            raise EnvironmentProblem(f"compiling the {name} workload failed ({first.strip()}); "
                                     "check that gcc and libc6-dev are installed")
        # Atomic rename: concurrent first uses never run a half-written binary.
        os.replace(tmp_bin, out)
