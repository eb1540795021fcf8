"""`run --children`: the size in every process the program starts, as strace -f follows.

futextrace stays the tracer of the program's whole tree (every thread, through
fork, vfork, clone and exec events) and makes the calls in each new address space:
after each exec, and in each forked child at its first stop. A vfork child shares
its parent's memory until it execs, so it is set at its exec. Everything else is
passed on as it comes: signals at their delivery stop, job-control stops with
PTRACE_LISTEN. It ends when the program itself exits; any descendants still running
are then detached by the kernel as futextrace exits, unstopped.
"""
from __future__ import annotations

import signal

from futextrace.acting import inject, launch, ptrace
from futextrace.acting.preflight import status_fields
from futextrace.procs.targets import comm_of

OPTIONS = (ptrace.PTRACE_O_TRACESYSGOOD | ptrace.PTRACE_O_TRACEEXEC | ptrace.PTRACE_O_TRACEFORK
           | ptrace.PTRACE_O_TRACEVFORK | ptrace.PTRACE_O_TRACECLONE)
_STOP_SIGNALS = {signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}


def _cont(tid: int) -> None:
    try:
        ptrace.resume(tid, ptrace.PTRACE_CONT)
    except ProcessLookupError:
        pass


def _tgid(tid: int) -> int:
    return int(status_fields(tid).get("Tgid", tid))


class Follower:
    """The trace loop; `answers` holds each process's answers, in order."""

    def __init__(self, root: int, slots: int):
        self.root, self.slots = root, slots
        self.answers: list[dict] = []
        self.seen = {root}                   # tracees whose first stop was handled
        self.root_status: int | None = None

    def _set(self, tid: int, name: str) -> None:
        try:
            # The program itself is never started half set up; a descendant is reported.
            answer = inject.run_calls(_tgid(tid), tid, self.slots, release=_cont,
                                      kill_if_refused=tid == self.root)
        except inject.InjectionFailed as e:
            answer = inject.Answer(tid, note=str(e))
        self.answers.append(answer.as_json(self.slots, name, _tgid(tid)))

    def _on_event(self, tid: int, event: int, sig: int) -> None:
        if event == ptrace.PTRACE_EVENT_EXEC:
            launch.to_exec_return(tid)
            self._set(tid, _comm(tid))
        elif event in (ptrace.PTRACE_EVENT_FORK, ptrace.PTRACE_EVENT_VFORK, ptrace.PTRACE_EVENT_CLONE):
            _cont(tid)      # the new task reports its own first stop (in either order)
        elif tid not in self.seen:
            # A new tracee's first stop. A new process (not a thread) gets the size now;
            # a vfork child shares its parent's memory, so setting it there is a no-op.
            self.seen.add(tid)
            if _tgid(tid) == tid:
                self._set(tid, _comm(tid))
            else:
                _cont(tid)
        elif sig in _STOP_SIGNALS:
            ptrace.resume(tid, ptrace.PTRACE_LISTEN)     # job control: stays stopped, as asked
        else:
            _cont(tid)

    def run(self) -> int:
        """Until the program exits: its exit status (negative: killed by that signal)."""
        while self.root_status is None:
            try:
                tid, kind, value = ptrace.wait_any()
            except ChildProcessError:
                break
            if kind in ("exited", "killed"):
                self.seen.discard(tid)
                if tid == self.root:
                    self.root_status = value if kind == "exited" else -value
            elif kind == "event":
                self._on_event(tid, value >> 8, value & 0xFF)
            elif kind == "signal":
                ptrace.resume(tid, ptrace.PTRACE_CONT, value)
            else:
                _cont(tid)
        return self.root_status if self.root_status is not None else 0


def _comm(tid: int) -> str:
    return comm_of(tid) or "?"
