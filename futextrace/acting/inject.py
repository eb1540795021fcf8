"""prctl(PR_FUTEX_HASH) made by one thread of another process, as gdb's `call` would.

The sequence, for one thread (the others run on):
  1. PTRACE_SEIZE + PTRACE_INTERRUPT: the thread stops where it is. A signal that
     arrives first is passed on at once, untouched, before anything is changed.
  2. The registers, the FPU state and the signal mask go into an rt_sigreturn frame
     on the thread's own stack (frame.py), with an interrupted syscall set to restart.
  3. The thread is pointed at `syscall; ret` in its own code (gadgets.py), three
     times: GET_SLOTS, SET_SLOTS, GET_SLOTS, each read at its syscall-exit stop.
  4. Detach. The thread returns into rt_sigreturn and resumes exactly where it was.
From step 3 on, the thread needs no tracer: if futextrace dies, the kernel detaches
it and it completes the same path. Signals that arrive meanwhile are delivered
(passed on at their stop, or left pending for the kernel when the tracer is gone)."""
from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass

from futextrace.acting import frame, gadgets, ptrace
from futextrace.acting.preflight import status_fields
from futextrace.kernel.constants import PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, PR_FUTEX_HASH_SET_SLOTS

SYS_PRCTL = 157
_U64 = (1 << 64) - 1
# Test hook: "STAGE:SECONDS" sleeps at that stage, so a test can kill futextrace there.
PAUSE_ENV = "FUTEXTRACE_INJECT_PAUSE"


class InjectionFailed(Exception):
    """The call could not be made; the target was left as it was (the message says)."""


@dataclass
class Answer:
    """The kernel's answers: slots before and after (GET_SLOTS: 0 = the global hash or
    no private hash yet), SET's return (0, or -errno); None where the thread did not
    get that far (it exited, or was stopped by job control)."""
    tid: int
    before: int | None = None
    result: int | None = None
    after: int | None = None
    found_in: str = ""
    note: str = ""

    def as_json(self, slots: int, comm: str, pid: int) -> dict:
        """As `set`/`run --json` write it and a recording keeps it (docs/json-schema.md)."""
        err = -self.result if self.result is not None and self.result < 0 else None
        result = None if self.result is None else "ok" if err is None else errno.errorcode.get(err, str(err))
        return {"pid": pid, "tid": self.tid, "comm": comm, "requested_slots": slots,
                "before_slots": self.before, "result": result, "after_slots": self.after,
                "call_through": self.found_in, "note": self.note or None}


def _pause(stage: str) -> None:
    want = os.environ.get(PAUSE_ENV, "")
    if want.split(":")[0] == stage:
        print(f"futextrace: test pause at {stage}", flush=True)
        time.sleep(float(want.split(":")[1]))


def _blocked_signals(pid: int, tid: int) -> int:
    return int(status_fields(pid, tid).get("SigBlk", "0"), 16)


def _stack_room(pid: int, lowest: int, rsp: int) -> bool:
    """The frame lies in the mapping that holds the stack pointer (nothing is mapped
    on the thread's behalf: a stack that would have to grow is refused)."""
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= rsp - 1 < hi:
                return lo <= lowest and "w" in line.split()[1]
    return False


def stop_thread(tid: int) -> None:
    """Seize and interrupt `tid`; passes on any signal that stops it first."""
    ptrace.seize(tid)
    ptrace.interrupt(tid)
    while True:
        kind, value = ptrace.wait_stop(tid)
        if kind == "signal":
            ptrace.resume(tid, ptrace.PTRACE_CONT, value)
            continue
        if kind == "event" and value == (ptrace.PTRACE_EVENT_STOP << 8 | signal.SIGTRAP):
            return
        if kind == "event":
            ptrace.detach(tid)
            raise InjectionFailed("the process is stopped by job control; continue it "
                                  "(kill -CONT) and try again")
        raise InjectionFailed(f"the thread exited before it stopped ({kind} {value})")


