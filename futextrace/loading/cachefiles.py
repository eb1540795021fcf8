"""The program cache's files ($FUTEXTRACE_CACHE/prog): where they are, and
reading and writing them as the cache trusts them. Imported before the
command line's own imports (earlymaps), so it imports nothing heavy.

A file is trusted only if this user wrote it: a regular file (not a link),
owned by the effective user and writable by nobody else, of a sane size. The
cache holds what a start loads into the kernel, and BCC's Python code
compiled (bcclite), so a file anyone else could have written is never read.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path


def prog_cache_dir() -> Path:
    return Path(os.environ.get("FUTEXTRACE_CACHE", "/var/cache/futextrace")) / "prog"


def read_trusted(path: Path, max_bytes: int) -> bytes | None:
    """The file's bytes if this user wrote it and it is at most `max_bytes`; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                or st.st_mode & 0o022 or st.st_size > max_bytes):
            return None
        return f.read()


def write_atomic(path: Path, data: bytes) -> None:
    """Best effort, whole or not at all: an unwritable cache costs the next
    start time, nothing more."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        tmp.replace(path)
    except OSError:
        pass
