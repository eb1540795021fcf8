"""What to trace: validating PIDs, TIDs and cgroups, and starting a command
held before exec() so the tracer is attached before its first instruction."""
from __future__ import annotations

import os
import shutil
import signal
import threading

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


def comm_of(pid: int) -> str | None:
    """The process's name, exactly as the kernel keeps it (a name may end in a
    space, and --comm compares whole names); None: the process is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().rstrip("\n")
    except OSError:
        return None


def comm_label(pid: int) -> str:
    """comm_of as a recording's or a metric's `comm`: "" for a process gone."""
    return comm_of(pid) or ""


def check_pid(pid: int) -> None:
    if pid <= 0 or not alive(pid):
        raise TargetError(f"no process with PID {pid}: check the PID with `ps -p {pid}`")
    flags = int(_stat_fields(pid)[6])
    if flags & PF_KTHREAD:
        raise TargetError(f"PID {pid} ({comm_label(pid)}) is a kernel thread: it has no futex hash; "
                          "give the PID of a user process")
    try:
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        status = ""
    tgid = next((int(l.split()[1]) for l in status.splitlines() if l.startswith("Tgid:")), pid)
    if tgid != pid:
        raise TargetError(f"{pid} is a thread of process {tgid}: use -p {tgid}, or --tid {pid}")


def _check_runnable(cmd: str) -> None:
    """Fail before anything is compiled or attached when the command is
    plainly missing (exec() itself reports the rarer failures)."""
    if "/" in cmd:
        ok, why = os.path.isfile(cmd) and os.access(cmd, os.X_OK), "no such executable file"
    else:
        ok, why = shutil.which(cmd) is not None, "not found in $PATH"
    if not ok:
        raise TargetError(f"cannot start {cmd!r}: {why}")


def _stdout_is_terminal() -> bool:
    try:
        return os.isatty(1)
    except OSError:
        return False


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


TAIL_BYTES = 4096   # of the command's stdout kept for the recording


class StdoutTee:
    """The command's stdout, passed on to ours as it comes, with its last
    TAIL_BYTES kept. Used when our stdout is not a terminal; on a terminal the
    command writes to it directly (a pipe would make its C library buffer
    whole blocks instead of lines). If our stdout goes away (a closed pipe),
    the command's pipe is closed too: it gets SIGPIPE as it would without us.
    `out_fd` 2: the command's stdout goes to our stderr (our stdout carries
    the recording's JSON)."""

    def __init__(self, out_fd: int = 1):
        self.out_fd = out_fd
        self.read_fd, self.write_fd = os.pipe()
        os.set_inheritable(self.read_fd, False)
        self._tail = bytearray()
        self.error: OSError | None = None       # why forwarding stopped
        self._thread = threading.Thread(target=self._pump, daemon=True, name="futextrace-stdout")
        self._thread.start()

    def _pump(self):
        try:
            while chunk := os.read(self.read_fd, 65536):
                self._tail += chunk
                del self._tail[:-TAIL_BYTES]
                self._forward(chunk)
                if self.error is not None:
                    break
        finally:
            os.close(self.read_fd)

    def _forward(self, chunk: bytes):
        view = memoryview(chunk)
        try:
            while view:
                view = view[os.write(self.out_fd, view):]
        except OSError as e:
            self.error = e

    def finish(self, timeout: float = 2.0) -> None:
        """Wait for the rest of the output (a daemon the command left behind
        may hold the pipe open: then give up after `timeout`)."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1
        self._thread.join(timeout)

    def tail(self) -> str:
        return bytes(self._tail).decode(errors="replace")


class StoppedChild:
    """fork() now, exec() when go() is called: the tracer attaches in between.
    The command's stdout and stderr reach ours untouched (see StdoutTee), or
    with `stdout_to_stderr` its stdout goes to our stderr, so that JSON on our
    stdout stays parseable. A command that cannot be started is a TargetError."""

    def __init__(self, argv: list[str], stdout_to_stderr: bool = False):
        if not argv:
            raise TargetError("no command given after --")
        self.argv = argv
        _check_runnable(argv[0])
        self._status = None
        self._tee = (StdoutTee(2) if stdout_to_stderr else
                     None if _stdout_is_terminal() else StdoutTee())
        go_r, self._go_w = os.pipe()
        err_r, err_w = os.pipe()
        os.set_inheritable(err_w, False)
        self.pid = os.fork()
        if self.pid == 0:  # child
            try:
                os.close(self._go_w)
                os.close(err_r)
                os.read(go_r, 1)
                if self._tee is not None:
                    os.dup2(self._tee.write_fd, 1)
                    os.close(self._tee.write_fd)
                # Python ignores these; the command gets the defaults it would get from a shell.
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
                os.execvp(argv[0], argv)
            except BaseException as e:
                os.write(err_w, (getattr(e, "strerror", None) or str(e)).encode())
            finally:
                os._exit(127)
        os.close(go_r)
        os.close(err_w)
        self._err_r = err_r
        if self._tee is not None:
            os.close(self._tee.write_fd)     # the child holds it now: EOF when it exits
            self._tee.write_fd = -1

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

    def output_tail(self) -> str | None:
        """The last TAIL_BYTES of the command's stdout, once it has exited;
        None when it wrote straight to our terminal."""
        if self._tee is None:
            return None
        self._tee.finish()
        return self._tee.tail()

    def kill(self):
        if not self.exited():
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                self._status = -9
            except (ProcessLookupError, ChildProcessError):
                pass
