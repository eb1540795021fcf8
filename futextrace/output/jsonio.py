"""Every file futextrace writes, and the files it reads back.

A failed run never destroys the last recording. An output path is checked
before tracing starts (its directory must take a new file), so a bad path
fails fast, but the file itself is not touched until there is something to
write: the text goes to a temporary file in the same directory, which is
renamed over the path (atomic on one file system). A document (--json) is
renamed once it is complete; a stream (--jsonl, `snapshot --watch --json`)
once its first line is written, and grows in place after that, so it can be
followed (tail -F) while nothing replaces the old file before the new run has
a line to show. Devices, FIFOs and the like are written directly.

Every write error (ENOSPC, EPIPE, EIO, a closed stdout) becomes one
FileProblem line with exit code 5 instead of a traceback. Reads take regular
files only, up to a size cap, so `report /dev/zero` cannot fill the memory.
"""
from __future__ import annotations

import atexit
import json
import os
import stat
import sys
import tempfile

from futextrace.errors import FileProblem
from futextrace.recording import Interval, Recording

MAX_READ_BYTES = 512 << 20     # a recording of a busy hour is a few MiB


class Output:
    """A file, or stdout for "-", whose write errors are one-line FileProblems.

    For a path, `file` stays None until the first write (see the module's
    docstring): then a temporary file is made beside the path, and renamed
    over it when the document is complete (`close`) or, for a stream, once
    its first line is written."""

    def __init__(self, file, name: str, path: str | None = None):
        self.file = file
        self.name = name
        self.path = path            # where the text goes in the end (None: `file` is it)
        self._tmp: str | None = None
        self._stream = False

    @property
    def is_stdout(self) -> bool:
        return self.file is sys.stdout

    def write(self, text: str) -> None:
        try:
            if self.file is None:
                self._open()
            self.file.write(text)
            self.file.flush()
            if self._stream and self._tmp is not None:
                self._commit()   # a stream's first line: it replaces the old file now
        except (OSError, ValueError) as e:    # ValueError: written after a close
            raise self._failed(e) from None

    def write_json(self, data, indent: int | None = 1) -> None:
        """The whole document, then close (stdout stays open; a file is renamed into place)."""
        self.write(json.dumps(data, indent=indent) + "\n")
        self.close()

    def write_jsonl(self, row: Interval | dict) -> None:
        """One line: a `-i` interval (the recording's `intervals[]`) or a snapshot."""
        self._stream = True
        self.write(json.dumps(row) + "\n")

    def close(self) -> None:
        """The end of the text: a file is flushed and, unless a stream already
        did, renamed over its path (empty if nothing was written: the run is
        complete). A failed run does not close: its path is left as it was."""
        if self.is_stdout or (self.file is not None and self.file.closed):
            return
        try:
            if self.file is None:   # a complete run that wrote nothing: an empty file
                self._open()
            self.file.close()
            if self._tmp is not None:
                self._commit()
        except OSError as e:   # a full disk may show only when the buffer goes out
            raise self._failed(e) from None

    def discard(self) -> None:
        """Drop what was written but not yet renamed into place (a failed run)."""
        if self.file is not None and not self.is_stdout:
            _close_quietly(self.file)
        self._remove_tmp()

    def _open(self) -> None:
        """The temporary file beside the path (a regular file's place), else the
        path itself (a device, a FIFO: nothing to replace)."""
        if not _replaceable(self.path):
            self.file = open(self.path, "w")
            return
        real = os.path.realpath(self.path)   # a symlink keeps pointing at the new file
        fd, self._tmp = tempfile.mkstemp(dir=os.path.dirname(real) or ".",
                                         prefix=f".{os.path.basename(real)}.", suffix=".tmp")
        _PENDING.add(self._tmp)
        _copy_mode(fd, real)
        self.file = os.fdopen(fd, "w")

    def _commit(self) -> None:
        os.replace(self._tmp, os.path.realpath(self.path))
        _PENDING.discard(self._tmp)
        self._tmp = None

    def _remove_tmp(self) -> None:
        if self._tmp is not None:
            _unlink_quietly(self._tmp)
            _PENDING.discard(self._tmp)
            self._tmp = None


    def _failed(self, e: Exception) -> FileProblem:
        why = getattr(e, "strerror", None) or str(e)
        if self.is_stdout:
            _silence_stdout()
        else:
            self.discard()     # the old file stays as it was
        return FileProblem(f"cannot write {self.name}: {why}")


# Temporary files not yet renamed into place: removed at exit (a run ended by
# an exception between the first write and the rename leaves no litter).
_PENDING: set[str] = set()


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


@atexit.register
def _remove_pending() -> None:
    for path in list(_PENDING):
        _unlink_quietly(path)

def _replaceable(path: str) -> bool:
    """A regular file, or nothing yet: written beside and renamed over."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True


def _copy_mode(fd: int, path: str) -> None:
    """The new file gets the old one's mode and owner (a recording replaced by
    a run under sudo stays the user's), or, new, what open() would give it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        return
    os.fchmod(fd, stat.S_IMODE(st.st_mode))
    try:
        os.fchown(fd, st.st_uid, st.st_gid)
    except OSError:
        pass    # not ours to give away: it stays the writer's


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
    """An Output for `path` ("-": stdout), checked now and written later: the
    file at `path` is not touched until there is something to write."""
    if path == "-":
        require_stdout()
        return stdout_output()
    check_writable(path)
    return Output(None, path, path)


def check_writable(path: str) -> None:
    """Fail fast, before any tracing, where `path` could not be written: a
    directory, a missing or read-only directory. Probed with a temporary file
    beside it, removed at once; the path itself is left alone."""
    try:
        if stat.S_ISDIR(os.stat(path).st_mode):
            raise FileProblem(f"cannot write {path}: it is a directory; give a file name")
    except FileNotFoundError:
        pass
    except OSError as e:
        raise FileProblem(f"cannot write {path}: {e.strerror}")
    if not _replaceable(path):
        if not os.access(path, os.W_OK):
            raise FileProblem(f"cannot write {path}: permission denied")
        return
    real = os.path.realpath(path)
    try:
        fd, probe = tempfile.mkstemp(dir=os.path.dirname(real) or ".", prefix=".futextrace-probe.")
    except OSError as e:
        raise FileProblem(f"cannot write {path}: {e.strerror}")
    os.close(fd)
    os.unlink(probe)


def write_file(path: str, text: str) -> None:
    """A whole text file (an HTML page), through a temporary file renamed into place."""
    out = Output(None, path, path)
    out.write(text)
    out.close()


def write_json(out: Output, data: dict) -> None:
    out.write_json(data)


def write_recording(out: Output, rec: Recording) -> None:
    """`record --json`: the recording (futextrace/recording.py), indented by one."""
    out.write_json(rec)


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


def replace_with(path: str, writer) -> None:
    """`writer(binary file)` fills a temporary file beside `path`, which then
    replaces it (pictures); a device or FIFO is written directly. OSErrors
    pass through, with the temporary file removed and `path` as it was."""
    if not _replaceable(path):
        with open(path, "wb") as f:
            writer(f)
        return
    real = os.path.realpath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(real) or ".", prefix=f".{os.path.basename(real)}.",
                               suffix=".tmp")
    _PENDING.add(tmp)
    try:
        _copy_mode(fd, real)
        with os.fdopen(fd, "wb") as f:
            writer(f)
        os.replace(tmp, real)
        _PENDING.discard(tmp)
    finally:
        if tmp in _PENDING:      # not renamed: a failed write
            _unlink_quietly(tmp)
            _PENDING.discard(tmp)
