"""What to trace: validating PIDs, TIDs and cgroups, and starting a command
held before exec() so the tracer is attached before its first instruction."""
from __future__ import annotations

import os
import signal
import tempfile

from futextrace.errors import TargetError

PF_KTHREAD = 0x00200000


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    return data[data.rindex(")") + 2:].split()


def alive(pid: int) -> bool:
    try:
        return _stat_fields(pid)[0] not in ("Z", "X")
    except (OSError, ValueError):
        return False


def comm_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def check_pid(pid: int) -> None:
    if pid <= 0 or not alive(pid):
        raise TargetError(f"no process with PID {pid}: check the PID with `ps -p {pid}`")
    flags = int(_stat_fields(pid)[6])
    if flags & PF_KTHREAD:
        raise TargetError(f"PID {pid} ({comm_of(pid)}) is a kernel thread: it has no futex hash; "
                          "give the PID of a user process")
    try:
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        status = ""
    tgid = next((int(l.split()[1]) for l in status.splitlines() if l.startswith("Tgid:")), pid)
    if tgid != pid:
        raise TargetError(f"{pid} is a thread of process {tgid}: use -p {tgid}, or --tid {pid}")


def check_tid(tid: int) -> None:
    if tid <= 0 or not os.path.exists(f"/proc/{tid}") or not alive(tid):
        raise TargetError(f"no thread with TID {tid}")


def cgroup_id(path: str) -> int:
    """cgroup v2 id = inode number of the cgroup's directory."""
    full = path if path.startswith("/sys/fs/cgroup") else os.path.join("/sys/fs/cgroup", path.lstrip("/"))
    if not os.path.isfile(os.path.join(full, "cgroup.procs")):
        raise TargetError(f"{path} is not a cgroup v2 directory: give a path under /sys/fs/cgroup "
                          "(see `cat /proc/<pid>/cgroup`)")
    return os.stat(full).st_ino


class StoppedChild:
    """fork() now, exec() when go() is called: the tracer attaches in between.
    A command that cannot be started is reported as a TargetError."""

    def __init__(self, argv: list[str]):
        if not argv:
            raise TargetError("no command given after --")
        self.argv = argv
        self._status = None
        self._out = tempfile.TemporaryFile()
        go_r, self._go_w = os.pipe()
        err_r, err_w = os.pipe()
        os.set_inheritable(err_w, False)
        self.pid = os.fork()
        if self.pid == 0:  # child
            try:
                os.close(self._go_w)
                os.close(err_r)
                os.read(go_r, 1)
                os.dup2(self._out.fileno(), 1)
                os.execvp(argv[0], argv)
            except BaseException as e:
                os.write(err_w, (getattr(e, "strerror", None) or str(e)).encode())
            finally:
                os._exit(127)
        os.close(go_r)
        os.close(err_w)
        self._err_r = err_r

    def go(self):
        os.write(self._go_w, b"x")
        os.close(self._go_w)
        # exec() closes err_w (CLOEXEC): EOF means it started, data means it failed.
        msg = os.read(self._err_r, 512).decode(errors="replace")
        os.close(self._err_r)
        if msg:
            self.exited()
            raise TargetError(f"cannot start {self.argv[0]!r}: {msg}")

    def exited(self) -> bool:
        if self._status is not None:
            return True
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            self._status = -1
            return True
        if pid == 0:
            return False
        self._status = os.waitstatus_to_exitcode(status)
        return True

    def status(self):
        return self._status

    def output(self) -> str:
        self._out.seek(0)
        return self._out.read().decode(errors="replace")

    def output_tail(self, n: int = 4096) -> str:
        return self.output()[-n:]

    def kill(self):
        if not self.exited():
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                self._status = -9
            except (ProcessLookupError, ChildProcessError):
                pass
