"""Processes coming and going, pushed by the kernel: the proc connector
(netlink process events: fork, exec, exit), read with pyroute2.

`snapshot --watch` re-reads the task iterator when a process forks, execs or
exits instead of polling, and `record -p` learns of its target's exit, with
the exit status, without reading /proc. The connector needs CONFIG_PROC_EVENTS
and CAP_NET_ADMIN in the initial network namespace; `open_events()` says why
when it cannot be used, and the callers fall back to polling, labelled.
"""
from __future__ import annotations

import errno
import os
import select
import socket
import threading

from futextrace.procs.connector_import import proc_connector
from futextrace.procs.targets import alive

PROC_EVENT_FORK = 0x1
PROC_EVENT_EXEC = 0x2
PROC_EVENT_EXIT = 0x80000000
DRAIN_MAX = 4096          # events taken per poll() at most
RCVBUF = 4 << 20          # socket buffer: room for a fork storm between two polls
SO_RCVBUFFORCE = 33       # root may exceed net.core.rmem_max
_NAMES = {PROC_EVENT_FORK: "fork", PROC_EVENT_EXEC: "exec", PROC_EVENT_EXIT: "exit"}


class Unavailable(Exception):
    """The proc connector cannot be used here; the message says why."""


def exit_text(wait_status: int) -> str:
    """A wait(2) status as words: 'exit status 3' or 'killed by signal 9'."""
    if wait_status & 0x7F:
        return f"killed by signal {wait_status & 0x7F}"
    return f"exit status {wait_status >> 8 & 0xFF}"


def preload() -> None:
    """Import pyroute2's connector in the background, for a caller that opens it
    before attaching (--comm): 0.13 s here (seconds in a QEMU/TCG guest), while
    the BPF loads that run meanwhile release the GIL. A later import waits for
    this one to finish."""
    def _import():
        try:
            proc_connector()
        except ImportError:
            pass        # ProcEvents says so when it is needed
    threading.Thread(target=_import, name="pyroute2-import", daemon=True).start()


class ProcEvents:
    """A subscription to fork/exec/exit events. `poll()` returns them as dicts:
    {"event": "fork"|"exec"|"exit"|"overflow", "tgid", "tid", "status"}."""

    def __init__(self):
        try:
            ProcEventSocket, ProcEventMarshal, NetlinkError = proc_connector()
        except ImportError as e:
            raise Unavailable(f"pyroute2 is not installed ({e})") from None
        try:
            self._sock = ProcEventSocket()
        except OSError as e:
            raise Unavailable(f"no netlink connector socket ({e.strerror}): "
                              "kernel without CONFIG_CONNECTOR/CONFIG_PROC_EVENTS?") from None
        try:
            self._sock.bind()
            self._sock.control(listen=True)
            # Datagrams are read from the fd and parsed with pyroute2's marshal:
            # its get() buffers messages where select() cannot see them (measured:
            # 52 of 100 exits seen with get(), 100 of 100 with reads of the fd).
            self._fd, self._marshal = self._sock.fileno(), ProcEventMarshal()
            self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        except (OSError, NetlinkError) as e:
            self._sock.close()
            why = getattr(e, "strerror", None) or str(e)
            raise Unavailable(f"the proc connector refused to subscribe ({why}): it needs "
                              "CAP_NET_ADMIN in the initial network namespace") from None

    def fileno(self) -> int:
        return self._fd

    def poll(self, timeout: float) -> list[dict]:
        """Events that arrived within `timeout` seconds (0: only those already queued)."""
        msgs: list = []
        wait = max(0.0, timeout)
        # Drain what is queued (bounded: a fork storm must not starve the caller).
        while len(msgs) < DRAIN_MAX and select.select([self._fd], [], [], wait)[0]:
            wait = 0.0
            try:
                msgs += self._marshal.parse(os.read(self._fd, 1 << 16))
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                # The socket overflowed: events were lost; the caller re-reads everything.
                msgs.append({"what": "overflow"})
        return [ev for ev in map(_decode, msgs) if ev is not None]

    def close(self):
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _decode(msg) -> dict | None:
    if msg.get("what") == "overflow":
        return {"event": "overflow", "tgid": 0, "tid": 0, "status": None}
    kind = _NAMES.get(msg.get("what"))
    if kind == "fork":
        return {"event": kind, "tgid": msg["child_tgid"], "tid": msg["child_pid"], "status": None}
    if kind == "exec":
        return {"event": kind, "tgid": msg["process_tgid"], "tid": msg["process_pid"], "status": None}
    if kind == "exit":
        return {"event": kind, "tgid": msg["process_tgid"], "tid": msg["process_pid"],
                "status": msg["exit_code"]}
    return None


def open_events() -> tuple[ProcEvents | None, str]:
    """(events, "") or (None, why not)."""
    try:
        return ProcEvents(), ""
    except Unavailable as e:
        return None, str(e)


class ExitWatch:
    """Tells when one of `pids` exits, from the proc connector's exit events
    (the thread-group leader's exit, with its wait status)."""

    def __init__(self, events: ProcEvents, pids: list[int]):
        self._events = events
        self._pids = set(pids)
        # pid -> wait status (None: gone before we subscribed, status unknown)
        self.exited: dict[int, int | None] = {p: None for p in pids if not alive(p)}

    def any_exited(self) -> bool:
        for ev in self._events.poll(0):
            if ev["event"] == "exit" and ev["tid"] == ev["tgid"] and ev["tgid"] in self._pids:
                self.exited[ev["tgid"]] = ev["status"]
        return bool(self.exited)

    def describe(self, pid: int) -> str:
        status = self.exited.get(pid)
        return f" ({exit_text(status)})" if status is not None else ""

    def close(self):
        self._events.close()


def exit_watch(pids: list[int]) -> ExitWatch | None:
    """An ExitWatch over `pids`, or None when there are none or the connector
    is unavailable (the caller then polls /proc)."""
    if not pids:
        return None
    events, _why = open_events()
    return ExitWatch(events, pids) if events else None
