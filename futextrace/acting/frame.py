"""The rt_sigreturn frame that takes an injected thread back to where it was.

The injected thread runs `syscall; ret` (prctl) and returns into `mov $15,%rax;
syscall` (rt_sigreturn) with its stack pointer on this frame. The kernel then
restores every register, the FPU state and the signal mask from the frame, exactly
as at the end of a signal handler. So the thread needs no tracer to get back: if
futextrace is killed at any point after the registers are set, the thread still
finishes the call and resumes its own code.

Layouts: arch/x86/include/uapi/asm/sigcontext.h (struct sigcontext_64, _fpx_sw_bytes),
arch/x86/include/asm/sigframe.h (rt_sigframe: pretcode, ucontext, siginfo)."""
from __future__ import annotations

import struct

from futextrace.acting.ptrace import user_regs_struct

RED_ZONE = 128                  # the x86-64 ABI's scratch area below %rsp: never touched
UC_FP_XSTATE = 0x1
UC_SIGCONTEXT_SS = 0x2
UC_STRICT_RESTORE_SS = 0x4
FP_XSTATE_MAGIC1 = 0x46505853
FP_XSTATE_MAGIC2 = 0x46505845
SW_BYTES_OFFSET = 464           # _fpx_sw_bytes inside the 512-byte legacy FXSAVE area
# rt_sigreturn also applies uc_stack to sigaltstack() and ignores its error: an invalid
# mode leaves the thread's alternate signal stack as it is (its value is not visible
# from outside, so it cannot be restated).
SS_KEEP_ALTSTACK = 4
UCONTEXT_SIZE = 304             # flags, link, stack_t (24), sigcontext (256), sigmask (8)
SIGINFO_SIZE = 128

# Kernel-internal restart codes a syscall interrupted by our stop returns (include/linux/errno.h).
ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK = 512, 513, 514, 516
NR_RESTART_SYSCALL = 219
_U64 = (1 << 64) - 1


def resume_point(regs: user_regs_struct) -> user_regs_struct:
    """The registers the thread must resume with, as the kernel would have set them on
    its return to user space with no signal to deliver: an interrupted syscall is
    restarted (rip back over `syscall`, rax = its number or restart_syscall)."""
    out = regs.copy()
    in_syscall = regs.orig_rax != _U64
    err = (-regs.rax) & _U64
    if in_syscall and err in (ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND):
        out.rax, out.rip = regs.orig_rax, regs.rip - 2
    elif in_syscall and err == ERESTART_RESTARTBLOCK:
        out.rax, out.rip = NR_RESTART_SYSCALL, regs.rip - 2
    return out


def _sigcontext(r: user_regs_struct, fpstate_addr: int) -> bytes:
    gprs = (r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rdi, r.rsi, r.rbp,
            r.rbx, r.rdx, r.rax, r.rcx, r.rsp, r.rip, r.eflags)
    segs = struct.pack("<4H", r.cs, r.gs, r.fs, r.ss)
    tail = struct.pack("<5Q", 0, 0, 0, 0, fpstate_addr) + bytes(64)   # err..cr2, fpstate, reserved
    return struct.pack("<18Q", *gprs) + segs + tail


def _fpstate(xstate: bytes) -> bytes:
    """The XSAVE image as a signal frame holds it. ptrace's copy keeps XCR0 in the first
    word of the software-reserved bytes; a frame keeps the _fpx_sw_bytes rt_sigreturn
    checks there, and a second magic word after the image. With no XSAVE (a 512-byte
    image) the kernel takes the plain FXSAVE layout."""
    if len(xstate) <= 512:
        return xstate[:512]
    xcr0 = struct.unpack_from("<Q", xstate, SW_BYTES_OFFSET)[0]
    size = len(xstate)
    sw = struct.pack("<IIQI", FP_XSTATE_MAGIC1, size + 4, xcr0, size).ljust(48, b"\0")
    return (xstate[:SW_BYTES_OFFSET] + sw + xstate[SW_BYTES_OFFSET + 48:]
            + struct.pack("<I", FP_XSTATE_MAGIC2))


def build(resume: user_regs_struct, xstate: bytes, sigmask: int,
          return_words: list[int]) -> tuple[int, bytes]:
    """(address, bytes) of the frame, placed below the thread's red zone. The injected
    %rsp is that address: `ret` pops `return_words` on the way to rt_sigreturn, which
    finds the ucontext right after them (the last word stands where a signal frame's
    return address would)."""
    fp = _fpstate(xstate)
    uc_offset = 8 * len(return_words)
    fp_offset = (uc_offset + UCONTEXT_SIZE + SIGINFO_SIZE + 63) & ~63
    size = fp_offset + len(fp)
    base = (resume.rsp - RED_ZONE - size) & ~63
    uc_flags = UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS | (UC_FP_XSTATE if len(fp) > 512 else 0)
    stack_t = struct.pack("<QiiQ", 0, SS_KEEP_ALTSTACK, 0, 0)
    uc = (struct.pack("<QQ", uc_flags, 0) + stack_t + _sigcontext(resume, base + fp_offset)
          + struct.pack("<Q", sigmask))
    assert len(uc) == UCONTEXT_SIZE
    head = struct.pack(f"<{len(return_words)}Q", *return_words) + uc
    return base, head + bytes(fp_offset - len(head)) + fp
