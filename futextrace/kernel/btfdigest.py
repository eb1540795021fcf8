"""The sha256 of the running kernel's BTF, hashed once per boot.

Both caches (the model's and the programs') are keyed by it, so every start
read and hashed /sys/kernel/btf/vmlinux: ~5 MiB, 12-48 ms of CPU measured on
the 2-CPU build machines and 5 MiB more peak RSS, for a value that cannot
change until the next boot (the running kernel's BTF is part of its image).
It is kept beside the models with the boot id and the file's size it was
taken for; any other file is hashed every time.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from futextrace.kernel.model import VMLINUX_BTF

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
MEMO_NAME = "btf.sha256"      # not *.json: modelcache prunes those as models


def sha256_of(path: str, memo_dir: Path) -> str | None:
    """Hex sha256 of the file at `path`; None when it is unreadable."""
    stamp = _boot_stamp(path) if path == VMLINUX_BTF else None
    if stamp is not None:
        kept = _read_memo(memo_dir / MEMO_NAME, stamp)
        if kept:
            return kept
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None
    if stamp is not None:
        replace_file(memo_dir / MEMO_NAME, f"{stamp} {digest}\n", ".btf.")
    return digest


def _boot_stamp(path: str) -> str | None:
    """What the running kernel's BTF is known by: this boot and the file's size."""
    try:
        return f"{BOOT_ID.read_text().strip()} {os.stat(path).st_size}"
    except OSError:
        return None


def _read_memo(memo: Path, stamp: str) -> str | None:
    try:
        boot, size, digest = memo.read_text(errors="replace").split()
    except (OSError, ValueError):
        return None
    ok = f"{boot} {size}" == stamp and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)
    return digest if ok else None


def replace_file(path: Path, text: str, prefix: str) -> bool:
    """Write `text` aside and rename it to `path` (mode 0644), so a reader never
    sees half of it: the memo here, the models in modelcache. Best effort: False
    when it could not be written (costing the next start its speed, nothing more)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=prefix, dir=path.parent)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
