"""ptrace(2) for x86-64 through ctypes: the few requests a remote syscall needs.

Only PTRACE_SEIZE is used to attach (never PTRACE_ATTACH, which sends SIGSTOP to the
whole process): one thread stops, by PTRACE_INTERRUPT, and the others run on."""
from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.ptrace.restype = ctypes.c_long

PTRACE_DETACH = 17
PTRACE_SYSCALL = 24
PTRACE_CONT = 7
PTRACE_GETREGS = 12
PTRACE_SETREGS = 13
PTRACE_SETOPTIONS = 0x4200
PTRACE_GETREGSET = 0x4204
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_LISTEN = 0x4208
PTRACE_GET_SYSCALL_INFO = 0x420e
SYSCALL_INFO_ENTRY, SYSCALL_INFO_EXIT = 1, 2

PTRACE_O_TRACESYSGOOD = 0x1
PTRACE_O_TRACEFORK = 0x2
PTRACE_O_TRACEVFORK = 0x4
PTRACE_O_TRACECLONE = 0x8
PTRACE_O_TRACEEXEC = 0x10
PTRACE_GETEVENTMSG = 0x4201
PTRACE_EVENT_FORK, PTRACE_EVENT_VFORK, PTRACE_EVENT_CLONE = 1, 2, 3
PTRACE_EVENT_EXEC = 4
PTRACE_EVENT_STOP = 128
NT_X86_XSTATE = 0x202
SYSCALL_STOP = 0x80 | 5        # SIGTRAP | 0x80 under PTRACE_O_TRACESYSGOOD

__WALL = 0x40000000


class user_regs_struct(ctypes.Structure):
    """<sys/user.h>, x86-64: what PTRACE_GETREGS and SETREGS move."""
    _fields_ = [(n, ctypes.c_ulonglong) for n in (
        "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx",
        "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base",
        "gs_base", "ds", "es", "fs", "gs")]

    def copy(self) -> "user_regs_struct":
        return user_regs_struct.from_buffer_copy(self)


class _iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _call(request: int, tid: int, addr=0, data=0) -> int:
    r = _libc.ptrace(request, tid, addr, data)
    if r == -1:
        e = ctypes.get_errno()
        if e:
            raise OSError(e, os.strerror(e))
    return r


def seize(tid: int, options: int = PTRACE_O_TRACESYSGOOD) -> None:
    _call(PTRACE_SEIZE, tid, 0, options)


def interrupt(tid: int) -> None:
    _call(PTRACE_INTERRUPT, tid)


def resume(tid: int, request: int = PTRACE_CONT, signo: int = 0) -> None:
    _call(request, tid, 0, signo)


def detach(tid: int, signo: int = 0) -> None:
    _call(PTRACE_DETACH, tid, 0, signo)


def get_regs(tid: int) -> user_regs_struct:
    regs = user_regs_struct()
    _call(PTRACE_GETREGS, tid, 0, ctypes.addressof(regs))
    return regs


def set_regs(tid: int, regs: user_regs_struct) -> None:
    _call(PTRACE_SETREGS, tid, 0, ctypes.addressof(regs))


def get_xstate(tid: int) -> bytes:
    """The thread's FPU/SSE/AVX state in XSAVE layout, the form a signal frame holds
    (the kernel fills the software-reserved bytes that rt_sigreturn checks)."""
    buf = ctypes.create_string_buffer(64 * 1024)
    iov = _iovec(ctypes.addressof(buf), len(buf))
    _call(PTRACE_GETREGSET, tid, NT_X86_XSTATE, ctypes.addressof(iov))
    return buf.raw[:iov.iov_len]


def syscall_stop(tid: int) -> tuple[int, int]:
    """At a syscall stop: (SYSCALL_INFO_ENTRY, number) or (SYSCALL_INFO_EXIT, return
    value). An exec's own exit stop comes after its event stop, so entry and exit
    cannot be told apart by counting."""
    buf = (ctypes.c_uint8 * 88)()
    _call(PTRACE_GET_SYSCALL_INFO, tid, ctypes.sizeof(buf), ctypes.addressof(buf))
    op = buf[0]
    value = ctypes.c_int64.from_buffer(buf, 24).value      # entry.nr or exit.rval
    return op, value


def event_message(tid: int) -> int:
    """PTRACE_GETEVENTMSG: at a fork, vfork or clone stop, the new task's id."""
    msg = ctypes.c_ulong()
    _call(PTRACE_GETEVENTMSG, tid, 0, ctypes.addressof(msg))
    return msg.value


def wait_stop(tid: int) -> tuple[str, int]:
    """Waits for the thread's next state change (see decode)."""
    return decode(os.waitpid(tid, __WALL)[1])


def wait_any() -> tuple[int, str, int]:
    """wait_stop for whichever tracee (or child) changes state first: (tid, kind, value)."""
    tid, status = os.waitpid(-1, __WALL)
    return (tid, *decode(status))


def decode(status: int) -> tuple[str, int]:
    """A wait status as ("exited", code), ("killed", signo), ("event", event<<8 | stopsig),
    ("syscall", 0) or ("signal", signo)."""
    if os.WIFEXITED(status):
        return "exited", os.WEXITSTATUS(status)
    if os.WIFSIGNALED(status):
        return "killed", os.WTERMSIG(status)
    sig = os.WSTOPSIG(status)
    event = status >> 16
    if event:
        return "event", event << 8 | sig
    if sig == SYSCALL_STOP:
        return "syscall", 0
    return "signal", sig
