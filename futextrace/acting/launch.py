"""A new program with its futex hash size set before its first instruction.

The child is seized before it calls exec(); the kernel stops the new image at the
exec event, before the dynamic loader (or a static binary's entry) has run, and the
size is set there by the same call inject.py makes on a running process. Nothing is
preloaded and the environment is untouched, so statically linked binaries are covered
alike (tested with glibc's and musl's; a Go binary checked by hand). The size
belongs to that one address space: fork() and exec() start each new one with the
kernel's default (futex_mm_init), so a child the program starts keeps the automatic
hash unless `run --children` follows it (follow.py)."""
from __future__ import annotations

import os
import shutil
import stat

from futextrace.acting import inject, ptrace
from futextrace.acting import preflight
from futextrace.acting.preflight import has_cap_sys_ptrace
from futextrace.errors import TargetError

_PRIVILEGED_BITS = stat.S_ISUID | stat.S_ISGID


def check_not_setuid(cmd: str) -> None:
    """A set-user-ID (or file-capability) program traced by an unprivileged tracer runs
    without its privileges: it would start, but not as itself. Refused before fork."""
    path = cmd if "/" in cmd else shutil.which(cmd)
    if not path or has_cap_sys_ptrace():
        return
    privileged = os.stat(path).st_mode & _PRIVILEGED_BITS
    try:
        privileged = privileged or os.getxattr(path, "security.capability")
    except OSError:
        pass
    if privileged:
        raise TargetError(f"{cmd} is set-user-ID, set-group-ID or has file capabilities: started "
                          "under futextrace without CAP_SYS_PTRACE it would run without them; "
                          "run futextrace as root")


def check_command(cmd: str) -> None:
    """What must hold before a command is started with a size set: refused before fork."""
    preflight.require_x86_64()
    preflight.require_pr_futex_hash()
    check_not_setuid(cmd)


def seize_child(pid: int, options: int = ptrace.PTRACE_O_TRACEEXEC | ptrace.PTRACE_O_TRACESYSGOOD) -> None:
    """Before the child is let go: its exec() then stops at PTRACE_EVENT_EXEC."""
    ptrace.seize(pid, options)


def to_exec_return(pid: int) -> None:
    """From an exec event to execve's own syscall-exit stop: registers set before it
    would lose %rax to execve's return value. Signals on the way are passed on."""
    ptrace.resume(pid, ptrace.PTRACE_SYSCALL)
    while True:
        kind, value = ptrace.wait_stop(pid)
        if kind == "syscall" and ptrace.syscall_stop(pid)[0] == ptrace.SYSCALL_INFO_EXIT:
            return
        if kind in ("exited", "killed"):
            raise inject.InjectionFailed(f"the new image ended at its exec ({kind} {value})")
        ptrace.resume(pid, ptrace.PTRACE_SYSCALL, value if kind == "signal" else 0)


def set_at_exec(pid: int, slots: int) -> inject.Answer:
    """Waits for the seized child's exec stop and sets `slots` there (0: the global
    hash), then lets it run. Signals that come first are passed on."""
    while True:
        kind, value = ptrace.wait_stop(pid)
        if kind == "event" and value >> 8 == ptrace.PTRACE_EVENT_EXEC:
            to_exec_return(pid)
            return inject.run_calls(pid, pid, slots, kill_if_refused=True)
        if kind in ("exited", "killed"):
            raise TargetError(f"the command ended before its exec ({kind} {value})")
        ptrace.resume(pid, ptrace.PTRACE_CONT, value if kind == "signal" else 0)


def start(child, slots: int | None) -> inject.Answer | None:
    """Let a procs.targets.StoppedChild exec; with `slots`, its size set before its first
    instruction (the kernel's answers returned; a refused size: never started)."""
    if slots is None:
        child.go()
        return None
    seize_child(child.pid)
    child.go()
    try:
        return set_at_exec(child.pid, slots)
    except inject.InjectionFailed as e:
        raise TargetError(f"{os.path.basename(child.argv[0])}: {e}") from None