def _call(tid: int, base: dict, op: int, arg: int, answer: Answer) -> int | None:
    """One prctl through the gadget; its return value, or None if the thread is gone or
    stopped by job control (then it finishes the sequence on its own)."""
    regs = ptrace.get_regs(tid)
    for name, value in base.items():
        setattr(regs, name, value)
    regs.rax, regs.rdi, regs.rsi, regs.rdx, regs.r10 = SYS_PRCTL, PR_FUTEX_HASH, op, arg, 0
    ptrace.set_regs(tid, regs)
    _pause(f"regs-set-{op}")
    entered = False
    ptrace.resume(tid, ptrace.PTRACE_SYSCALL)
    while True:
        kind, value = ptrace.wait_stop(tid)
        if kind == "syscall":
            op_seen, value = ptrace.syscall_stop(tid)
            if op_seen == ptrace.SYSCALL_INFO_EXIT and entered:
                return value
            if op_seen == ptrace.SYSCALL_INFO_ENTRY and value == SYS_PRCTL:
                entered = True
                _pause(f"in-call-{op}")
            ptrace.resume(tid, ptrace.PTRACE_SYSCALL)
        elif kind == "signal":          # delivered now, on the injected context; its
            ptrace.resume(tid, ptrace.PTRACE_SYSCALL, value)   # handler returns into it
        elif kind == "event":           # a job-control stop: leave it stopped, as it was asked
            answer.note = "the process was stopped by job control during the call"
            return None
        else:
            answer.note = f"the process ended during the call ({kind} {value})"
            raise _Gone()


class _Gone(Exception):
    pass


def run_calls(pid: int, tid: int, slots: int, kill_if_refused: bool = False,
              release=ptrace.detach) -> Answer:
    """With `tid` in a ptrace stop (stop_thread, or the exec stop of a new image):
    GET, SET `slots`, GET, then detach. The thread resumes where it stopped.
    kill_if_refused: a new image the kernel refused the size for is killed before
    its first instruction (never started half set up). release: how the thread is let
    go (detach; `run --children` keeps it traced and resumes it)."""
    found = gadgets.find(pid)
    if found is None:
        release(tid)
        raise InjectionFailed("its code has no `syscall; ret` with a way to rt_sigreturn "
                              "(`mov $15,%rax; syscall` or `pop %rax; ret`): futextrace cannot "
                              "call into it safely")
    saved = ptrace.get_regs(tid)
    resume = frame.resume_point(saved)
    base_addr, data = frame.build(resume, ptrace.get_xstate(tid), _blocked_signals(pid, tid),
                                  found.return_words())
    if not _stack_room(pid, base_addr, resume.rsp):
        release(tid)
        raise InjectionFailed("the thread's stack has no room for the return frame")
    fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
    try:
        os.pwrite(fd, data, base_addr)
    finally:
        os.close(fd)
    _pause("stopped")
    # orig_rax = -1: the kernel sees no syscall to restart on the injected registers.
    base = {"rip": found.syscall_ret, "rsp": base_addr, "orig_rax": _U64}
    answer = Answer(tid, found_in=found.where)
    try:
        for op, arg, field in ((PR_FUTEX_HASH_GET_SLOTS, 0, "before"),
                               (PR_FUTEX_HASH_SET_SLOTS, slots, "result"),
                               (PR_FUTEX_HASH_GET_SLOTS, 0, "after")):
            value = _call(tid, base, op, arg, answer)
            if value is None:
                break
            setattr(answer, field, value)
            if field == "result" and value < 0 and kill_if_refused:
                os.kill(pid, signal.SIGKILL)
                ptrace.wait_stop(tid)
                answer.note = "killed before its first instruction: the size was refused"
                return answer
    except _Gone:
        return answer
    # At the last exit stop %rip is past `syscall`, %rsp on the frame: `ret` takes it home.
    release(tid)
    return answer


def set_slots(pid: int, tid: int, slots: int) -> Answer:
    """Stops `tid` of `pid`, makes the calls, detaches. SIGINT, SIGTERM and SIGHUP
    wait until the thread is released (a few milliseconds)."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        stop_thread(tid)
        return run_calls(pid, tid, slots)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
