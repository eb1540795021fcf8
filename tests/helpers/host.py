"""What the tests against this machine's kernel share: skip guards and command helpers.

The same files run on the build machines (no kprobes, fentry refused) and inside
VM guests (tests/vm), where FUTEXTRACE_EXPECT_METHODS turns a missing attach
method from a skip into a failure. Test files import the helpers:

    from tests.helpers.host import cli, one_line_error, prog_ids, needs_bpf
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VMLINUX = "/sys/kernel/btf/vmlinux"
KPROBE_PMU = Path("/sys/bus/event_source/devices/kprobe")
FT = [sys.executable, "-m", "futextrace.cli"]


# --- skip guards ------------------------------------------------------------------
def bpf_missing() -> str | None:
    """Why BPF programs cannot be loaded and inspected here, or None."""
    if os.geteuid() != 0:
        return "needs root to load BPF programs"
    if not shutil.which("bpftool"):
        return "needs bpftool"
    if not Path(VMLINUX).exists():
        return "needs BTF (/sys/kernel/btf/vmlinux)"
    return None


def has_private_hash() -> bool:
    """PR_FUTEX_HASH GET_SLOTS works: a 6.17+ kernel with the private futex hash."""
    return ctypes.CDLL(None, use_errno=True).prctl(78, 2, 0, 0, 0) >= 0


needs_bpf = pytest.mark.skipif(bpf_missing() is not None, reason=bpf_missing() or "")
needs_private_hash = pytest.mark.skipif(not has_private_hash(), reason="kernel has no PR_FUTEX_HASH")


def expected(method: str) -> bool:
    """The VM harness names the methods a guest must offer (FUTEXTRACE_EXPECT_METHODS)."""
    return method in os.environ.get("FUTEXTRACE_EXPECT_METHODS", "").split(",")


def kernel_symbols() -> set[str]:
    return {ln.split()[2] for ln in open("/proc/kallsyms") if len(ln.split()) == 3}   # the core kernel, not modules


def kprobes_missing() -> str | None:
    if not KPROBE_PMU.exists():
        return "this kernel has no kprobes (CONFIG_KPROBES unset; the build machines' case)"
    if "futex_hash" not in kernel_symbols():
        return "futex_hash is not in /proc/kallsyms (inlined or renamed)"
    return None


def require_kprobes() -> None:
    """Skip where kprobes cannot work, fail where the harness said they must."""
    why = kprobes_missing()
    if why and expected("kprobe"):
        pytest.fail(f"FUTEXTRACE_EXPECT_METHODS names kprobe, but {why}")
    if why:
        pytest.skip(why)


def require_fentry() -> None:
    """Skip where the fentry method cannot run; fail where the harness expects it
    (6.17-7.1: futex_hash returns a pointer)."""
    from futextrace.kernel.modelcache import load_running
    from futextrace.loading import fentry
    why = fentry.refusal(load_running()[0])
    if why and expected("fentry") and "by value" not in why:
        pytest.fail(f"FUTEXTRACE_EXPECT_METHODS names fentry, but {why}")
    if why:
        pytest.skip(why)


def require_method(method: str) -> None:
    """Skip (or fail, where the harness expects it) unless `method` can run here."""
    if method == "kprobe":
        require_kprobes()
    elif method == "fentry":
        require_fentry()


def compile_c(src: Path, out: Path, *flags: str) -> Path:
    """`cc FLAGS -o OUT SRC`, failing the test (not skipping) without a compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.fail("no C compiler: run scripts/bootstrap.sh")
    subprocess.run([cc, *flags, "-o", str(out), str(src)], check=True)
    return out


def in_vm_guest() -> bool:
    return bool(os.environ.get("FUTEXTRACE_IN_VM"))


def limit(seconds: float) -> float:
    """A subprocess's time limit. In a VM guest (single-threaded TCG, its host CPU
    shared with other work) everything may run 10x slower or worse: a doctor run
    took 325 s there under load, past a 300 s limit, and all doctor tests erred.
    The guest run's own limit, with progress.log naming the test, catches hangs."""
    return seconds * 10 if in_vm_guest() else seconds


def world_readable_copy() -> Path:
    """A copy of the package and its pure-Python dependencies that `nobody`
    can read: CI's checkout (and its venv) may sit in a directory only root
    may enter (a clone in `mktemp -d` is 0700)."""
    import importlib.util
    import tempfile
    top = Path(tempfile.mkdtemp(prefix="futextrace-nobody-", dir="/tmp"))
    shutil.copytree(REPO / "futextrace", top / "futextrace")
    shutil.copytree(REPO / "bpf", top / "bpf")
    for dep in ("click",):
        shutil.copytree(Path(importlib.util.find_spec(dep).origin).parent, top / dep)
    for d, _, files in os.walk(top):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)
    return top


def cli(*args, user: int | None = None, env: dict | None = None, timeout: float = 300):
    """Run `futextrace ARGS` from the checkout. `user` drops root first
    (setpriv) and runs the system python on a world_readable_copy(): that
    user may not be able to enter the checkout or its venv."""
    if user is None:
        return subprocess.run([*FT, *map(str, args)], capture_output=True, text=True, timeout=limit(timeout),
                              cwd=REPO, env=None if env is None else {**os.environ, **env})
    top = world_readable_copy()
    try:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--inh-caps=-all",
               "/usr/bin/python3", "-m", "futextrace.cli", *map(str, args)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=limit(timeout), cwd=top,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(top), **(env or {})})
    finally:
        shutil.rmtree(top, ignore_errors=True)


def one_line_error(res, code: int | None = None) -> str:
    """The single 'futextrace: error: ...' line of a failed command (no traceback)."""
    assert res.returncode != 0 if code is None else res.returncode == code, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("futextrace: error: "), res.stderr
    return lines[0]


def prog_ids() -> set[int]:
    """IDs of the BPF programs loaded now (`bpftool prog list`)."""
    out = subprocess.run(["bpftool", "-j", "prog", "list"], capture_output=True, text=True,
                         check=True).stdout
    return {p["id"] for p in json.loads(out or "[]")}


def wait_until(cond, timeout: float, step: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(step)
    return cond()


def descendants(pid: int) -> list[int]:
    """All descendants of `pid`, from /proc/*/task/*/children."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                kids = [int(k) for k in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def programs_left(ours: set[int], timeout: float = 10) -> set[int]:
    """Those of `ours` still loaded after `timeout` s (the kernel frees a program
    shortly after its last fd closes)."""
    wait_until(lambda: not (ours & prog_ids()), timeout=timeout, step=0.5)
    return ours & prog_ids()


def new_programs_left(before: set[int], timeout: float = 5) -> set[int]:
    """Programs loaded since `before` that are still there after `timeout` s (one
    another process is loading right now goes away on its own)."""
    return programs_left(prog_ids() - before, timeout)
