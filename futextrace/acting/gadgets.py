"""The instruction sequences an injection borrows from the target's own code.

`syscall; ret` makes the call and returns into `mov $15, %rax/%eax; syscall`
(glibc's __restore_rt, in libc.so, ld.so and static binaries; Go's sigreturn),
which ends it with rt_sigreturn. A program with no signal code (a small musl
static binary) has no such sequence: there `pop %rax; ret` loads 15 from the
stack and returns into `syscall; ret` again.
They are read from the target's executable mappings through /proc/PID/mem; nothing
is written into its code."""
from __future__ import annotations

import os
from dataclasses import dataclass

SYSCALL_RET = b"\x0f\x05\xc3"
POP_RAX_RET = b"\x58\xc3"
SIGRETURN = (b"\x48\xc7\xc0\x0f\x00\x00\x00\x0f\x05",     # mov $15,%rax; syscall
             b"\xb8\x0f\x00\x00\x00\x0f\x05")             # mov $15,%eax; syscall
MAX_SCAN = 64 << 20      # bytes read per mapping at most: a huge binary costs bounded time


@dataclass(frozen=True)
class Gadgets:
    syscall_ret: int
    where: str                   # the file (or mapping name) they were found in
    sigreturn: int | None = None
    pop_rax: int | None = None   # where there is no sigreturn sequence

    def return_words(self) -> list[int]:
        """What the thread's stack holds for `ret` after the call, before the rt_sigreturn
        frame: the words it pops on its way to rt_sigreturn."""
        if self.sigreturn is not None:
            return [self.sigreturn]
        return [self.pop_rax, 15, self.syscall_ret]


def _executable_mappings(pid: int) -> list[tuple[int, int, str]]:
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            name = fields[5].strip() if len(fields) > 5 else ""
            if "x" not in fields[1] or name == "[vsyscall]":
                continue
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            out.append((lo, hi, name))
    # Libraries first (libc, ld.so): the usual home of both sequences.
    return sorted(out, key=lambda m: ("libc" not in m[2] and "ld-" not in m[2], m[0]))


def _find(data: bytes, patterns) -> int:
    for p in patterns:
        i = data.find(p)
        if i >= 0:
            return i
    return -1


def find(pid: int) -> Gadgets | None:
    """`syscall; ret` and a way to rt_sigreturn from one mapping of `pid` (the sigreturn
    sequence preferred), or None where no mapping has them."""
    fallback = None
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    try:
        for lo, hi, name in _executable_mappings(pid):
            try:
                data = os.pread(fd, min(hi - lo, MAX_SCAN), lo)
            except OSError:
                continue
            a, b, c = _find(data, (SYSCALL_RET,)), _find(data, SIGRETURN), _find(data, (POP_RAX_RET,))
            if a >= 0 and b >= 0:
                return Gadgets(lo + a, name or "anonymous code", sigreturn=lo + b)
            if a >= 0 and c >= 0 and fallback is None:
                fallback = Gadgets(lo + a, name or "anonymous code", pop_rax=lo + c)
    finally:
        os.close(fd)
    return fallback
