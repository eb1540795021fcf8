"""The running kernel's model, kept for the rest of the boot.

Building it (model.load) reads BTF, kallsyms and the boot log and runs a clone
probe: 1.3-2.7 s measured on the 2-CPU build machines, most of `record`'s start.
None of it changes until the next boot or another kernel BTF, so one copy is
kept under $FUTEXTRACE_CACHE/model, keyed by the boot id, a hash of
/sys/kernel/btf/vmlinux and of the code that builds the model, and by what
this process may see: kallsyms addresses and the boot log depend on its
capabilities (CAP_SYSLOG) and on kptr_restrict, perf_event_paranoid and
dmesg_restrict, so a service with fewer capabilities than root (the systemd
unit) neither reads nor leaves a model that lacks them for the other. The CPU
topology (hotplug) is read fresh every time.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from futextrace import __version__
from futextrace.kernel import btfdigest
from futextrace.kernel import model as kmodel
from futextrace.kernel import topology

BOOT_ID = btfdigest.BOOT_ID
# What decides whether kallsyms shows addresses and dmesg can be read.
VISIBILITY = ("/proc/sys/kernel/kptr_restrict", "/proc/sys/kernel/perf_event_paranoid",
              "/proc/sys/kernel/dmesg_restrict")
KEEP = 16   # models kept (one per boot and kernel: VM guests add theirs); older ones go
# Modules whose code decides what the model holds: a change to them is a new key.
_MODEL_CODE = ("model.py", "btf.py", "kallsyms.py", "topology.py", "jhash.py")


def cache_dir() -> Path:
    return Path(os.environ.get("FUTEXTRACE_CACHE", "/var/cache/futextrace")) / "model"


def _visibility() -> bytes:
    """This process's effective capabilities and the sysctls that hide kernel addresses."""
    caps = [line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("CapEff:")]
    values = []
    for path in VISIBILITY:
        try:
            values.append(Path(path).read_text().strip())
        except OSError:
            values.append("?")
    return "\n".join(caps + values).encode()


@functools.lru_cache(maxsize=None)
def btf_digest(btf_path: str = kmodel.VMLINUX_BTF) -> str | None:
    """sha256 of the kernel's BTF, taken once per process, and for the running
    kernel's once per boot (kernel/btfdigest.py): this key's and the program
    cache's. None when it is unreadable."""
    return btfdigest.sha256_of(btf_path, cache_dir())


def cache_key(btf_path: str = kmodel.VMLINUX_BTF) -> str | None:
    """sha256 of (boot id, BTF, model code, version, what this process may see);
    None when one is unreadable."""
    h = hashlib.sha256(__version__.encode())
    here = Path(__file__).parent
    btf = btf_digest(btf_path)
    if btf is None:
        return None
    try:
        h.update(BOOT_ID.read_bytes())
        h.update(btf.encode())
        h.update(_visibility())
        for name in _MODEL_CODE:
            h.update((here / name).read_bytes())
    except OSError:
        return None
    return h.hexdigest()[:32]


def _read(path: Path) -> kmodel.KernelModel | None:
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)        # a model is ~10 KB; never read more than this
        model = kmodel.KernelModel.from_dict(json.loads(data))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None                       # missing or damaged: build it again
    model.topology = topology.read()
    return model


def _write(path: Path, model: kmodel.KernelModel) -> None:
    """Write to a temporary name and rename, so a reader never sees half a file.
    A cache that cannot be written only costs the next run its speed."""
    if btfdigest.replace_file(path, json.dumps(model.to_dict()), ".model."):
        _prune(path.parent)


def _prune(directory: Path) -> None:
    """Keep the KEEP most recently written models."""
    try:
        models = sorted(directory.glob("[!.]*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in models[KEEP:]:
            old.unlink()
    except OSError:
        pass   # another run pruned at the same time


def load_running() -> tuple[kmodel.KernelModel, bool]:
    """(model of the running kernel, whether it came from the cache)."""
    key = cache_key()
    path = cache_dir() / f"{key}.json" if key else None
    if path is not None:
        model = _read(path)
        if model is not None:
            return model, True
    model = kmodel.load()
    if path is not None:
        _write(path, model)
    return model, False
