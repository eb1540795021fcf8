"""Every file futextrace writes, and the files it reads back.

Outputs are opened before tracing starts, so a bad path fails fast; every
write error afterwards (ENOSPC, EPIPE, EIO, a closed stdout) becomes one
FileProblem line with exit code 5 instead of a traceback. Reads take regular
files only, up to a size cap: `report /dev/zero` once read until memory ran out.
"""
from __future__ import annotations

import json
import os
import stat
import sys

from futextrace.errors import FileProblem

MAX_READ_BYTES = 512 << 20     # a recording of a busy hour is a few MiB


class Output:
    """A file, or stdout for "-", whose write errors are one-line FileProblems."""

    def __init__(self, file, name: str):
        self.file = file
        self.name = name

    @property
    def is_stdout(self) -> bool:
        return self.file is sys.stdout

    def write(self, text: str) -> None:
        try:
            self.file.write(text)
            self.file.flush()
        except (OSError, ValueError) as e:    # ValueError: written after a close
            raise self._failed(e) from None

    def write_json(self, data, indent: int | None = 1) -> None:
        """The whole document, then close (stdout stays open)."""
        self.write(json.dumps(data, indent=indent) + "\n")
        self.close()

    def write_jsonl(self, row: dict) -> None:
        self.write(json.dumps(row) + "\n")

    def close(self) -> None:
        if self.is_stdout or self.file.closed:
            return
        try:
            self.file.close()
        except OSError as e:   # a full disk may show only when the buffer goes out
            raise self._failed(e) from None

    def _failed(self, e: Exception) -> FileProblem:
        why = getattr(e, "strerror", None) or str(e)
        if self.is_stdout:
            _silence_stdout()
        else:
            _close_quietly(self.file)
        return FileProblem(f"cannot write {self.name}: {why}")


def _close_quietly(f) -> None:
    try:
        f.close()
    except (OSError, ValueError):
        pass


def _silence_stdout() -> None:
    """After stdout failed, point fd 1 at /dev/null: what Python still holds in
    its buffer is then dropped at exit instead of failing again as a second,
    traceback-like message."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != 1:     # with fd 1 closed, the open itself took it
            os.dup2(devnull, 1)
            os.close(devnull)
    except OSError:
        pass


def stdout_output() -> Output:
    return Output(sys.stdout, "stdout")


def echo(text: str) -> None:
    """A line of text on stdout, with stdout's write errors as FileProblems."""
    stdout_output().write(text + "\n")


def require_stdout() -> None:
    """Fail before tracing when stdout is closed (`>&-`) and something is to be
    shown on it: Python would otherwise drop every line silently."""
    if sys.stdout is None or not _fd_open(1):
        raise FileProblem("stdout is closed: nothing could be shown; redirect it (>/dev/null) "
                          "or use -q with --json FILE")


def guard_closed_stdout() -> None:
    """Occupy a closed fd 1 with /dev/null, so no file opened later takes its
    number (and a traced command does not write into it)."""
    if not _fd_open(1):
        _silence_stdout()


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def open_output(path: str) -> Output:
    if path == "-":
        require_stdout()
        return stdout_output()
    try:
        return Output(open(path, "w"), path)
    except OSError as e:
        raise FileProblem(f"cannot write {path}: {e.strerror}")


def write_json(out: Output, data: dict) -> None:
    out.write_json(data)


def read_bounded(path: str, what: str = "file", limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of regular file `path`, at most `limit`. Opened without
    blocking (a FIFO would wait for a writer) and checked before reading."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise FileProblem(f"cannot read {path}: {e.strerror}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _kind(st.st_mode)
            raise FileProblem(f"{path} is {kind}, not a {what}: give a regular file")
        if st.st_size > limit:
            raise FileProblem(f"{path} is {st.st_size / (1 << 20):,.0f} MiB, more than the "
                              f"{limit >> 20} MiB a {what} may be")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise FileProblem(f"cannot read {path}: {e.strerror}")
    finally:
        os.close(fd)
    if len(data) > limit:   # grew while we read it
        raise FileProblem(f"{path} is more than the {limit >> 20} MiB a {what} may be")
    return data


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"
