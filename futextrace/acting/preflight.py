"""Everything that must hold before futextrace touches another process, checked
before it attaches: each refusal is one line saying why and what to do."""
from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass

from futextrace.errors import EnvironmentProblem, TargetError
from futextrace.kernel.constants import PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS
from futextrace.procs.targets import check_pid, comm_label

CAP_SYS_PTRACE = 19
SECCOMP_MODES = {"1": "strict", "2": "filter"}
NO_PR_FUTEX_HASH = ("this kernel has no PR_FUTEX_HASH (Linux 6.17+ with CONFIG_FUTEX_PRIVATE_HASH): "
                    "a process's futex hash size cannot be set here")


@dataclass(frozen=True)
class Target:
    pid: int
    tid: int
    comm: str


def status_fields(pid: int, tid: int | None = None) -> dict[str, str]:
    path = f"/proc/{pid}/task/{tid}/status" if tid else f"/proc/{pid}/status"
    try:
        with open(path) as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        return {}


def require_pr_futex_hash() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, 0, 0, 0) < 0:
        raise EnvironmentProblem(NO_PR_FUTEX_HASH)


def require_x86_64() -> None:
    if platform.machine() != "x86_64":
        raise EnvironmentProblem(f"setting another process's hash is implemented for x86-64 only, "
                                 f"not {platform.machine()}: use `futextrace run` on a new process")


def has_cap_sys_ptrace() -> bool:
    eff = int(status_fields(os.getpid()).get("CapEff", "0"), 16)
    return bool(eff >> CAP_SYS_PTRACE & 1)


def check_may_trace(pid: int) -> None:
    """Yama, capabilities and an existing tracer, as PTRACE_SEIZE would judge them."""
    comm = comm_label(pid)
    try:
        scope = int(open("/proc/sys/kernel/yama/ptrace_scope").read())
    except (OSError, ValueError):
        scope = 0
    if scope >= 3:
        raise EnvironmentProblem("ptrace is disabled on this host (kernel.yama.ptrace_scope = 3, "
                                 "until reboot): start the program with `futextrace run` instead")
    if scope >= 1 and not has_cap_sys_ptrace():
        raise EnvironmentProblem(f"kernel.yama.ptrace_scope = {scope} lets only CAP_SYS_PTRACE "
                                 f"attach to {comm} ({pid}): run futextrace as root (sudo)")
    if not has_cap_sys_ptrace() and os.geteuid():   # root has it unless dropped
        uid = status_fields(pid).get("Uid", "").split()
        if uid and any(int(u) != os.getuid() for u in uid):
            raise EnvironmentProblem(f"{comm} ({pid}) runs as another user: run futextrace as root")
    tracer = int(status_fields(pid).get("TracerPid", "0"))
    if tracer:
        raise TargetError(f"{comm} ({pid}) is already traced by {comm_label(tracer) or '?'} "
                          f"({tracer}): a process has one tracer at a time; detach it and try again")


def check_seccomp(pid: int, force: bool) -> None:
    mode = status_fields(pid).get("Seccomp", "0")
    if mode == "1":
        raise TargetError(f"{comm_label(pid)} ({pid}) runs in seccomp strict mode: prctl() would kill it")
    if mode == "2" and not force:
        raise TargetError(f"{comm_label(pid)} ({pid}) runs under a seccomp filter, which may kill it "
                          "for a prctl() it does not expect: add --force if its filter allows prctl")


def check_shadow_stack(pid: int) -> None:
    if "shstk" in status_fields(pid).get("x86_Thread_features", ""):
        raise TargetError(f"{comm_label(pid)} ({pid}) runs with a CET shadow stack, which the return "
                          "path futextrace uses would violate: use `futextrace run` on a new process")


def pick_thread(pid: int, tid: int | None) -> int:
    """The thread to make the call: the one asked for, else the main thread, else the
    first live one (the hash belongs to the process, so any thread will do)."""
    tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    if tid is not None:
        if tid not in tids:
            raise TargetError(f"{tid} is not a thread of process {pid} (see /proc/{pid}/task)")
        candidates = [tid]
    else:
        candidates = [pid] + [t for t in tids if t != pid]
    for t in candidates:
        state = status_fields(pid, t).get("State", "X")[:1]
        if state not in ("Z", "X", "T", "t"):
            return t
    if any(status_fields(pid, t).get("State", "")[:1] in ("T", "t") for t in candidates):
        raise TargetError(f"{comm_label(pid)} ({pid}) is stopped (job control or a debugger): "
                          "continue it and try again")
    raise TargetError(f"{comm_label(pid)} ({pid}) is exiting (a zombie): it has no futex hash to set")


def check_target(pid: int, tid: int | None, force: bool) -> Target:
    """All the refusals, in the order a user would fix them; the chosen thread."""
    require_x86_64()
    require_pr_futex_hash()
    if pid > 0 and os.path.exists(f"/proc/{pid}") and status_fields(pid).get("State", "")[:1] == "Z":
        raise TargetError(f"{comm_label(pid)} ({pid}) is a zombie: it has exited and has no futex "
                          "hash; its parent has not reaped it yet")
    check_pid(pid)          # gone, a kernel thread, or a thread id
    check_may_trace(pid)
    check_seccomp(pid, force)
    check_shadow_stack(pid)
    return Target(pid, pick_thread(pid, tid), comm_label(pid))
